"""The agenda user's reactions to each system act, its annotations, patience and verdicts."""

from __future__ import annotations

import random

import pytest

from dialogsim.engine.contracts import EpisodeContext, Scenario
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import Act, AgentTurn, Frame
from dialogsim.users.agenda import AgendaUser, make_factory

SVC = "Restaurants_2"


def search_then_book() -> dict:
    """Find an Italian place in San Jose (asking its phone), then book it at 18:30."""
    return {"services": [SVC], "subgoals": [
        {"service": SVC, "intent": "FindRestaurants", "constraints": {"category": "Italian", "location": "San Jose"},
         "optional": {}, "requested": ["phone_number"], "relax": [["category", "Indian"]], "feasible": True,
         "from_previous": {}},
        {"service": SVC, "intent": "ReserveRestaurant", "constraints": {"time": "18:30", "number_of_seats": "2"},
         "optional": {}, "requested": [], "relax": [], "feasible": True,
         "from_previous": {"restaurant_name": "restaurant_name", "location": "location"}},
    ]}


def booking() -> dict:
    """Book a table at a named restaurant."""
    return {"services": [SVC], "subgoals": [
        {"service": SVC, "intent": "ReserveRestaurant",
         "constraints": {"restaurant_name": "Sino", "location": "San Jose", "time": "18:30", "number_of_seats": "2"},
         "optional": {}, "requested": [], "relax": [["time", "19:00"]], "feasible": True, "from_previous": {}},
    ]}


def start(pack, goal: dict, seed: int = 0, **kw) -> AgendaUser:
    user = AgendaUser(pack, **kw)
    scenario = Scenario(id="t", kind="sgd", data={"goal": goal, "schemas": {s: pack.schemas[s] for s in goal["services"]}})
    user.start(EpisodeContext(episode_id="e", scenario=scenario, tools=[], rng=random.Random(seed), seed=seed))
    return user


def system(*acts: tuple, service: str = SVC, end: bool = False) -> AgentTurn:
    """An agent turn with these (act, slot, canonical values[, spoken values]) acts."""
    built = []
    for a in acts:
        act, slot, canon = a[0], a[1] if len(a) > 1 else "", list(a[2]) if len(a) > 2 else []
        spoken = list(a[3]) if len(a) > 3 else canon
        built.append(Act(act=act, slot=slot, values=spoken, canonical_values=canon))
    return AgentTurn(run="r", ep="e", seq=0, t=0.0, wall=0, turn=1, utterance="...",
                     frames=[Frame(service=service, actions=built)], end=end)


def acts_of(reply) -> list[tuple[str, str, list[str]]]:
    return [(a.act, a.slot, a.canonical_values) for f in reply.frames for a in f.actions]


def check_spans(reply) -> None:
    for f in reply.frames:
        values = {v for a in f.actions for v in a.values}
        for s in f.slots:
            assert reply.utterance[s.start:s.exclusive_end] in values


def test_opening_states_the_intent_and_as_many_constraints_as_verbosity_says(pack):
    """Verbosity 0 opens with the intent alone; verbosity 1 adds every constraint; both annotated as SGD."""
    quiet = start(pack, search_then_book(), verbosity=0.0).respond(None)
    assert acts_of(quiet) == [("INFORM_INTENT", "intent", ["FindRestaurants"])]
    assert quiet.frames[0].state.active_intent == "FindRestaurants"
    assert quiet.frames[0].state.slot_values == {}
    chatty = start(pack, search_then_book(), verbosity=1.0).respond(None)
    informed = {a[1]: a[2][0] for a in acts_of(chatty) if a[0] == "INFORM"}
    assert informed == {"category": "Italian", "location": "San Jose"}
    assert set(chatty.frames[0].state.slot_values) == {"category", "location"}
    check_spans(chatty)


def test_request_is_answered_from_the_goal_and_enters_the_state(pack):
    """REQUEST(location) gets INFORM(location) with a spoken variant whose canonical value is the goal's."""
    user = start(pack, search_then_book(), verbosity=0.0)
    user.respond(None)
    reply = user.respond(system(("REQUEST", "location")))
    inform = [a for a in reply.frames[0].actions if a.act == "INFORM" and a.slot == "location"][0]
    assert inform.canonical_values == ["San Jose"]
    assert pack.canonical(SVC, "location", inform.values[0]) in ("San Jose", None)
    assert reply.frames[0].state.slot_values["location"] == inform.values
    check_spans(reply)


def test_proposed_value_matching_the_goal_is_affirmed(pack):
    """A REQUEST that proposes the user's own value is answered with AFFIRM and the value is taken on."""
    user = start(pack, search_then_book(), verbosity=0.0)
    user.respond(None)
    reply = user.respond(system(("REQUEST", "location", ["San Jose"], ["San Jose, CA"])))
    assert ("AFFIRM", "", []) in acts_of(reply)
    assert reply.frames[0].state.slot_values["location"] == ["San Jose, CA"]


