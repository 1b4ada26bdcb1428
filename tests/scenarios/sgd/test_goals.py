"""The goal sampler: constraints from real entities, an infeasible share with relaxations, chains, services."""

from __future__ import annotations

import random

import msgspec
import pytest

from dialogsim.engine.errors import UserError
from dialogsim.scenarios.sgd.goals import sample_goal
from dialogsim.scenarios.sgd.pairs import slot_pairs
from dialogsim.scenarios.sgd.values import plausible, slot_kind
from dialogsim.scenarios.sgd.world import SgdWorld

KEYS = {"service", "intent", "constraints", "optional", "requested", "relax", "feasible", "from_previous", "entity"}
TEST_ONLY = ["Buses_3", "Events_3", "Flights_4", "Homes_2", "Hotels_2", "Media_3", "Messaging_1", "Movies_3",
             "Music_3", "Payment_1", "RentalCars_3", "RideSharing_2", "Trains_1"]


@pytest.fixture(scope="module")
def goals(pack):
    """A thousand goals over the mined services."""
    rng = random.Random(11)
    return [sample_goal(pack, rng, infeasible_share=0.2) for _ in range(1000)]


def _search(pack, sg, constraints):
    svc = pack.service(sg["service"])
    params = dict(constraints)
    for slot in svc.intents[sg["intent"]].required_slots:
        params.setdefault(slot, "dontcare")
    return SgdWorld(pack, random.Random(0), max_results=10_000).call(sg["service"], sg["intent"], params)


def test_goals_are_well_formed_and_json_able(pack, goals):
    """Every subgoal has the documented keys, names real intents and slots, and values are canonical strings."""
    for goal in goals:
        msgspec.json.decode(msgspec.json.encode(goal))
        assert goal["services"] == list(dict.fromkeys(sg["service"] for sg in goal["subgoals"]))
        for i, sg in enumerate(goal["subgoals"]):
            assert set(sg) == KEYS
            svc = pack.service(sg["service"])
            intent = svc.intents[sg["intent"]]
            inputs = set(intent.required_slots) | set(intent.optional_slots)
            assert set(sg["constraints"]) <= inputs and set(sg["optional"]) <= inputs
            assert not set(sg["constraints"]) & set(sg["from_previous"])
            assert set(sg["requested"]) <= set(intent.result_slots)
            assert set(intent.required_slots) <= set(sg["constraints"]) | set(sg["from_previous"])
            for slot, value in list(sg["constraints"].items()) + list(sg["optional"].items()):
                assert isinstance(value, str) and value
                if svc.is_categorical(slot):
                    assert value in svc.possible_values(slot), (sg["service"], slot, value)
            if sg["from_previous"]:
                assert i > 0
                prev = goal["subgoals"][i - 1]
                pi = pack.service(prev["service"]).intents[prev["intent"]]
                sources = set(pi.result_slots) | set(pi.required_slots) | set(pi.optional_slots)
                assert set(sg["from_previous"].values()) <= sources


def test_every_required_slot_of_a_transaction_has_a_concrete_value(pack, goals):
    """A booking's required slots are stated, or carried over with a value of their own should carrying fail."""
    carried = 0
    for goal in goals:
        for sg in goal["subgoals"]:
            intent = pack.service(sg["service"]).intents[sg["intent"]]
            if not intent.is_transactional:
                continue
            for slot in intent.required_slots:
                value = sg["constraints"].get(slot) or sg["optional"].get(slot)
                assert value and value != "dontcare", (sg, slot)
                carried += slot in sg["from_previous"]
    assert carried > 100


def test_feasible_searches_succeed_on_their_entity(pack, goals):
    """Constraints of a feasible, unlinked search come from a real entity: the world finds that entity."""
    checked = 0
    for goal in goals:
        for sg in goal["subgoals"]:
            svc = pack.service(sg["service"])
            if svc.intents[sg["intent"]].is_transactional or sg["from_previous"] or not sg["feasible"]:
                continue
            rows, err = _search(pack, sg, sg["constraints"])
            assert err is None and rows, sg
            checked += 1
    assert checked > 300


