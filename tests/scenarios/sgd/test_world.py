"""The SGD world: search semantics (required, optional defaults, dontcare, echo slots), transactions, errors."""

from __future__ import annotations

import random

import pytest

from dialogsim.scenarios.sgd.world import SgdWorld


def _world(pack, seed=0, **kw):
    return SgdWorld(pack, random.Random(seed), **kw)


def test_errors_are_returned_never_raised(pack):
    """Unknown service or intent, missing required slots, foreign or malformed parameters give an error string."""
    w = _world(pack)
    cases = [("Nowhere_1", "Find", {}), ("Restaurants_2", "Teleport", {}), ("Restaurants_2", "FindRestaurants", {}),
             ("Restaurants_2", "FindRestaurants", {"location": "San Jose", "colour": "red"}),
             ("Restaurants_2", "FindRestaurants", {"location": 3}),
             ("Restaurants_2", "FindRestaurants", {"location": "San Jose", "price_range": "free"}),
             ("Restaurants_2", "FindRestaurants", ["location"])]
    for service, method, params in cases:
        results, error = w.call(service, method, params)
        assert results is None and isinstance(error, str) and error, (service, method, params)
    assert "missing required slot" in w.call("Restaurants_2", "FindRestaurants", {})[1]


def test_search_filters_case_insensitively_and_dontcare_matches_all(pack):
    """A search returns the table rows matching the given values; "dontcare" filters nothing."""
    rows = pack.entities("Restaurants_2", "FindRestaurants")
    city = rows[0]["location"]
    expected = {r["restaurant_name"] for r in rows if r["location"] == city}
    w = _world(pack, max_results=1000)
    got, err = w.call("Restaurants_2", "FindRestaurants", {"location": city.upper(), "category": "dontcare"})
    assert err is None and {r["restaurant_name"] for r in got} == expected
    cat = rows[0]["category"]
    narrow, _ = w.call("Restaurants_2", "FindRestaurants", {"location": city, "category": cat.lower()})
    assert narrow and all(r["category"] == cat for r in narrow) and len(narrow) <= len(got)
    assert {r["restaurant_name"] for r in narrow} == {
        r["restaurant_name"] for r in rows if r["location"] == city and r["category"] == cat}
    for r in got:
        assert set(pack.service("Restaurants_2").intents["FindRestaurants"].result_slots) <= set(r)
    assert w.call("Restaurants_2", "FindRestaurants", {"location": "Atlantis", "category": cat}) == ([], None)


def test_results_are_capped_and_copies(pack):
    """At most max_results rows come back, and mutating them leaves the pack's table untouched."""
    w = _world(pack, max_results=3)
    rows = pack.entities("Restaurants_2", "FindRestaurants")
    got, _ = w.call("Restaurants_2", "FindRestaurants", {"location": rows[0]["location"], "category": "dontcare"})
    assert 1 <= len(got) <= 3
    got[0]["location"] = "Mutated"
    assert all(r["location"] != "Mutated" for r in pack.entities("Restaurants_2", "FindRestaurants"))


def _optional_with_concrete_default(pack):
    """(service, intent, required params, slot, default) for an optional slot whose default filters rows."""
    for name in pack.services:
        svc = pack.service(name)
        for intent in svc.search_intents:
            rows = pack.entities(name, intent.name)
            echo = pack.echo.get(name, {}).get(intent.name, [])
            for slot, default in intent.optional_slots.items():
                if default in ("dontcare", "") or slot in echo or not rows or slot not in rows[0]:
                    continue
                for r in rows:
                    if r[slot] != default and all(k in r for k in intent.required_slots):
                        req = {k: r[k] for k in intent.required_slots}
                        same = [x for x in rows if all(x[k] == v for k, v in req.items())]
                        if any(x[slot] == default for x in same):
                            return name, intent.name, req, slot, default
    return None


def test_optional_slot_defaults_apply(pack):
    """An optional slot left out takes its schema default; saying "dontcare" lifts it."""
    found = _optional_with_concrete_default(pack)
    if found is None:
        pytest.skip("no optional slot with a concrete, filtering default in this pack")
    name, intent, req, slot, default = found
    w = _world(pack, max_results=10_000)
    got, _ = w.call(name, intent, req)
    assert got and all(r[slot].lower() == default.lower() for r in got)
    wide, _ = w.call(name, intent, dict(req, **{slot: "dontcare"}))
    assert any(r[slot] != default for r in wide) and len(wide) > len(got)


