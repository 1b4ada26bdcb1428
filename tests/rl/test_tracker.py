"""The TC-Bot-style state tracker: update rules, turn counting, history, and states as independent snapshots."""

from __future__ import annotations

import json

import pytest

from dialogsim.rl.tracker import GREETING, StateTracker


def _act(speaker: str, diaact: str, inform: dict | None = None, request: dict | None = None) -> dict:
    return {"diaact": diaact, "request_slots": request or {}, "inform_slots": inform or {}, "speaker": speaker}


def test_the_first_state_has_the_greeting_and_no_user_action():
    """Before any act: turn 0, empty slots and history, user_action null, agent_action the greeting."""
    state = StateTracker().state()
    assert state == {"user_action": None, "current_slots": {"inform_slots": {}, "request_slots": {},
                                                            "proposed_slots": {}, "agent_request_slots": {}},
                     "turn": 0, "history": [], "agent_action": GREETING}
    assert list(state) == ["user_action", "current_slots", "turn", "history", "agent_action"]


def test_user_inform_and_request():
    """User inform sets inform_slots and clears the request; user request adds "UNK" once, keeping the first."""
    t = StateTracker()
    t.update(_act("user", "request", request={"fee": "UNK", "size": "?"}))
    t.update(_act("user", "request", inform={"fee": "100"}, request={"size": "UNK", "date": "UNK"}))
    slots = t.state()["current_slots"]
    assert slots["inform_slots"] == {"fee": "100"}
    assert slots["request_slots"] == {"size": "UNK", "date": "UNK"}
    assert slots["proposed_slots"] == {} and slots["agent_request_slots"] == {}


def test_agent_inform_and_request():
    """Agent inform goes to proposed_slots and inform_slots and answers a user request; agent request is "UNK"."""
    t = StateTracker()
    t.update(_act("user", "request", request={"fee": "UNK"}))
    t.update(_act("agent", "request", inform={"fee": "UNK"}, request={"phone_number": "x"}))
    slots = t.state()["current_slots"]
    assert slots == {"inform_slots": {"fee": "UNK"}, "request_slots": {}, "proposed_slots": {"fee": "UNK"},
                     "agent_request_slots": {"phone_number": "UNK"}}


def test_turns_history_and_last_actions():
    """Every act counts a turn; user acts get their turn in the history, agent acts stay as given."""
    t = StateTracker()
    user = _act("user", "inform", inform={"a": "1"})
    agent = _act("agent", "request", request={"b": "UNK"})
    t.update(user)
    t.update(agent)
    t.update(_act("user", "bye"))
    state = t.state()
    assert state["turn"] == 3
    assert state["history"] == [{**user, "turn": 0}, agent, {**_act("user", "bye"), "turn": 2}]
    assert list(state["history"][0]) == ["diaact", "request_slots", "inform_slots", "speaker", "turn"]
    assert state["user_action"] == {**_act("user", "bye"), "turn": 2}
    assert state["agent_action"] == agent
    assert "turn" not in user  # the caller's act is not touched


def test_a_user_act_that_already_has_a_turn_gets_the_tracker_s():
    """An act carrying its own "turn" keeps the key's place and takes the tracker's count."""
    t = StateTracker()
    t.update({"turn": 7, "diaact": "inform", "request_slots": {}, "inform_slots": {}, "speaker": "user"})
    entry = t.state()["history"][0]
    assert list(entry) == ["turn", "diaact", "request_slots", "inform_slots", "speaker"] and entry["turn"] == 0


def test_states_are_snapshots():
    """A state shares nothing with the tracker: later acts and edits to the state leave each other alone."""
    t = StateTracker()
    t.update(_act("user", "inform", inform={"a": ["x"]}))
    before = t.state()
    before["current_slots"]["inform_slots"]["a"].append("y")
    t.update(_act("agent", "request", inform={"b": "2"}))
    assert before["turn"] == 1 and len(before["history"]) == 1
    assert t.state()["current_slots"]["inform_slots"] == {"a": ["x"], "b": "2"}
    assert json.loads(t.state_json()) == t.state()


def test_update_refuses_an_unknown_speaker():
    """Only "user" and "agent" acts can be applied."""
    with pytest.raises(ValueError, match="speaker"):
        StateTracker().update(_act("system", "inform"))
