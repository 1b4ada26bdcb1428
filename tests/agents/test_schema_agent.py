"""The rule-based schema-guided agent: requests, calls, offers, confirmations, notifications, state, NLU."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from dialogsim.agents.nlu import ValueMatcher
from dialogsim.agents.schema_agent import SchemaAgent
from dialogsim.engine.contracts import EpisodeContext, Observation, Scenario, ToolResult, UserReply
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import Act, Frame, UserTurn
from dialogsim.engine.registry import agent_factory, user_factory
from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet
from dialogsim.testing import simulate

SVC = "Restaurants_2"
ROW = {"restaurant_name": "Sino", "location": "San Jose", "category": "Asian", "phone_number": "408-247-8880",
       "address": "377 Santana Row #1000", "price_range": "moderate", "rating": "4.00",
       "has_vegetarian_options": "True", "has_seating_outdoors": "True"}


@pytest.fixture
def agent(pack):
    """A started agent for a Restaurants_2 episode."""
    a = SchemaAgent(pack, count_rate=1.0)
    scenario = Scenario(id="t", kind="sgd", data={"schemas": {SVC: pack.schemas[SVC]}})
    a.start(EpisodeContext(episode_id="e", scenario=scenario, tools=[], rng=random.Random(1), seed=1))
    return a


def user(*acts: tuple, text: str = "...", frames: bool = True) -> UserTurn:
    """A user turn with (act, slot, canonical[, spoken]) acts."""
    built = []
    for a in acts:
        act, slot, canon = a[0], a[1] if len(a) > 1 else "", list(a[2]) if len(a) > 2 else []
        built.append(Act(act=act, slot=slot, values=list(a[3]) if len(a) > 3 else canon, canonical_values=canon))
    return UserTurn(run="r", ep="e", seq=0, t=0.0, wall=0, turn=0, utterance=text,
                    frames=[Frame(service=SVC, actions=built)] if frames else [])


def ask(agent, turn: UserTurn, results: list | None = None):
    return agent.respond(Observation(user=turn, history=[], tool_results=results or []))


def acts_of(reply) -> list[tuple[str, str, list[str]]]:
    return [(a.act, a.slot, a.canonical_values) for f in reply.frames for a in f.actions]


def kinds(reply) -> set[str]:
    return {a.act for f in reply.frames for a in f.actions}


def test_requests_missing_required_slots_then_searches(agent):
    """FindRestaurants without a location: REQUEST(location); once given, a search call with the values."""
    first = ask(agent, user(("INFORM_INTENT", "intent", ["FindRestaurants"]), ("INFORM", "category", ["Asian"])))
    assert not first.tool_calls
    assert acts_of(first) == [("REQUEST", "location", [])]
    second = ask(agent, user(("INFORM", "location", ["San Jose"], ["San Jose, CA"])))
    (call,) = second.tool_calls
    assert (call.service, call.method) == (SVC, "FindRestaurants")
    assert call.parameters == {"category": "Asian", "location": "San Jose"}


def test_results_are_offered_with_a_count_and_requests_answered(agent):
    """Search results: OFFER of the first row + INFORM_COUNT; a later REQUEST is answered from that row."""
    ask(agent, user(("INFORM_INTENT", "intent", ["FindRestaurants"]), ("INFORM", "category", ["Asian"]),
                    ("INFORM", "location", ["San Jose"])))
    other = dict(ROW, restaurant_name="Other", phone_number="1", address="2", rating="3.00", price_range="cheap")
    offer = ask(agent, user(), [ToolResult(call_id="c", results=[ROW, other])])
    assert "OFFER" in kinds(offer)
    assert ("INFORM_COUNT", "count", ["2"]) in acts_of(offer)
    assert all(a[2][0] == ROW[a[1]] for a in acts_of(offer) if a[0] == "OFFER")
    answer = ask(agent, user(("REQUEST", "phone_number")))
    assert acts_of(answer) == [("INFORM", "phone_number", ["408-247-8880"])]
    assert answer.state[SVC].requested_slots == ["phone_number"]
    alt = ask(agent, user(("REQUEST_ALTS",)))
    offered = [a for a in acts_of(alt) if a[0] == "OFFER"]
    assert offered and all(a[2][0] == other[a[1]] for a in offered)
    assert any(a[2][0] != ROW[a[1]] for a in offered)


def test_no_results_is_a_failure_notice(agent):
    """An empty search: NOTIFY_FAILURE + REQ_MORE."""
    ask(agent, user(("INFORM_INTENT", "intent", ["FindRestaurants"]), ("INFORM", "category", ["Asian"]),
                    ("INFORM", "location", ["Nowhere"])))
    reply = ask(agent, user(), [ToolResult(call_id="c", results=[])])
    assert kinds(reply) == {"NOTIFY_FAILURE", "REQ_MORE"}


def test_select_leads_to_the_booking_intent_and_a_confirmed_call(agent):
    """SELECT -> OFFER_INTENT(ReserveRestaurant); AFFIRM_INTENT -> REQUEST(time); CONFIRM; AFFIRM -> call."""
    ask(agent, user(("INFORM_INTENT", "intent", ["FindRestaurants"]), ("INFORM", "category", ["Asian"]),
                    ("INFORM", "location", ["San Jose"])))
    ask(agent, user(), [ToolResult(call_id="c", results=[ROW])])
    offered = ask(agent, user(("SELECT",)))
    assert acts_of(offered) == [("OFFER_INTENT", "intent", ["ReserveRestaurant"])]
    asked = ask(agent, user(("AFFIRM_INTENT",)))
    assert ("REQUEST", "time", []) in acts_of(asked)
    assert asked.state[SVC].active_intent == "ReserveRestaurant"
    confirm = ask(agent, user(("INFORM", "time", ["18:30"], ["6:30 pm"])))
    confirmed = {a[1]: a[2][0] for a in acts_of(confirm) if a[0] == "CONFIRM"}
    assert confirmed["time"] == "18:30" and confirmed["restaurant_name"] == "Sino"
    assert not confirm.tool_calls
    call = ask(agent, user(("AFFIRM",), ("REQUEST", "address")))
    (c,) = call.tool_calls
    assert c.method == "ReserveRestaurant"
    assert {"restaurant_name", "location", "time"} <= set(c.parameters)
    done = ask(agent, user(), [ToolResult(call_id="c", results=[dict(ROW, time="18:30")])])
    assert ("NOTIFY_SUCCESS", "", []) in acts_of(done)
    assert ("INFORM", "address", [ROW["address"]]) in acts_of(done)


def test_failed_booking_is_notified(agent):
    """A transaction returning no row: NOTIFY_FAILURE + REQ_MORE."""
    ask(agent, user(("INFORM_INTENT", "intent", ["ReserveRestaurant"]), ("INFORM", "restaurant_name", ["Sino"]),
                    ("INFORM", "location", ["San Jose"]), ("INFORM", "time", ["18:30"])))
    assert ask(agent, user(("AFFIRM",))).tool_calls
    reply = ask(agent, user(), [ToolResult(call_id="c", results=[])])
    assert kinds(reply) == {"NOTIFY_FAILURE", "REQ_MORE"}


def test_goodbye_ends_and_the_state_keeps_spoken_values(agent):
    """The exposed state holds the spoken variants heard; GOODBYE answers GOODBYE and ends."""
    reply = ask(agent, user(("INFORM_INTENT", "intent", ["FindRestaurants"]),
                            ("INFORM", "location", ["San Jose"], ["San Jose, CA"])))
    assert reply.state[SVC].slot_values == {"location": ["San Jose, CA"]}
    bye = ask(agent, user(("THANK_YOU",), ("GOODBYE",)))
    assert acts_of(bye) == [("GOODBYE", "", [])] and bye.end


def test_value_matcher_reads_intent_values_and_answers(pack):
    """Text only: an intent from its words, values from surface forms, yes/no/alternatives by context."""
    nlu = ValueMatcher(pack, [SVC])
    acts = nlu.parse("I'd like to find a restaurant in San Jose", None, None, set(), [])
    got = {(a.act, a.slot, a.canonical_values[0] if a.canonical_values else "") for _, a in acts}
    assert ("INFORM_INTENT", "intent", "FindRestaurants") in got
    assert ("INFORM", "location", "San Jose") in got
    assert [a.act for _, a in nlu.parse("Yes, that works.", SVC, "FindRestaurants", {"OFFER"}, [])] == ["SELECT"]
    assert [a.act for _, a in nlu.parse("Yes please.", SVC, "ReserveRestaurant", {"CONFIRM"}, [])] == ["AFFIRM"]
    alts = nlu.parse("Can you find me another one?", SVC, "FindRestaurants", {"OFFER"}, [])
    assert "REQUEST_ALTS" in [a.act for _, a in alts]
    asks = nlu.parse("What is their phone number?", SVC, "FindRestaurants", {"OFFER"}, [])
    assert ("REQUEST", "phone_number") in [(a.act, a.slot) for _, a in asks]


@pytest.mark.slow
def test_text_only_users_are_understood_well_enough_to_finish_dialogues(pack):
    """With frames stripped from user turns the agent runs on its NLU and still completes some goals."""
    scenarios = SgdScenarioSet(pack, ["Restaurants_2", "Hotels_4", "Weather_1", "Events_1"])
    make = user_factory("agenda", scenarios)

    class TextOnly:
        """The agenda user, saying only its utterances."""

        deterministic = True

        def __init__(self) -> None:
            self.inner = make()

        def start(self, ctx):
            self.inner.start(ctx)

        def respond(self, turn):
            reply = self.inner.respond(turn)
            return None if reply is None else UserReply(utterance=reply.utterance, end=reply.end)

        def verdict(self):
            return self.inner.verdict()

    log = simulate(user=TextOnly, agent=agent_factory("schema", scenarios), scenarios=scenarios, episodes=200,
                   seed=3)
    outcomes = Counter(log.outcomes().values())
    assert outcomes["error"] == 0
    assert outcomes["success"] >= 0.3 * 200, outcomes
    assert all(not f for e in log.of_type("user_turn") for f in [e.frames])


def test_factory_options(pack):
    """--agent-opt values arrive as strings: converted; unknown keys are a clear error."""
    class Set:
        pass
    scenarios = Set()
    scenarios.pack = pack
    agent = agent_factory("schema", scenarios, {"max_request": "1", "count_rate": "0"})()
    assert agent.max_request == 1 and agent.count_rate == 0.0
    with pytest.raises(UserError, match="unknown option 'chatty'"):
        agent_factory("schema", scenarios, {"chatty": "1"})
    with pytest.raises(UserError, match="needs SGD scenarios"):
        agent_factory("schema", Set(), {})


def test_values_from_another_service_are_proposed_and_taken_on_affirm(pack):
    """As SGD's system does: after an apartment search in San Jose, REQUEST(location=San Jose); AFFIRM uses it."""
    assert "Homes.area>Restaurants.location" in pack.stats["transfers"]
    a = SchemaAgent(pack, propose_rate=1.0)
    scenario = Scenario(id="t", kind="sgd", data={"schemas": {s: pack.schemas[s] for s in ("Homes_1", SVC)}})
    a.start(EpisodeContext(episode_id="e", scenario=scenario, tools=[], rng=random.Random(1), seed=1))
    homes = UserTurn(run="r", ep="e", seq=0, t=0.0, wall=0, turn=0, utterance="...", frames=[Frame(
        service="Homes_1", actions=[Act(act="INFORM_INTENT", slot="intent", values=["FindApartment"],
                                        canonical_values=["FindApartment"]),
                                    Act(act="INFORM", slot="area", values=["San Jose"], canonical_values=["San Jose"])])])
    ask(a, homes)
    proposal = ask(a, user(("INFORM_INTENT", "intent", ["FindRestaurants"]), ("INFORM", "category", ["Asian"])))
    assert acts_of(proposal) == [("REQUEST", "location", ["San Jose"])]
    (call,) = ask(a, user(("AFFIRM",))).tool_calls
    assert call.parameters["location"] == "San Jose"