def test_an_infeasible_share_with_working_relaxations(pack, goals):
    """About a fifth of the searches cannot be met as stated; applying their relax list makes them succeed."""
    searches = [sg for g in goals for sg in g["subgoals"]
                if not pack.service(sg["service"]).intents[sg["intent"]].is_transactional and not sg["from_previous"]]
    infeasible = [sg for sg in searches if not sg["feasible"]]
    assert 0.05 < len(infeasible) / len(searches) < 0.3  # attempts that find no impossible value stay feasible
    for sg in infeasible:
        assert _search(pack, sg, sg["constraints"]) == ([], None)
        relaxed = dict(sg["constraints"])
        for slot, value in sg["relax"]:
            relaxed[slot] = value
        rows, _ = _search(pack, sg, relaxed)
        assert rows, sg


def test_chains_and_multi_service_goals(pack, goals):
    """Search-then-book chains carry slots over; multi-service goals link services (a ride to the restaurant)."""
    chains = [g for g in goals if len(g["subgoals"]) >= 2 and g["subgoals"][0]["service"] == g["subgoals"][1]["service"]]
    assert len(chains) > 100
    assert any(g["subgoals"][0]["intent"] == "FindRestaurants" and g["subgoals"][1]["intent"] == "ReserveRestaurant"
               and g["subgoals"][1]["from_previous"].get("restaurant_name") == "restaurant_name" for g in chains)
    multi = [g for g in goals if len(g["services"]) > 1]
    assert 0.2 < len(multi) / len(goals) < 0.7
    cross = [sg for g in multi for i, sg in enumerate(g["subgoals"])
             if i and sg["service"] != g["subgoals"][i - 1]["service"] and sg["from_previous"]]
    assert len(cross) > 50
    assert any(g["services"] == ["Restaurants_2", "RideSharing_1"] and
               g["subgoals"][-1]["from_previous"].get("destination") in ("street_address", "address") for g in multi)


def test_requested_and_optional_slots_occur(goals):
    """Goals ask for result slots and hold optional values given only when asked."""
    subgoals = [sg for g in goals for sg in g["subgoals"]]
    assert sum(bool(sg["requested"]) for sg in subgoals) > len(subgoals) / 5
    assert sum(bool(sg["optional"]) for sg in subgoals) > len(subgoals) / 20


def test_service_pool_sequence_and_determinism(pack):
    """Goals stay within a given service pool, follow a fixed sequence, and repeat for the same rng seed."""
    for _ in range(50):
        g = sample_goal(pack, random.Random(_), services=["Weather_1", "Homes_1"])
        assert set(g["services"]) <= {"Weather_1", "Homes_1"}
    g = sample_goal(pack, random.Random(1), sequence=["Restaurants_2", "RideSharing_1"])
    assert g["services"] == ["Restaurants_2", "RideSharing_1"]
    assert sample_goal(pack, random.Random(5)) == sample_goal(pack, random.Random(5))
    with pytest.raises(UserError, match="Ghost_1"):
        sample_goal(pack, random.Random(0), services=["Ghost_1"])


def test_unseen_services_get_goals(pack):
    """Services without dialogues (test split) get goals whose feasible searches succeed too."""
    rng = random.Random(3)
    seen = set()
    for _ in range(300):
        g = sample_goal(pack, rng, services=TEST_ONLY)
        seen.update(g["services"])
        for sg in g["subgoals"]:
            svc = pack.service(sg["service"])
            if not svc.intents[sg["intent"]].is_transactional and sg["feasible"] and not sg["from_previous"]:
                assert _search(pack, sg, sg["constraints"])[0], sg
    assert seen == set(TEST_ONLY)


def _stated(goal):
    """Per subgoal, the values the user ends up stating: constraints, optional values and carried-over values
    (predicted like the user does, from the previous subgoal's entity and values), then after each relaxation."""
    known: dict[str, str] = {}
    for sg in goal["subgoals"]:
        linked = {s: known[p] for s, p in sg["from_previous"].items() if p in known}
        values = {**linked, **sg["optional"], **sg["constraints"]}
        steps = [dict(values)]
        for slot, value in sg["relax"]:
            values[slot] = value
            steps.append(dict(values))
        yield sg, linked, steps
        known = {**(sg["entity"] or {}), **sg["constraints"], **linked}