def test_wrong_confirmation_is_negated_and_corrected(pack):
    """CONFIRM with a wrong time: NEGATE + INFORM(time=18:30)."""
    user = start(pack, booking())
    user.respond(None)
    reply = user.respond(system(("CONFIRM", "restaurant_name", ["Sino"]), ("CONFIRM", "location", ["San Jose"]),
                                ("CONFIRM", "time", ["19:00"]), ("CONFIRM", "number_of_seats", ["2"])))
    assert ("NEGATE", "", []) in acts_of(reply)
    assert ("INFORM", "time", ["18:30"]) in acts_of(reply)
    assert ("AFFIRM", "", []) not in acts_of(reply)


def test_right_confirmation_is_affirmed_and_system_variants_join_the_state(pack):
    """CONFIRM with the user's values: AFFIRM; the system's spoken variants are added to the state."""
    user = start(pack, booking(), verbosity=1.0)
    first = user.respond(None)
    said_time = first.frames[0].state.slot_values["time"]
    reply = user.respond(system(("CONFIRM", "restaurant_name", ["Sino"]), ("CONFIRM", "location", ["San Jose"]),
                                ("CONFIRM", "time", ["18:30"], ["6:30 pm"]), ("CONFIRM", "number_of_seats", ["2"]),
                                ("CONFIRM", "date", ["2019-03-01"], ["today"])))
    assert ("AFFIRM", "", []) in acts_of(reply)
    state = reply.frames[0].state.slot_values
    assert set(state["time"]) == set(said_time) | {"6:30 pm"}
    assert state["date"] == ["today"]


def test_failure_triggers_the_next_relaxation(pack):
    """NOTIFY_FAILURE after a search: INFORM(category=Indian) + REQUEST_ALTS."""
    user = start(pack, search_then_book(), verbosity=1.0)
    user.respond(None)
    reply = user.respond(system(("NOTIFY_FAILURE",), ("REQ_MORE",)))
    assert ("INFORM", "category", ["Indian"]) in acts_of(reply)
    assert ("REQUEST_ALTS", "", []) in acts_of(reply)
    assert [v.lower() for v in reply.frames[0].state.slot_values["category"]] == ["indian"]


def test_booking_failure_is_retried_once_then_given_up(pack):
    """A booking failing again and again: relax, retry as is, then leave with a failure verdict."""
    user = start(pack, booking())
    user.respond(None)
    first = user.respond(system(("NOTIFY_FAILURE",), ("REQ_MORE",)))
    assert ("INFORM", "time", ["19:00"]) in acts_of(first)
    second = user.respond(system(("NOTIFY_FAILURE",), ("REQ_MORE",), ("OFFER_INTENT", "intent", ["Nothing"])))
    assert ("INFORM_INTENT", "intent", ["ReserveRestaurant"]) in acts_of(second)
    third = user.respond(system(("NOTIFY_FAILURE",), ("REQ_MORE",)))
    assert third.end
    verdict = user.verdict()
    assert verdict.outcome == "failure"
    assert "ReserveRestaurant" in verdict.reason


def test_offer_select_offer_intent_and_book(pack):
    """Offer -> ask the requested slot -> select -> accept the booking intent -> confirm -> success."""
    user = start(pack, search_then_book(), verbosity=1.0, alts_rate=0.0, request_first=1.0)
    user.respond(None)
    offer = system(("OFFER", "restaurant_name", ["Sino"]), ("OFFER", "location", ["San Jose"]),
                   ("INFORM_COUNT", "count", ["3"]))
    asked = user.respond(offer)
    assert acts_of(asked) == [("REQUEST", "phone_number", [])]
    assert asked.frames[0].state.requested_slots == ["phone_number"]
    chosen = user.respond(system(("INFORM", "phone_number", ["408-247-8880"])))
    assert ("SELECT", "", []) in acts_of(chosen)
    assert chosen.frames[0].state.slot_values["location"] == ["San Jose"]
    if ("INFORM_INTENT", "intent", ["ReserveRestaurant"]) not in acts_of(chosen):
        accepted = user.respond(system(("OFFER_INTENT", "intent", ["ReserveRestaurant"])))
        assert ("AFFIRM_INTENT", "", []) in acts_of(accepted)
        assert accepted.frames[0].state.active_intent == "ReserveRestaurant"
    confirm = user.respond(system(("CONFIRM", "restaurant_name", ["Sino"]), ("CONFIRM", "location", ["San Jose"]),
                                  ("CONFIRM", "time", ["18:30"]), ("CONFIRM", "number_of_seats", ["2"])))
    assert ("AFFIRM", "", []) in acts_of(confirm)
    done = user.respond(system(("NOTIFY_SUCCESS",)))
    while done is not None and not done.end:
        done = user.respond(system(("REQ_MORE",)))
    assert user.verdict().outcome == "success"
    assert user.verdict().reward["informed"] == 1
    search, book = user.verdict().claims
    assert (search.intent, search.transactional, search.constraints) == (
        "FindRestaurants", False, {"category": "Italian", "location": "San Jose"})
    assert search.entity == {"restaurant_name": "Sino", "location": "San Jose"}
    assert (book.intent, book.transactional, book.entity) == ("ReserveRestaurant", True, None)
    assert book.constraints == {"time": "18:30", "number_of_seats": "2", "restaurant_name": "Sino",
                                "location": "San Jose"}


