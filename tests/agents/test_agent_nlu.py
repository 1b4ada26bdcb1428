"""The schema agent's text understanding, measured: acts read from real SGD user turns, dialogues run on text alone."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dialogsim.agents.nlu import ValueMatcher
from dialogsim.engine import registry
from dialogsim.scenarios.sgd.pack import load_pack
from dialogsim.testing import simulate

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sgd" / "dialogues_001.json"


def _score(pack, paths: list[Path]) -> dict[str, tuple[int, int, int]]:
    """(true positives, predicted, true) of (act) and (act, slot, canonical value) over the user turns of
    SGD dialogue files, each read with the context the agent would have: the system's last acts and the
    service last spoken of."""
    counts = {"act": [0, 0, 0], "value": [0, 0, 0]}
    for path in paths:
        for dialogue in json.loads(path.read_text()):
            if not set(dialogue["services"]) <= set(pack.schemas):
                continue
            nlu = ValueMatcher(pack, list(dialogue["services"]))
            last: set[str] = set()
            expecting: list[str] = []
            service = None
            intents: dict[str, str] = {}
            for turn in dialogue["turns"]:
                acts = [a for f in turn["frames"] for a in f["actions"]]
                if turn["speaker"] == "SYSTEM":
                    last = {a["act"] for a in acts}
                    expecting = [a["slot"] for a in acts if a["act"] == "REQUEST"]
                    continue
                got = nlu.parse(turn["utterance"], service, intents.get(service), last, expecting)
                for level, pred, true in (
                        ("act", {a.act for _, a in got}, {a["act"] for a in acts}),
                        ("value", {(a.act, a.slot, (a.canonical_values or [""])[0].lower()) for _, a in got},
                         {(a["act"], a["slot"], (a["canonical_values"] or [""])[0].lower()) for a in acts})):
                    c = counts[level]
                    c[0] += len(pred & true)
                    c[1] += len(pred)
                    c[2] += len(true)
                for f in turn["frames"]:
                    intents[f["service"]] = f["state"]["active_intent"]
                service = turn["frames"][0]["service"] if turn["frames"] else service
    return {k: tuple(v) for k, v in counts.items()}


@pytest.mark.slow
def test_real_sgd_user_turns_are_read_precisely():
    """On the fixture's real SGD user turns the acts read are >= 0.9 precise (0.77 before the templates)."""
    counts = _score(load_pack(), [FIXTURE])
    for level, floor in (("act", 0.9), ("value", 0.85)):
        tp, pred, true = counts[level]
        assert pred and tp / pred >= floor, (level, counts[level])
        assert tp / true >= 0.75, (level, counts[level])


@pytest.mark.slow
def test_the_shared_sgd_dev_turns_are_read_precisely(shared_sgd):
    """Over three real SGD dev files (the pack's own sources, so not held out) precision stays >= 0.85."""
    paths = [shared_sgd / "dev" / f"dialogues_{n:03d}.json" for n in (1, 10, 20)]
    paths = [p for p in paths if p.exists()]
    if not paths:
        pytest.skip("no SGD dev dialogue files beside this checkout")
    counts = _score(load_pack(), paths)
    tp, pred, true = counts["act"]
    assert tp / pred >= 0.9 and tp / true >= 0.8, counts
    tp, pred, true = counts["value"]
    assert tp / pred >= 0.85 and tp / true >= 0.75, counts


@pytest.mark.slow
def test_the_agenda_user_succeeds_against_a_schema_agent_that_reads_text_only():
    """listen=text: 200 agenda dialogues in process succeed >= 80% (41% before the template reading)."""
    scenarios = registry.load_scenarios("sgd")
    log = simulate(user=registry.user_factory("agenda", scenarios, {}),
                   agent=registry.agent_factory("schema", scenarios, {"listen": "text"}),
                   scenarios=scenarios, episodes=200, seed=11, concurrency=16)
    outcomes = Counter(log.outcomes().values())
    assert sum(outcomes.values()) == 200
    assert outcomes["success"] / 200 >= 0.8, outcomes
