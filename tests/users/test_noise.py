"""The TC-Bot-style noise model: slips are said, annotated as said, repaired next turn, state stays true."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from dialogsim.engine.contracts import EpisodeContext, Scenario
from dialogsim.engine.events import Act, AgentTurn, Frame
from dialogsim.engine.registry import agent_factory, user_factory
from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet
from dialogsim.testing import simulate
from dialogsim.users.agenda import AgendaUser
from dialogsim.users.noise import NoiseModel, from_options

SVC = "Restaurants_2"
GOAL = {"services": [SVC], "subgoals": [
    {"service": SVC, "intent": "FindRestaurants", "constraints": {"category": "Italian", "location": "San Jose"},
     "optional": {}, "requested": [], "relax": [], "feasible": True, "from_previous": {}}]}


def start(pack, noise: NoiseModel) -> AgendaUser:
    user = AgendaUser(pack, verbosity=1.0, noise=noise)
    scenario = Scenario(id="t", kind="sgd", data={"goal": GOAL, "schemas": {SVC: pack.schemas[SVC]}})
    user.start(EpisodeContext(episode_id="e", scenario=scenario, tools=[], rng=random.Random(3), seed=3))
    return user


def informs(reply) -> dict[str, str]:
    return {a.slot: a.canonical_values[0] for f in reply.frames for a in f.actions if a.act == "INFORM"}


def test_value_errors_are_said_then_repaired_while_the_state_holds_the_truth(pack):
    """With every slot corrupted: the said values differ, the state is the goal's, the next turn repairs."""
    user = start(pack, NoiseModel(slot_error=1.0, mode="value"))
    first = user.respond(None)
    said = informs(first)
    assert said and all(said[s] != GOAL["subgoals"][0]["constraints"][s] for s in said)
    state = first.frames[0].state.slot_values
    assert {s: pack.canonical(SVC, s, v[0]) or v[0] for s, v in state.items()} == \
        {s: GOAL["subgoals"][0]["constraints"][s] for s in said}
    repair = user.respond(AgentTurn(run="r", ep="e", seq=0, t=0.0, wall=0, turn=1, utterance="ok",
                                    frames=[Frame(service=SVC, actions=[Act(act="REQ_MORE")])]))
    acts = [a.act for f in repair.frames for a in f.actions]
    assert acts.count("NEGATE") == 1
    # the repair alone, and not corrupted again (even at rate 1.0)
    assert informs(repair) == {s: GOAL["subgoals"][0]["constraints"][s] for s in said}


def test_a_repair_comes_before_reacting_to_what_the_slip_caused(pack):
    """An offer found with the slipped value is not taken: the user corrects itself first, then reacts."""
    user = start(pack, NoiseModel(slot_error=1.0, mode="value"))
    said = informs(user.respond(None))
    user.noise = None  # no more slips: the rest of the dialogue is plain
    offer = AgentTurn(run="r", ep="e", seq=0, t=0.0, wall=0, turn=1, utterance="ok", frames=[Frame(
        service=SVC, actions=[Act(act="OFFER", slot="restaurant_name", values=["Sino"], canonical_values=["Sino"])]
        + [Act(act="OFFER", slot=s, values=[v], canonical_values=[v]) for s, v in said.items()])])
    repair = user.respond(offer)
    assert sorted(a.act for f in repair.frames for a in f.actions) == ["INFORM"] * len(said) + ["NEGATE"]
    assert not repair.end


@pytest.mark.slow
def test_noisy_turns_are_well_formed_and_mostly_succeed(pack):
    """At slot error 0.3 and intent error 0.2: no act twice in a frame, no repair with a goodbye, 90% success."""
    scenarios = SgdScenarioSet(pack, ["Restaurants_2", "Hotels_4", "Buses_1", "Weather_1", "Events_1"])
    log = simulate(user=user_factory("agenda", scenarios, {"slot_error": "0.3", "intent_error": "0.2"}),
                   agent=agent_factory("schema", scenarios), scenarios=scenarios, episodes=200, seed=5)
    for e in log.of_type("user_turn"):
        for f in e.frames:
            acts = [(a.act, a.slot) for a in f.actions]
            assert len(acts) == len(set(acts)), (e.ep, e.turn, acts)
            assert not ({"NEGATE", "INFORM"} & {a for a, _ in acts} and "GOODBYE" in {a for a, _ in acts}), acts
    outcomes = Counter(log.outcomes().values())
    assert outcomes["success"] >= 0.9 * 200, outcomes


def test_intent_errors_name_another_intent_of_the_service(pack):
    """With intent_error 1.0 the opening names the service's other intent."""
    reply = start(pack, NoiseModel(intent_error=1.0)).respond(None)
    intents = [a.values[0] for f in reply.frames for a in f.actions if a.act == "INFORM_INTENT"]
    assert intents == ["ReserveRestaurant"]
    assert reply.frames[0].state.active_intent == "FindRestaurants"


def test_rates_and_modes_are_checked():
    """Rates outside [0, 1] and unknown modes are refused; no rates means no model."""
    with pytest.raises(ValueError):
        NoiseModel(slot_error=1.5)
    with pytest.raises(ValueError):
        NoiseModel(mode="garble")
    assert from_options({}) is None
    assert from_options({"intent_error": "0.2"}).intent_error == 0.2


@pytest.mark.slow
def test_noisy_users_still_mostly_succeed(pack):
    """At TC-Bot's usual 5% slot / 5% intent error rates most dialogues still reach the goal."""
    scenarios = SgdScenarioSet(pack, ["Restaurants_2", "Hotels_4", "Buses_1", "Weather_1", "Events_1"])
    log = simulate(user=user_factory("agenda", scenarios, {"slot_error": "0.05", "intent_error": "0.05"}),
                   agent=agent_factory("schema", scenarios), scenarios=scenarios, episodes=200, seed=5)
    outcomes = Counter(log.outcomes().values())
    assert outcomes["success"] >= 0.75 * 200, outcomes
    negations = sum(a.act == "NEGATE" for e in log.of_type("user_turn") for f in e.frames for a in f.actions)
    assert negations > 0