def test_echo_slots_never_filter_and_come_back_as_asked(pack):
    """A query-echo slot (party size, date) matches every row and the rows carry the asked value."""
    for name in pack.services:
        for intent, echo in pack.echo.get(name, {}).items():
            spec = pack.service(name).intents[intent]
            slots = [s for s in echo if s in spec.result_slots]
            rows = pack.entities(name, intent)
            if not slots or not rows or not all(k in rows[0] for k in spec.required_slots):
                continue
            slot = slots[0]
            params = {k: rows[0][k] for k in spec.required_slots}
            values = [v for v in pack.value_pool(name, slot) if v != params.get(slot)] or ["2019-03-09"]
            if pack.service(name).is_categorical(slot):
                values = [v for v in values if v in pack.service(name).possible_values(slot)]
            params[slot] = values[0]
            got, err = _world(pack).call(name, intent, params)
            assert err is None and got, (name, intent, params)
            assert all(r[slot] == values[0] for r in got)
            return
    pytest.skip("no echo slot in this pack")


def _reserve_params(pack):
    row = pack.entities("Restaurants_2", "FindRestaurants")[0]
    return {"restaurant_name": row["restaurant_name"], "location": row["location"], "time": "18:30"}


def test_transaction_success_row_and_impossible_request(pack):
    """A booking returns one row (parameters, defaults, result slots); naming no real entity fails."""
    w = _world(pack, failure_rate=0.0)
    params = _reserve_params(pack)
    got, err = w.call("Restaurants_2", "ReserveRestaurant", params)
    assert err is None and len(got) == 1
    row = got[0]
    spec = pack.service("Restaurants_2").intents["ReserveRestaurant"]
    assert set(spec.result_slots) <= set(row)
    assert row["restaurant_name"] == params["restaurant_name"] and row["time"] == "18:30"
    assert row["number_of_seats"] == spec.optional_slots["number_of_seats"]
    bad = dict(params, restaurant_name="The Restaurant At The End Of The Universe")
    assert w.call("Restaurants_2", "ReserveRestaurant", bad) == ([], None)


def test_a_booking_needs_a_value_for_every_required_slot(pack):
    """A transaction with a required slot missing or "dontcare" is an error; a search may say "dontcare"."""
    w = _world(pack, failure_rate=0.0)
    params = _reserve_params(pack)
    for slot in ("restaurant_name", "location", "time"):
        got, err = w.call("Restaurants_2", "ReserveRestaurant", dict(params, **{slot: "dontcare"}))
        assert got is None and err == (f"Restaurants_2.ReserveRestaurant: required slot {slot!r} needs a value, "
                                       "not 'dontcare', to be booked")
        missing = {k: v for k, v in params.items() if k != slot}
        assert w.call("Restaurants_2", "ReserveRestaurant", missing) == (
            None, f"Restaurants_2.ReserveRestaurant: missing required slot {slot!r}")
    assert w.call("Restaurants_2", "ReserveRestaurant", dict(params, date="dontcare"))[1] is None  # optional
    rows, err = w.call("Restaurants_2", "FindRestaurants", {"location": params["location"], "category": "dontcare"})
    assert err is None and rows


def test_transaction_failures_are_deterministic_per_rng(pack):
    """The failure share is drawn from the world's rng: same seed, same outcomes; rate 1 always fails."""
    params = _reserve_params(pack)

    def outcomes(seed):
        w = _world(pack, seed, failure_rate=0.3)
        return [bool(w.call("Restaurants_2", "ReserveRestaurant", params)[0]) for _ in range(200)]

    a, b = outcomes(7), outcomes(7)
    assert a == b
    assert outcomes(8) != a
    assert 0.15 < a.count(False) / len(a) < 0.45
    always = _world(pack, failure_rate=1.0)
    assert all(always.call("Restaurants_2", "ReserveRestaurant", params) == ([], None) for _ in range(20))