def _goals_everywhere(pack, n=1500):
    """Goals over every service: the mined pool, unseen services, and travel sequences that carry dates over."""
    rng = random.Random(8)
    seqs = [["Buses_1", "RentalCars_1"], ["Flights_3", "RentalCars_1"], ["Buses_1", "Hotels_4"],
            ["Events_1", "Buses_1"], ["RentalCars_1", "Buses_1"], ["Flights_3", "Hotels_1"], ["Trains_1"],
            ["Buses_2"], ["Buses_3"], ["Flights_1"], ["Flights_2"], ["Flights_4"], ["Hotels_2"], ["Hotels_3"],
            ["RentalCars_2"], ["RentalCars_3"], ["Events_1", "Buses_3"], ["Weather_1", "Flights_3"]]
    for i in range(n):
        if i % 3 == 0:
            yield sample_goal(pack, rng, sequence=seqs[i // 3 % len(seqs)])
        elif i % 3 == 1:
            yield sample_goal(pack, rng, services=TEST_ONLY)
        else:
            yield sample_goal(pack, rng, infeasible_share=0.5)


@pytest.mark.slow
def test_end_dates_follow_start_dates(pack):
    """For every sampled goal and every relaxation step: dropoff after pickup, check-out after check-in,
    return after departure, end after start, counting values carried over from the previous subgoal."""
    pairs = 0
    for goal in _goals_everywhere(pack):
        for sg, _, steps in _stated(goal):
            _, dates = slot_pairs(pack.service(sg["service"]).slots)
            for values in steps:
                for start, end in dates:
                    if start in values and end in values:
                        pairs += 1
                        assert values[start] < values[end], (sg, values)
    assert pairs > 300


@pytest.mark.slow
def test_trips_never_end_where_they_start(pack):
    """From and to (origin and destination) of a trip always differ, as first stated and after relaxing."""
    pairs = 0
    for goal in _goals_everywhere(pack):
        for sg, _, steps in _stated(goal):
            places, _ = slot_pairs(pack.service(sg["service"]).slots)
            for values in steps:
                for a, b in places:
                    if a in values and b in values and values[a] != "dontcare":
                        pairs += 1
                        assert values[a].lower() != values[b].lower(), (sg, values)
    assert pairs > 300


@pytest.mark.slow
def test_carried_over_values_keep_their_kind(pack):
    """A slot filled from the previous subgoal gets a value of its kind: a city slot a city (never a
    station), one source slot feeds at most one slot (a bus never goes from a station to itself)."""
    carried = 0
    for goal in _goals_everywhere(pack):
        for sg, linked, _ in _stated(goal):
            assert len(set(sg["from_previous"].values())) == len(sg["from_previous"]), sg
            svc = pack.service(sg["service"])
            for slot, value in linked.items():
                carried += 1
                kind = slot_kind(svc.slots[slot])
                if kind == "city" and "city" in slot:
                    words = set(value.lower().split())
                    assert not value[:1].isdigit() and not words & {"station", "airport", "terminal"}, (slot, value)
                if kind in ("date", "time"):
                    assert plausible(kind, value), (sg["service"], slot, value)
    assert carried > 300


def test_the_reported_dialogues_cannot_recur(pack):
    """A bus after a car rental never goes from the rental station to itself (seen in a simulated run)."""
    rng = random.Random(0)
    for _ in range(300):
        g = sample_goal(pack, rng, sequence=["RentalCars_1", "Buses_1"])
        for prev, sg in zip(g["subgoals"], g["subgoals"][1:]):
            if sg["service"] == "Buses_1" and prev["service"] == "RentalCars_1":
                assert sorted(sg["from_previous"]) in ([], ["to_location"]), sg


def test_the_next_service_goes_where_the_first_one_was(pack):
    """The entity of a search is drawn so that later searches find the carried-over values: a hotel found and
    booked in a city, then a restaurant in that city (not London, then Mountain View); an event's city, then a
    hotel there."""
    rng = random.Random(3)
    for sequence, slot in ((["Hotels_1", "Restaurants_2"], "location"), (["Events_1", "Hotels_4"], "location")):
        kept = total = 0
        for _ in range(300):
            g = sample_goal(pack, rng, sequence=sequence, infeasible_share=0.0)
            later = [sg for sg in g["subgoals"] if sg["service"] == sequence[1]
                     and not pack.service(sg["service"]).intents[sg["intent"]].is_transactional]
            for sg in later[:1]:
                total += 1
                kept += slot in sg["from_previous"]
        assert total > 50 and kept / total > 0.8, (sequence, kept, total)
