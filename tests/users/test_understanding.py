"""The user's understanding step: SGD system acts recovered from agent text, and the agenda user on top."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dialogsim.engine.contracts import AgentReply, EpisodeContext, Scenario
from dialogsim.engine.events import Act, AgentTurn, Frame
from dialogsim.engine.registry import agent_factory, user_factory
from dialogsim.scenarios.sgd import normalize
from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet
from dialogsim.testing import simulate
from dialogsim.users.agenda import AgendaUser
from dialogsim.users.understanding import Context, Understanding, measure, triples

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def reader(pack):
    """One understanding step for the module (it caches compiled templates per service)."""
    return Understanding(pack)


def _dialogues() -> list[dict]:
    return [d for name in ("sgd", "sgd_small") for d in json.loads((FIXTURES / name / "dialogues_001.json").read_text())]


def test_normalisers_read_spoken_times_dates_counts_and_prices():
    """Spoken forms the pack may never have mined still get SGD's canonical values."""
    assert normalize.time_of_day("6:30 pm") == "18:30"
    assert normalize.time_of_day("half past 6 in the evening") == "18:30"
    assert normalize.time_of_day("11 am") == "11:00"
    assert normalize.time_of_day("12 am") == "00:00"
    assert normalize.time_of_day("7") is None  # a bare number is no time
    assert normalize.date("March 7th") == "2019-03-07"
    assert normalize.date("the 12th of March") == "2019-03-12"
    assert normalize.date("Mar 3") == "2019-03-03"
    assert normalize.date("next week") is None
    assert normalize.number("four") == "4"
    assert normalize.money("$1,250") == "1250"
    assert normalize.money("$11.08") == "11.08"


@pytest.mark.slow
def test_acts_of_real_system_turns_are_recovered_precisely(reader, pack):
    """On the real SGD system turns of the fixtures: precision > 0.95 and recall > 0.8 of (act, slot, value)."""
    got = measure(reader, _dialogues(), pack.services)
    assert got["turns"] >= 90
    assert got["precision"] > 0.95, got
    assert got["recall"] > 0.8, got


def test_a_confirmation_is_read_with_canonical_values(reader):
    """A confirm sentence of the restaurant bank gives every CONFIRM with canonical time, date and count."""
    ctx = Context("Restaurants_2", "ReserveRestaurant", {"restaurant_name": ["Sino"], "location": ["San Jose"]})
    acts = reader.understand("Confirming: I will reserve a table for 2 people at Sino in San Jose. "
                             "The reservation time is 11:30 am today.", ctx)
    assert triples(acts) == {("CONFIRM", "number_of_seats", "2"), ("CONFIRM", "restaurant_name", "sino"),
                             ("CONFIRM", "location", "san jose"), ("CONFIRM", "time", "11:30"),
                             ("CONFIRM", "date", "2019-03-01")}
    assert next(a for a in acts if a.slot == "time").values == ["11:30 am"]  # as spoken


def test_text_without_a_known_reading_gives_no_acts(reader):
    """Chatter that no template or cue explains is not turned into made-up acts."""
    ctx = Context("Restaurants_2", "FindRestaurants")
    assert reader.understand("The weather has been lovely lately, hasn't it?", ctx) == []
    assert reader.understand("", ctx) == []


class TextOnly:
    """Wraps an agent so that its turns carry only the utterance (and tool calls), as a live agent's do."""

    deterministic = True

    def __init__(self, inner) -> None:
        self.inner = inner

    def start(self, ctx) -> None:
        self.inner.start(ctx)

    def respond(self, obs) -> AgentReply:
        reply = self.inner.respond(obs)
        return AgentReply(utterance=reply.utterance, tool_calls=reply.tool_calls, end=reply.end)


