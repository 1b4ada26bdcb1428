"""Agenda user against the rule agent over the bundled pack, through the real engine: the issue's checks."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest

from dialogsim.engine.events import AgentTurn, ToolCalled, UserTurn
from dialogsim.engine.registry import agent_factory, user_factory
from dialogsim.engine.timing import Delay
from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet
from dialogsim.testing import simulate, strip_wall

# the 17 services of SGD's dev split, and the test split's services absent from train ("unseen")
DEV = ["Alarm_1", "Banks_2", "Buses_1", "Events_1", "Flights_3", "Homes_1", "Hotels_1", "Hotels_4", "Media_2",
       "Movies_2", "Music_1", "RentalCars_1", "Restaurants_2", "RideSharing_1", "Services_4", "Travel_1",
       "Weather_1"]
UNSEEN_TEST = ["Alarm_1", "Buses_3", "Events_3", "Flights_4", "Homes_2", "Hotels_4", "Media_3", "Messaging_1",
               "Movies_3", "Music_3", "Payment_1", "RentalCars_3", "Restaurants_2", "Services_4", "Trains_1"]
# the unseen test services that have no dev dialogues either: nothing was mined for them
UNMINED = [s for s in UNSEEN_TEST if s not in ("Alarm_1", "Hotels_4", "Restaurants_2", "Services_4")]

USER_ACTS = {"INFORM_INTENT", "NEGATE_INTENT", "AFFIRM_INTENT", "INFORM", "REQUEST", "AFFIRM", "NEGATE", "SELECT",
             "REQUEST_ALTS", "THANK_YOU", "GOODBYE"}
SYSTEM_ACTS = {"INFORM", "REQUEST", "CONFIRM", "OFFER", "NOTIFY_SUCCESS", "NOTIFY_FAILURE", "INFORM_COUNT",
               "OFFER_INTENT", "REQ_MORE", "GOODBYE"}


def _run(pack, services: list[str], episodes: int, seed: int = 7, concurrency: int = 64, **times):
    scenarios = SgdScenarioSet(pack, services)
    return simulate(user=user_factory("agenda", scenarios), agent=agent_factory("schema", scenarios),
                    scenarios=scenarios, episodes=episodes, seed=seed, concurrency=concurrency, **times)


@pytest.fixture(scope="module")
def dev_run(pack):
    """1,000 dialogues over every dev-split service."""
    return _run(pack, DEV, 1000)


@pytest.fixture(scope="module")
def unseen_run(pack):
    """1,000 dialogues over the unseen services of the test split."""
    return _run(pack, UNSEEN_TEST, 1000)


@pytest.fixture(scope="module")
def unmined_run(pack):
    """1,000 dialogues over the test services with no dialogues to mine: generated entities, generic templates."""
    assert not set(UNMINED) & set(pack.mined_services)
    return _run(pack, UNMINED, 1000)


@pytest.fixture(params=["dev", "unseen", "unmined"])
def run(request, dev_run, unseen_run, unmined_run):
    """Each of the three batches in turn."""
    return {"dev": dev_run, "unseen": unseen_run, "unmined": unmined_run}[request.param]


@pytest.mark.slow
def test_success_rate_at_least_90_percent(run):
    """The agenda user reaches its goal with the rule agent in at least 90% of the dialogues."""
    outcomes = Counter(run.outcomes().values())
    assert sum(outcomes.values()) == 1000
    assert outcomes["success"] / 1000 >= 0.90, outcomes


@pytest.mark.slow
def test_every_act_kind_occurs(run):
    """Every SGD user act and every SGD system act is used somewhere in the batch."""
    user = {a.act for e in run.of_type("user_turn") for f in e.frames for a in f.actions}
    system = {a.act for e in run.of_type("agent_turn") for f in e.frames for a in f.actions}
    assert USER_ACTS <= user, USER_ACTS - user
    assert SYSTEM_ACTS <= system, SYSTEM_ACTS - system


def test_slot_spans_locate_their_values(run, pack):
    """Every span satisfies utterance[start:exclusive_end] == the act value, on both sides."""
    checked = 0
    for e in run:
        if not isinstance(e, (UserTurn, AgentTurn)):
            continue
        for f in e.frames:
            values = {v for a in f.actions if a.slot for v in a.values}
            for span in f.slots:
                assert 0 <= span.start < span.exclusive_end <= len(e.utterance)
                assert e.utterance[span.start:span.exclusive_end] in values, (e.utterance, span, values)
                assert not pack.service(f.service).is_categorical(span.slot)
                checked += 1
    assert checked > 1000


def test_categorical_state_values_are_possible_values(run, pack):
    """Every state value of a categorical slot (user truth and agent belief) is one of its possible_values."""
    for e in run:
        states = []
        if isinstance(e, UserTurn):
            states = [(f.service, f.state) for f in e.frames if f.state is not None]
        elif isinstance(e, AgentTurn) and e.state:
            states = list(e.state.items())
        for service, state in states:
            svc = pack.service(service)
            for slot, values in state.slot_values.items():
                assert values, (service, slot)
                if svc.is_categorical(slot):
                    assert set(values) <= set(svc.possible_values(slot)), (service, slot, values)


def test_user_state_is_sgd_shaped(run, pack):
    """The user's true state: an intent of the service, requested slots of this turn, slots that are intent arguments."""
    for e in run.of_type("user_turn"):
        for f in e.frames:
            svc = pack.service(f.service)
            args = {s for i in svc.intents.values() for s in list(i.required_slots) + list(i.optional_slots)}
            assert f.state.active_intent == "NONE" or f.state.active_intent in svc.intents
            assert set(f.state.requested_slots) == {a.slot for a in f.actions if a.act == "REQUEST"}
            assert set(f.state.slot_values) <= args


