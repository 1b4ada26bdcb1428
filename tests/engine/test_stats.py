"""Corpus statistics and `dialogsim stats`: figures, the comparison with real SGD, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dialogsim.engine.cli import main
from dialogsim.engine.stats import Dialogue, compare, from_episode, summarize, total_variation
from dialogsim.scenarios.sgd.corpus import read_corpus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sgd"


def _dialogue(outcome: str, user_texts: list[str]) -> Dialogue:
    turns = []
    for text in user_texts:
        turns.append(("USER", text, ["INFORM", "INFORM_INTENT"], ["FindRestaurants"]))
        turns.append(("SYSTEM", "ok", ["REQUEST"], []))
    return Dialogue(["Restaurants_2"], turns, outcome)


def test_summary_figures():
    """Success rate, turns, acts per turn, shares, distinct ratio and intents from hand-made dialogues."""
    s = summarize([_dialogue("success", ["a", "b"]), _dialogue("failure", ["a"])])
    assert s["dialogues"] == 2 and s["success_rate"] == 0.5
    assert s["turns_mean"] == 3.0
    assert s["user_acts_per_turn"] == 2.0 and s["system_acts_per_turn"] == 1.0
    assert s["user_acts"] == {"INFORM": 0.5, "INFORM_INTENT": 0.5}
    assert s["user_distinct_utterances"] == pytest.approx(2 / 3)
    assert s["intents"] == {"FindRestaurants": 1.0}


def test_model_usage_per_role_is_summed_and_shown():
    """Episodes' usage per role adds up; the table shows calls, tokens and cost per role and per dialogue."""
    from dialogsim.engine.events import EpisodeEnded, RoleUsage
    from dialogsim.engine.stats import render

    env = dict(run="r", seq=0, t=0.0, wall=0)
    episodes = [[EpisodeEnded(**env, ep=f"e{i}", outcome="success", usage={
        "user": RoleUsage(calls=2, input_tokens=100, output_tokens=10, cost=0.25),
        "agent": RoleUsage(calls=0, input_tokens=5, output_tokens=5)})] for i in range(2)]
    s = summarize(map(from_episode, episodes + [[EpisodeEnded(**env, ep="e9", outcome="failure")]]))
    assert s["usage"]["user"] == {"calls": 4, "cached": 0, "input_tokens": 200, "output_tokens": 20, "cost": 0.5,
                                  "cost_per_dialogue": pytest.approx(0.5 / 3)}
    assert s["usage"]["agent"]["cost"] is None and s["usage"]["agent"]["input_tokens"] == 10
    table = render(s)
    assert "model usage" in table and "  user" in table and "0.5000" in table
    assert "model usage" not in render(summarize([_dialogue("success", ["a"])]))


def test_total_variation_and_comparison():
    """TV distance is 0 for equal and 1 for disjoint distributions; the turn ratio is run/real."""
    assert total_variation({"a": 1.0}, {"a": 1.0}) == 0.0
    assert total_variation({"a": 1.0}, {"b": 1.0}) == 1.0
    run = summarize([_dialogue("success", ["a", "b"])])
    real = summarize([_dialogue("success", ["a", "b", "c", "d"])])
    cmp = compare(run, real)
    assert cmp["turns_ratio"] == 0.5 and not cmp["turns_within_25pct"]
    assert cmp["user_act_tv"] == 0.0


def test_real_sgd_reading():
    """The fixture's SGD dialogues are read with their services, speakers and acts."""
    dialogues = [from_episode(events) for events in read_corpus(FIXTURES)]
    assert len(dialogues) == 6
    s = summarize(dialogues)
    assert s["turns_mean"] > 4
    assert "OFFER" in s["system_acts"] and "INFORM_INTENT" in s["user_acts"]


def test_stats_command_on_a_real_run(tmp_path, capsys):
    """`dialogsim stats` on an SGD run: the table, --json, and --compare with real dialogues."""
    run = tmp_path / "run"
    assert main(["run", "--scenarios", "sgd", "--episodes", "40", "--out", str(run), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["stats", str(run)]) == 0
    table = capsys.readouterr().out
    assert "success rate" in table and "system acts (share)" in table
    assert main(["stats", str(run), "--compare", str(FIXTURES), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["dialogues"] == 40
    assert 0.0 <= out["run"]["success_rate"] <= 1.0
    assert out["real"]["dialogues"] >= 1
    assert set(out["real"]["services"]) <= set(out["run"]["services"])
    assert 0.0 <= out["comparison"]["user_act_tv"] <= 1.0


def test_stats_bad_input(tmp_path, capsys):
    """A missing run, or a comparison directory without dialogues: one clear line, exit status 2."""
    assert main(["stats", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    run = tmp_path / "run"
    assert main(["run", "--scenarios", "sgd", "--episodes", "2", "--out", str(run), "--no-progress"]) == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    assert main(["stats", str(run), "--compare", str(empty)]) == 2
    assert "no dialogues_*.json" in capsys.readouterr().err
    (empty / "dialogues_001.json").write_text("{not json")
    assert main(["stats", str(run), "--compare", str(empty)]) == 2
    assert "dialogues_001.json" in capsys.readouterr().err