def test_an_offer_before_every_constraint_was_said_gets_the_rest_said(pack):
    """The system offered before hearing the cuisine, and the offer does not show it: the user says the rest."""
    user = start(pack, search_then_book(), verbosity=0.0, request_first=0.0)
    user.respond(None)
    reply = user.respond(system(("OFFER", "restaurant_name", ["Sino"]), ("OFFER", "location", ["San Jose"])))
    assert sorted(acts_of(reply)) == [("INFORM", "category", ["Italian"]), ("INFORM", "location", ["San Jose"])]
    chosen = user.respond(system(("OFFER", "restaurant_name", ["Tusk"]), ("OFFER", "category", ["Italian"])))
    assert ("SELECT", "", []) in acts_of(chosen)


def test_a_ride_after_a_booking_goes_to_the_place_the_search_found(pack):
    """Search, book, then a ride there: the destination comes from the search's offer, not "dontcare"."""
    goal = search_then_book()
    goal["services"].append("RideSharing_1")
    goal["subgoals"].append({"service": "RideSharing_1", "intent": "GetRide",
                             "constraints": {"number_of_riders": "2", "shared_ride": "False"}, "optional": {},
                             "requested": [], "relax": [], "feasible": True, "from_previous": {"destination": "address"}})
    goal["subgoals"][0]["requested"] = []
    user = start(pack, goal, verbosity=0.0, alts_rate=0.0, request_first=0.0)
    user.respond(None)
    offer = system(("OFFER", "restaurant_name", ["Sino"]), ("OFFER", "address", ["377 Santana Row"]))
    assert ("SELECT", "", []) not in acts_of(user.respond(offer))  # it says the cuisine and place first
    chosen = user.respond(offer)
    assert ("SELECT", "", []) in acts_of(chosen)
    if ("INFORM_INTENT", "intent", ["ReserveRestaurant"]) not in acts_of(chosen):
        user.respond(system(("OFFER_INTENT", "intent", ["ReserveRestaurant"])))
    assert acts_of(user.respond(system(("CONFIRM", "restaurant_name", ["Sino"]), ("CONFIRM", "time", ["18:30"])))) == [
        ("AFFIRM", "", [])]
    reply = user.respond(system(("NOTIFY_SUCCESS",)))
    while ("INFORM_INTENT", "intent", ["GetRide"]) not in acts_of(reply):
        reply = user.respond(system(("REQ_MORE",)))
    asked = user.respond(system(("REQUEST", "destination"), service="RideSharing_1"))
    assert ("INFORM", "destination", ["377 Santana Row"]) in acts_of(asked)


def test_unwanted_intent_offer_is_negated(pack):
    """OFFER_INTENT of an intent the goal does not hold: NEGATE_INTENT."""
    user = start(pack, search_then_book(), verbosity=1.0, alts_rate=0.0, request_first=0.0)
    user.respond(None)
    user.respond(system(("OFFER", "restaurant_name", ["Sino"]), ("INFORM_COUNT", "count", ["2"])))
    reply = user.respond(system(("OFFER_INTENT", "intent", ["FindRestaurants"])))
    assert ("NEGATE_INTENT", "", []) in acts_of(reply)


def test_patience_runs_out_on_repeated_turns(pack):
    """The same system turn over and over: the user leaves, abandoned, after `patience` repeats."""
    user = start(pack, search_then_book(), patience=2)
    user.respond(None)
    turns = [user.respond(system(("REQ_MORE",))) for _ in range(4)]
    assert turns[-1].end and ("GOODBYE", "", []) in acts_of(turns[-1])
    assert not any(t.end for t in turns[:-1])
    verdict = user.verdict()
    assert verdict.outcome == "abandoned"
    assert "patience" in verdict.reason


def test_system_goodbye_before_the_goal_is_a_failure(pack):
    """If the system says goodbye early, the user leaves silently and judges the episode failed."""
    user = start(pack, search_then_book())
    user.respond(None)
    assert user.respond(system(("GOODBYE",))) is None
    verdict = user.verdict()
    assert verdict.outcome == "failure"
    assert "closed the dialogue" in verdict.reason


def test_factory_converts_string_options_and_rejects_unknown_ones(pack):
    """--user-opt values arrive as strings: converted; unknown keys and bad values are clear errors."""
    class Set:
        pass
    scenarios = Set()
    scenarios.pack = pack
    user = make_factory(None, scenarios, {"patience": "5", "verbosity": "0.2", "slot_error": "0.1"})()
    assert user.patience == 5 and user.verbosity == 0.2 and user.noise.slot_error == 0.1
    with pytest.raises(UserError, match="unknown option 'stubborn'"):
        make_factory(None, scenarios, {"stubborn": "1"})
    with pytest.raises(UserError, match="patience"):
        make_factory(None, scenarios, {"patience": "lots"})
    with pytest.raises(UserError, match="noise"):
        make_factory(None, scenarios, {"slot_error": "2"})
    with pytest.raises(UserError, match="needs SGD scenarios"):
        make_factory(None, Set(), {})