def test_service_calls_name_an_intent_and_carry_required_slots(run, pack):
    """Each call names an intent of its service and has every required slot with a concrete value."""
    calls = run.of_type("tool_called")
    assert len(calls) > 1000
    for call in calls:
        assert isinstance(call, ToolCalled)
        svc = pack.service(call.service)
        assert call.method in svc.intents
        intent = svc.intents[call.method]
        for slot in intent.required_slots:
            assert slot in call.parameters, (call.method, slot, call.parameters)
        assert set(call.parameters) <= set(intent.required_slots) | set(intent.optional_slots)


def test_agent_exposes_its_state_every_turn(run):
    """Every agent turn carries the agent's tracked state (possibly empty before the user said anything)."""
    assert all(e.state is not None for e in run.of_type("agent_turn"))


@pytest.mark.slow
def test_same_seed_same_dialogues(pack):
    """Two runs with the same seed are byte-identical (wall times aside); another seed differs."""
    a = _run(pack, DEV, 60, seed=11)
    b = _run(pack, DEV, 60, seed=11)
    c = _run(pack, DEV, 60, seed=12)
    assert strip_wall(a) == strip_wall(b)
    assert strip_wall(a) != strip_wall(c)


def test_episodes_in_flight_change_only_virtual_times_and_interleaving(pack):
    """One seed at 1, 7 and 60 episodes in flight (a live agent's default depends on its slots): each episode's
    events are the same but for their virtual times."""
    times = dict(think=Delay("uniform", 1, 4), latency=Delay("uniform", 0.2, 0.8))
    runs = []
    for concurrency in (1, 7, 60):
        episodes: dict[str, list] = {}
        for e in _run(pack, DEV[:6], 60, seed=9, concurrency=concurrency, **times):
            episodes.setdefault(e.ep, []).append(strip_wall([msgspec.structs.replace(e, t=0.0)])[0])
        runs.append(episodes)
    assert len(runs[0]) == 60 and runs[0] == runs[1] == runs[2]
