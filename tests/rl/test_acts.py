"""SGD acts -> TC-Bot acts: every SGD act kind is mapped, turns combine acts by rank, imported acts pass through."""

from __future__ import annotations

import re
from pathlib import Path

from dialogsim.engine.events import Act, AgentTurn, EpisodeEnded, EpisodeStarted, Frame, UserTurn
from dialogsim.rl.acts import (DIAACT_RANK, SGD_TO_TCBOT, agent_action, episode_acts, placeholder_action,
                               turn_act)

ROOT = Path(__file__).resolve().parents[2]

SYSTEM_ACTS = ["INFORM", "REQUEST", "CONFIRM", "OFFER", "NOTIFY_SUCCESS", "NOTIFY_FAILURE", "INFORM_COUNT",
               "OFFER_INTENT", "REQ_MORE", "GOODBYE"]
USER_ACTS = ["INFORM_INTENT", "NEGATE_INTENT", "AFFIRM_INTENT", "INFORM", "REQUEST", "AFFIRM", "NEGATE", "SELECT",
             "REQUEST_ALTS", "THANK_YOU", "GOODBYE"]


def _frame(*acts: Act, service: str = "Restaurants_1") -> Frame:
    return Frame(service=service, actions=list(acts))


def test_all_21_sgd_act_kinds_are_mapped_and_ranked():
    """The 10 system and 11 user act kinds of the SGD readme all map to a ranked diaact."""
    assert len(SYSTEM_ACTS) + len(USER_ACTS) == 21
    assert set(SGD_TO_TCBOT) == set(SYSTEM_ACTS) | set(USER_ACTS)
    assert all(diaact in DIAACT_RANK for diaact, _ in SGD_TO_TCBOT.values())


def test_the_docs_table_lists_every_act():
    """docs/rl.md's mapping table has a row for every SGD act kind, with the diaact the code uses."""
    text = (ROOT / "docs" / "rl.md").read_text()
    for act, (diaact, _) in SGD_TO_TCBOT.items():
        assert re.search(rf"\|\s*`?{act}`?\s*\|[^|]*\|\s*`?{diaact}`?\s*\|", text), act


def test_single_acts():
    """Slot placement: informs carry the first value, requests "UNK", the rest no slot."""
    assert turn_act([_frame(Act(act="INFORM", slot="city", values=["SF", "San Fran"]))], "user") == \
        {"diaact": "inform", "request_slots": {}, "inform_slots": {"city": "SF"}, "speaker": "user"}
    assert turn_act([_frame(Act(act="REQUEST", slot="cuisine", values=["Thai", "Indian"]))], "agent") == \
        {"diaact": "request", "request_slots": {"cuisine": "UNK"}, "inform_slots": {}, "speaker": "agent"}
    assert turn_act([_frame(Act(act="INFORM_INTENT", slot="intent", values=["FindRestaurants"]))], "user")[
        "inform_slots"] == {"intent": "FindRestaurants"}
    assert turn_act([_frame(Act(act="NOTIFY_SUCCESS"))], "agent")["diaact"] == "notify_success"
    assert turn_act([_frame(Act(act="SELECT"))], "user") == \
        {"diaact": "select", "request_slots": {}, "inform_slots": {}, "speaker": "user"}


def test_a_turn_takes_the_highest_ranked_diaact_and_every_slot():
    """OFFER + OFFER + INFORM_COUNT is one offer act with all three slots; frames merge in order."""
    act = turn_act([_frame(Act(act="INFORM_COUNT", slot="count", values=["3"]),
                           Act(act="OFFER", slot="restaurant_name", values=["Sino"])),
                    _frame(Act(act="OFFER", slot="city", values=["San Jose"]), service="Other_1")], "agent")
    assert act == {"diaact": "offer", "request_slots": {},
                   "inform_slots": {"count": "3", "restaurant_name": "Sino", "city": "San Jose"}, "speaker": "agent"}
    user = turn_act([_frame(Act(act="THANK_YOU"), Act(act="GOODBYE"))], "user")
    assert user["diaact"] == "bye"
    asked = turn_act([_frame(Act(act="INFORM", slot="date", values=["today"]), Act(act="REQUEST", slot="time"))],
                     "user")
    assert asked["diaact"] == "request" and asked["inform_slots"] == {"date": "today"}


def test_no_acts_and_unknown_acts():
    """A turn without acts is diaact "none"; an act outside SGD's is its lower-cased name, ranked last."""
    assert turn_act([], "agent")["diaact"] == "none"
    act = turn_act([_frame(Act(act="CHITCHAT", slot="topic", values=["weather"]), Act(act="THANK_YOU"))], "agent")
    assert act["diaact"] == "thanks" and act["inform_slots"] == {"topic": "weather"}
    assert turn_act([_frame(Act(act="CHITCHAT"))], "agent")["diaact"] == "chitchat"


def test_episode_acts_prefers_the_imported_act():
    """An imported turn's raw act is used verbatim; other turns are mapped; the outcome is kept."""
    raw = {"nl": "hi", "diaact": "inform", "request_slots": {}, "inform_slots": {"x": 1}, "speaker": "user"}
    events = [EpisodeStarted(run="r", ep="e1", seq=0, t=0.0, wall=0, scenario_id="s", seed=0),
              UserTurn(run="r", ep="e1", seq=1, t=0.0, wall=0, turn=0, utterance="hi", raw_act=raw),
              AgentTurn(run="r", ep="e1", seq=2, t=1.0, wall=0, turn=1, utterance="bye",
                        frames=[_frame(Act(act="GOODBYE"))]),
              EpisodeEnded(run="r", ep="e1", seq=3, t=2.0, wall=0, outcome="failure")]
    ep = episode_acts(events)
    assert ep.episode == "e1" and ep.outcome == "failure"
    assert ep.acts == [raw, {"diaact": "bye", "request_slots": {}, "inform_slots": {}, "speaker": "agent"}]
    assert episode_acts([]) is None


def test_actions_drop_the_speaker_and_placeholders_keep_key_order():
    """An action is the act without its speaker; its feasible form has "PLACEHOLDER" inform values."""
    act = {"diaact": "request", "request_slots": {"a": "UNK"}, "inform_slots": {"b": "v", "c": "w"},
           "speaker": "agent"}
    assert agent_action(act) == {"diaact": "request", "request_slots": {"a": "UNK"}, "inform_slots": {"b": "v", "c": "w"}}
    form = placeholder_action(act)
    assert list(form) == ["diaact", "request_slots", "inform_slots"]
    assert form["inform_slots"] == {"b": "PLACEHOLDER", "c": "PLACEHOLDER"}
    assert act["inform_slots"] == {"b": "v", "c": "w"}