@pytest.mark.slow
def test_agenda_user_reaches_its_goal_with_a_text_only_agent(pack):
    """Against the schema agent stripped of its acts, the agenda user still succeeds in >= 85% of 300 dialogues."""
    scenarios = SgdScenarioSet(pack)
    make = agent_factory("schema", scenarios)
    log = simulate(user=user_factory("agenda", scenarios), agent=lambda: TextOnly(make()), scenarios=scenarios,
                   episodes=300, seed=7, concurrency=64)
    outcomes = Counter(log.outcomes().values())
    assert outcomes["success"] >= 0.85 * 300, outcomes
    # the user's own annotations are untouched: every user turn still carries its acts and its true state
    for e in log.of_type("user_turn"):
        assert e.frames and all(f.actions and f.state is not None for f in e.frames)


def _user(pack, seed: int = 0) -> AgendaUser:
    goal = {"services": ["Restaurants_2"], "subgoals": [
        {"service": "Restaurants_2", "intent": "ReserveRestaurant",
         "constraints": {"restaurant_name": "Sino", "location": "San Jose", "time": "18:30", "number_of_seats": "2"},
         "optional": {}, "requested": [], "relax": [], "feasible": True, "from_previous": {}}]}
    user = AgendaUser(pack)
    scenario = Scenario(id="t", kind="sgd", data={"goal": goal, "schemas": {"Restaurants_2": pack.schemas["Restaurants_2"]}})
    user.start(EpisodeContext(episode_id="e", scenario=scenario, tools=[], rng=random.Random(seed), seed=seed))
    return user


def test_a_text_only_confirmation_gets_the_same_reaction_as_an_annotated_one(pack):
    """A wrong CONFIRM as text only is negated and corrected exactly as the annotated one is."""
    text = "Please confirm: a table for 2 people at Sino in San Jose at 7 pm."
    acts = [Act(act="CONFIRM", slot=s, values=[v], canonical_values=[c]) for s, v, c in (
        ("number_of_seats", "2", "2"), ("restaurant_name", "Sino", "Sino"), ("location", "San Jose", "San Jose"),
        ("time", "7 pm", "19:00"))]
    replies = []
    for frames in ([Frame(service="Restaurants_2", actions=acts)], []):
        user = _user(pack)
        user.respond(None)
        turn = AgentTurn(run="r", ep="e", seq=0, t=0.0, wall=0, turn=1, utterance=text, frames=frames)
        replies.append(user.respond(turn))
    annotated, text_only = replies
    assert [(a.act, a.slot, a.canonical_values) for f in text_only.frames for a in f.actions] == \
        [(a.act, a.slot, a.canonical_values) for f in annotated.frames for a in f.actions]
    assert ("NEGATE", "") in [(a.act, a.slot) for f in text_only.frames for a in f.actions]
    assert text_only.utterance == annotated.utterance and text_only.frames == annotated.frames


@pytest.mark.slow
def test_agenda_users_complete_most_dialogues_with_the_schema_agent_over_openai_http(tmp_path):
    """serve-agent --protocol openai with the schema agent, dialogsim run --agent openai:URL: text both ways,
    and the agenda users still reach their goal in most dialogues (without reading text: almost none)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen([sys.executable, "-m", "dialogsim.engine.cli", "serve-agent", "--agent", "schema",
                               "--scenarios", "sgd", "--protocol", "openai", "--host", "127.0.0.1", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = server.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split()[-1]
        out = tmp_path / "run"
        done = subprocess.run([sys.executable, "-m", "dialogsim.engine.cli", "run", "--agent", f"openai:{url}",
                               "--agent-model", "schema", "--episodes", "80", "--seed", "2", "--out", str(out),
                               "--no-progress"], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["episodes"] == 80 and counts.get("error", 0) == 0
    assert counts["success"] > 80 / 2, counts
    events = [json.loads(x) for f in sorted((out / "events").glob("*.jsonl")) for x in f.read_text().splitlines()]
    agent_turns = [e for e in events if e["type"] == "agent_turn"]
    assert agent_turns and all(not e.get("frames") and e["utterance"].strip() for e in agent_turns)
