"""Paired statistics and the pairing of two runs' episodes (engine/paired.py, engine/diff.py)."""

from __future__ import annotations

import math
import random

import msgspec
import pytest

from dialogsim.engine.diff import Episode, compare, first_difference, render
from dialogsim.engine.paired import Columns, mcnemar_exact, paired_bootstrap


def test_mcnemar_exact_is_the_two_sided_binomial_test_of_the_discordant_pairs():
    """Known values: 10 against 0 gives 2 * 0.5**10; it is symmetric; no discordant pair gives 1."""
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 1024)
    tail = sum(math.comb(10, i) for i in range(4)) / 1024
    assert mcnemar_exact(3, 7) == mcnemar_exact(7, 3) == pytest.approx(2 * tail)
    assert mcnemar_exact(0, 0) == mcnemar_exact(5, 5) == 1.0


def _columns(a, b, den_a=None, den_b=None):
    return Columns(a_num=a, a_den=den_a or [1.0] * len(a), b_num=b, b_den=den_b or [1.0] * len(b))


def test_the_bootstrap_is_seeded_and_its_interval_holds_the_difference():
    """The same seed gives the same interval, which contains the observed difference; a constant shift has a
    zero-width interval at the shift; pairs lacking a metric (denominators 0) weigh nothing."""
    rng = random.Random(3)
    a = [float(rng.random() < 0.9) for _ in range(300)]
    b = [float(rng.random() < 0.7) for _ in range(300)]
    first = paired_bootstrap({"s": _columns(a, b)}, resamples=500, seed=1)["s"]
    assert first == paired_bootstrap({"s": _columns(a, b)}, resamples=500, seed=1)["s"]
    assert first.low <= first.delta <= first.high < 0 and first.pairs == 300
    shift = paired_bootstrap({"t": _columns([1.0, 2.0, 3.0], [3.0, 4.0, 5.0])}, resamples=200)["t"]
    assert (shift.delta, shift.low, shift.high) == (2.0, 2.0, 2.0)
    ratio = paired_bootstrap({"r": _columns([2.0, 0.0, 4.0], [1.0, 0.0, 2.0], [2.0, 0.0, 4.0], [2.0, 0.0, 4.0])},
                             resamples=200)["r"]
    assert (ratio.a, ratio.b, ratio.pairs) == (1.0, 0.5, 2)


def _episode(ep, outcome, turns, scenario=None, **metrics):
    return Episode(key=(scenario or ep, 0, ""), ep=ep, outcome=outcome, turns=turns,
                   metrics={"success": (float(outcome == "success"), 1.0), "turns": (float(len(turns)), 1.0),
                            **{k: v for k, v in metrics.items()}})


def test_first_difference_of_two_episodes_turns():
    """The first turn that differs; an episode that stops early differs where it stopped; equal ones do not."""
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([1, 2], [1, 2]) is None


def test_two_runs_are_paired_by_scenario_and_trial_and_the_unpaired_are_counted():
    """Transitions name the pairs' episodes, McNemar counts the discordant pairs, missing pairs are listed."""
    a = [_episode("e0", "success", [1, 2]), _episode("e1", "success", [1, 2, 3]), _episode("e2", "failure", [4]),
         _episode("e3", "success", [7])]
    b = [_episode("x0", "success", [1, 2], "e0"), _episode("x1", "failure", [1, 9], "e1"),
         _episode("x2", "success", [5], "e2"), _episode("x9", "success", [1], "e9")]
    diff = compare("A", a, "B", b, resamples=100)
    assert diff.pairs == 3 and diff.only_in_a == ["e3"] and diff.only_in_b == ["x9"]
    assert diff.transitions == {"failure -> success": ["e2"], "success -> failure": ["e1"]}
    assert [p.first_differing_turn for p in diff.episodes] == [None, 1, 0]
    success = diff.metrics[0]
    assert success.name == "success" and success.discordant == (1, 1) and success.mcnemar_p == 1.0
    text = render(diff)
    assert "success -> failure" in text and "only in A: e3" in text and "McNemar exact p=1" in text


def test_a_fork_pairs_with_its_parent_when_each_is_alone_with_its_scenario():
    """Episodes left over by (scenario, trial, branch) pair by scenario and trial when each is alone with them;
    two branches of one scenario stay unpaired against a single mainline."""
    a = [_episode("e0", "success", [1, 2]), _episode("e1", "success", [1])]
    fork = _episode("e0-x", "failure", [1, 3], "e0")
    fork.key = ("e0", 0, "x")
    two = [msgspec.structs.replace(fork, ep=f"e1-{n}", key=("e1", 0, n)) for n in "yz"]
    diff = compare("A", a, "B", [fork, *two], resamples=10)
    assert [(p.a, p.b, p.first_differing_turn) for p in diff.episodes] == [("e0", "e0-x", 1)]
    assert diff.only_in_a == ["e1"] and diff.only_in_b == ["e1-y", "e1-z"]