def test_generated_services_can_be_searched(pack):
    """A service without dialogues answers searches built from its generated rows."""
    for name in ("Trains_1", "Messaging_1", "Payment_1"):
        svc = pack.service(name)
        for intent in svc.search_intents:
            row = pack.entities(name, intent.name)[0]
            params = {k: row[k] for k in list(intent.required_slots) + list(intent.optional_slots) if k in row}
            got, err = _world(pack).call(name, intent.name, params)
            assert err is None and got
        for intent in svc.transactional_intents:
            params = {k: (pack.value_pool(name, k) or ["x"])[0] for k in intent.required_slots}
            results, err = _world(pack, failure_rate=0.0).call(name, intent.name, params)
            assert err is None and isinstance(results, list)


def test_garbage_calls_never_raise(pack):
    """Random services, methods and parameter shapes give results or an error string, never an exception."""
    rng = random.Random(9)
    w = _world(pack)
    names = pack.services + ["", "Ghost_1"]
    junk = [None, 3, "", "dontcare", "San Jose", ["x"], {"a": 1}]
    for _ in range(2000):
        service = rng.choice(names)
        intents = list(pack.service(service).intents) if service in pack.schemas else ["Nope"]
        method = rng.choice(intents + ["Nope"])
        slots = list(pack.service(service).slots) if service in pack.schemas else ["x"]
        params = {rng.choice(slots): rng.choice(junk) for _ in range(rng.randint(0, 4))}
        results, error = w.call(service, method, params if rng.random() < 0.95 else rng.choice(junk))
        assert (results is None) != (error is None)


def test_result_counts_follow_real_sgd(pack):
    """By default a search returns as many rows as real SGD calls of that intent did at most: one weather
    report, one balance, five flights, ten restaurants; unseen services take their intent name's count."""
    w = _world(pack)
    assert len(w.call("Weather_1", "GetWeather", {"city": pack.entities("Weather_1")[0]["city"]})[0]) == 1
    assert len(w.call("Banks_2", "CheckBalance", {"account_type": "checking"})[0]) == 1
    assert len(w.call("Banks_1", "CheckBalance", {"account_type": "checking"})[0]) == 1
    flight = pack.entities("Flights_3", "SearchOnewayFlight")[0]
    params = {k: flight[k] for k in ("origin_city", "destination_city", "departure_date")}
    assert 1 <= len(w.call("Flights_3", "SearchOnewayFlight", params)[0]) <= 5
    assert len(w.call("Restaurants_2", "FindRestaurants", {"location": "San Jose", "category": "dontcare"})[0]) == 10


def test_one_result_per_named_entity(pack):
    """A search never offers the same movie (restaurant, hotel...) twice, whatever the case of its name."""
    w = _world(pack)
    for seed in range(30):
        w = _world(pack, seed)
        rows, _ = w.call("Movies_2", "FindMovies", {"genre": "dontcare"})
        titles = [r["title"].lower() for r in rows]
        assert len(titles) == len(set(titles)) == 10


def test_booking_results_have_values_of_their_kind(pack):
    """What a booking returns comes from real results of that slot: a transfer takes days ("3"), not a clock
    time; an unseen service's waiting time is a number of minutes."""
    w = _world(pack, failure_rate=0.0)
    for seed in range(20):
        rows, _ = _world(pack, seed, failure_rate=0.0).call("Banks_2", "TransferMoney", {
            "account_type": "checking", "transfer_amount": "100", "recipient_name": "Kagiso"})
        assert rows[0]["transfer_time"].isdigit(), rows
    assert all(v.isdigit() for v in pack.value_pool("RideSharing_2", "wait_time"))
    assert w.call("RideSharing_1", "GetRide", {"destination": "1 Main Street", "number_of_riders": "2",
                                               "shared_ride": "False"})[0][0]["ride_fare"].replace(".", "").isdigit()


def test_a_search_returns_no_identical_rows(pack):
    """The demo's bus search (New York to Washington) once returned the 11:10 / $39 bus twice; every search of
    every table's first row's values now returns distinct rows."""
    w = _world(pack, max_results=1000)
    got, _ = w.call("Buses_1", "FindBus", {"from_location": "New York", "to_location": "Washington",
                                           "leaving_date": "2019-03-06"})
    assert len(got) > 1 and len({tuple(sorted(r.items())) for r in got}) == len(got)
    for name in pack.services:
        for intent in pack.service(name).search_intents:
            rows = pack.entities(name, intent.name)
            params = {s: rows[0][s] for s in intent.required_slots if s in rows[0]}
            got, err = w.call(name, intent.name, params)
            if err is None:
                assert len({tuple(sorted(r.items())) for r in got}) == len(got), (name, intent.name)
