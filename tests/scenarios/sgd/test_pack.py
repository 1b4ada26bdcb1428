"""Building and loading SGD packs from a small real fixture: contents, determinism, errors, no partial pack."""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import msgspec
import pytest

from dialogsim.engine.cli import main as cli_main
from dialogsim.engine.errors import UserError
from dialogsim.scenarios.sgd.pack import build_pack, is_pack_dir, load_pack

ROOT = Path(__file__).resolve().parents[3]
SMALL = ROOT / "tests" / "fixtures" / "sgd_small"


@pytest.fixture(scope="module")
def small_pack(tmp_path_factory):
    """A pack built from the ten-dialogue fixture (two services have no dialogues)."""
    out = tmp_path_factory.mktemp("packs") / "small"
    manifest = build_pack([SMALL], [SMALL / "schema.json"], out)
    return manifest, load_pack(out)


def test_manifest_and_files(small_pack):
    """The manifest names the format, a content id, sources and counts; NOTICE carries the licence."""
    manifest, pack = small_pack
    assert manifest["format"] == "dialogsim-sgd-pack" and manifest["version"] == 1
    assert pack.id == manifest["id"] and pack.id.startswith("sgd-")
    assert manifest["counts"]["dialogues"] == 10
    assert manifest["sources"]["dialogue_files"] == ["sgd_small/dialogues_001.json"]
    assert set(manifest["generated_services"]) >= {"Restaurants_1", "Trains_1"}
    assert pack.mined_services == {"Hotels_4", "Restaurants_2", "RideSharing_1", "Weather_1"}
    assert "CC BY-SA 4.0" in (pack.path / "NOTICE").read_text()
    assert is_pack_dir(pack.path)


def test_entities_are_deduplicated_service_results(small_pack):
    """Entity rows are the distinct service_results rows of search calls, with every result slot."""
    _, pack = small_pack
    dialogues = json.loads((SMALL / "dialogues_001.json").read_text())
    seen = set()
    for d in dialogues:
        for t in d["turns"]:
            for f in t["frames"]:
                if f.get("service") == "Restaurants_2" and f.get("service_call", {}).get("method") == "FindRestaurants":
                    seen.update(tuple(sorted(r.items())) for r in f["service_results"])
    rows = pack.entities("Restaurants_2", "FindRestaurants")
    assert {tuple(sorted(r.items())) for r in rows} == seen
    assert len(rows) == len(seen)
    assert pack.entities("Restaurants_2") == rows  # the only search intent
    assert pack.entities("Restaurants_2", "ReserveRestaurant") == []  # transactions have no table


def test_surface_forms_and_reverse_lookup(small_pack):
    """A canonical value's mined spoken variants are returned, and map back to the canonical."""
    _, pack = small_pack
    forms = pack.spoken_forms("Restaurants_2", "time", "11:30")
    assert "half past 11 in the morning" in forms
    rng = random.Random(0)
    drawn = {pack.spoken("Restaurants_2", "time", "11:30", rng) for _ in range(200)}
    assert drawn <= set(forms) and len(drawn) >= 2
    assert pack.canonical("Restaurants_2", "time", "Half past 11 in the morning") == "11:30"
    assert pack.spoken("Restaurants_2", "restaurant_name", "No Such Place", rng) == "No Such Place"
    assert pack.canonical("Restaurants_2", "restaurant_name", "nowhere at all") is None


def test_services_without_dialogues_get_generated_data(small_pack):
    """Unseen services have entity rows for each search intent and value pools for every slot."""
    _, pack = small_pack
    for name in ("Restaurants_1", "Trains_1"):
        svc = pack.service(name)
        for intent in svc.search_intents:
            rows = pack.entities(name, intent.name)
            assert len(rows) >= 10
            for row in rows:
                assert set(intent.result_slots) <= set(row)
                for slot, value in row.items():
                    if svc.is_categorical(slot):
                        assert value in svc.possible_values(slot)
        for slot in svc.slots:
            assert pack.value_pool(name, slot), (name, slot)


def test_templates_and_stats_are_mined(small_pack):
    """Template banks exist for both speakers; statistics count intents, chains and multi-service pairs."""
    _, pack = small_pack
    banks = pack.realizer.banks
    assert banks["USER"]["Restaurants_2"] and banks["SYSTEM"]["Restaurants_2"]
    assert any("REQUEST(" in sig for sig in banks["SYSTEM"]["Restaurants_2"])
    st = pack.stats["services"]["Restaurants_2"]
    assert st["dialogues"] == 6 and st["intents"]
    assert pack.stats["pairs"] == {"Restaurants_2|RideSharing_1": 1}
    assert any(k.startswith("Restaurants.") and ">RideSharing." in k for k in pack.stats["transfers"])


def test_build_is_deterministic(tmp_path):
    """The same inputs give byte-identical packs (same id, same files)."""
    a = build_pack([SMALL], [SMALL / "schema.json"], tmp_path / "a")
    b = build_pack([SMALL / "dialogues_001.json"], [SMALL / "schema.json"], tmp_path / "b")
    assert a["id"] == b["id"]
    for f in ("entities.json.gz", "templates.json.gz", "values.json.gz", "schemas.json", "stats.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def _no_leftovers(parent: Path, name: str) -> bool:
    return not (parent / name).exists() and not [p for p in parent.iterdir() if p.name.startswith(f".{name}.")]


def test_build_errors_leave_no_partial_pack(tmp_path):
    """A bad dialogue file, an unknown service or a bad schema aborts the build with nothing written."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "dialogues_001.json").write_text('[{"dialogue_id": "x", "turns": [')
    with pytest.raises(UserError, match="dialogues_001.json"):
        build_pack([bad], [SMALL / "schema.json"], tmp_path / "out")
    assert _no_leftovers(tmp_path, "out")
    dialogues = json.loads((SMALL / "dialogues_001.json").read_text())
    dialogues[0]["services"] = ["Nowhere_9"]
    (bad / "dialogues_001.json").write_text(json.dumps(dialogues))
    with pytest.raises(UserError, match="Nowhere_9"):
        build_pack([bad], [SMALL / "schema.json"], tmp_path / "out")
    assert _no_leftovers(tmp_path, "out")
    with pytest.raises(UserError, match="no such"):
        build_pack([tmp_path / "absent"], [SMALL / "schema.json"], tmp_path / "out")
    (tmp_path / "schema.json").write_text("[1]")
    with pytest.raises(UserError, match="schema.json"):
        build_pack([SMALL], [tmp_path / "schema.json"], tmp_path / "out")
    assert _no_leftovers(tmp_path, "out")


def _spoilt(tmp_path: Path, spoil) -> Path:
    """A copy of the small fixture's dialogues with ``spoil(dialogues)`` applied, in its own directory."""
    dialogues = json.loads((SMALL / "dialogues_001.json").read_text())
    spoil(dialogues)
    where = tmp_path / "spoilt"
    where.mkdir(exist_ok=True)
    (where / "dialogues_003.json").write_text(json.dumps(dialogues))
    return where


def _frame(dialogues, turn: int = 2) -> dict:
    return dialogues[0]["turns"][turn]["frames"][0]


_AT = "turn 2: frame for Restaurants_2: "


@pytest.mark.parametrize("spoil, element", [
    (lambda d: _frame(d)["actions"][0].update(slot="foo"), _AT + "actions[0] (INFORM): unknown slot 'foo' (not in the schema)"),
    (lambda d: _frame(d)["slots"][0].update(slot="foo"), _AT + "slots: span of unknown slot 'foo' (not in the schema)"),
    (lambda d: _frame(d)["state"]["slot_values"].update(foo=["x"]),
     _AT + "state.slot_values: unknown slot 'foo' (not in the schema)"),
    (lambda d: _frame(d)["state"].update(active_intent="BookTable"),
     _AT + "state.active_intent: unknown intent 'BookTable' (not in the schema)"),
    (lambda d: _frame(d)["actions"].append({"act": "INFORM_INTENT", "canonical_values": ["BookTable"], "slot": "intent",
                                            "values": ["BookTable"]}),
     _AT + "actions[2] (INFORM_INTENT): unknown intent 'BookTable' (not in the schema)"),
    (lambda d: _frame(d).update(service="Nowhere_9"), "turn 2: unknown service 'Nowhere_9' (not in the schema)"),
    (lambda d: _frame(d, 3).update(service_call={"method": "FindRestaurants", "parameters": {"foo": "x"}},
                                   service_results=[]),
     "turn 3: frame for Restaurants_2: service_call.parameters: unknown slot 'foo' (not in the schema)"),
    (lambda d: _frame(d, 3).update(service_call={"method": "FindRestaurants", "parameters": {}},
                                   service_results=[{"foo": "x"}]),
     "turn 3: frame for Restaurants_2: service_results[0]: unknown slot 'foo' (not in the schema)"),
    (lambda d: _frame(d).update(actions={"act": "INFORM"}),
     "turn 2: not SGD (Expected `array`, got `object` - at `$.turns[2].frames[0].actions`)"),
])
def test_dialogues_outside_the_schemas_name_file_dialogue_turn_and_element(tmp_path, spoil, element):
    """A slot, intent or service the schemas lack fails the build with one line naming where, no pack left;
    the message is the one ``import sgd`` gives (one checker for both)."""
    bad = _spoilt(tmp_path, spoil)
    with pytest.raises(UserError) as err:
        build_pack([bad], [SMALL / "schema.json"], tmp_path / "out")
    assert str(err.value) == f"{bad / 'dialogues_003.json'}: dialogue 1_00000, {element}"
    assert _no_leftovers(tmp_path, "out")


def test_a_truncated_dialogue_file_says_so(tmp_path):
    """A dialogue file cut short is named with where its JSON stops; malformed JSON says what is wrong."""
    bad = tmp_path / "bad"
    bad.mkdir()
    text = (SMALL / "dialogues_001.json").read_text()[:5000]
    (bad / "dialogues_001.json").write_text(text)
    with pytest.raises(UserError) as err:
        build_pack([bad], [SMALL / "schema.json"], tmp_path / "out")
    assert str(err.value) == (f"{bad / 'dialogues_001.json'}: not JSON: the JSON stops "
                              f"unfinished at byte {len(text.encode())} (a truncated file?)")
    (bad / "dialogues_001.json").write_text('[{"dialogue_id": "x", "turns": [}]')
    with pytest.raises(UserError, match=r"dialogues_001\.json: not JSON: .*malformed.*byte"):
        build_pack([bad], [SMALL / "schema.json"], tmp_path / "out")
    assert _no_leftovers(tmp_path, "out")


def test_cli_pack_build_of_a_bad_dialogue_is_one_line_and_exit_2(tmp_path, capsys):
    """From the command line: exit status 2, one line on stderr naming the element, no traceback, no pack."""
    bad = _spoilt(tmp_path, lambda d: _frame(d)["actions"][0].update(slot="foo"))
    code = cli_main(["pack", "build", "--sgd", str(bad), "--schemas", str(SMALL / "schema.json"),
                     "--out", str(tmp_path / "never"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "never").exists()
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert ("dialogues_003.json: dialogue 1_00000, turn 2: frame for Restaurants_2: actions[0] (INFORM): unknown slot "
            "'foo' (not in the schema)") in err


def test_rebuild_replaces_a_pack_but_never_clobbers_other_dirs(tmp_path):
    """Building over an existing pack replaces it; over a non-pack directory is refused."""
    out = tmp_path / "pack"
    build_pack([SMALL], [SMALL / "schema.json"], out)
    build_pack([SMALL], [SMALL / "schema.json"], out)
    assert is_pack_dir(out) and _no_leftovers(tmp_path, "pack.old") is True
    other = tmp_path / "docs"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="refusing"):
        build_pack([SMALL], [SMALL / "schema.json"], other)
    assert (other / "keep.txt").read_text() == "mine"


def test_malformed_pack_names_file_and_element(tmp_path, small_pack):
    """A corrupt or inconsistent pack is a UserError naming the file and the element."""
    _, pack = small_pack
    bad = tmp_path / "bad"
    shutil.copytree(pack.path, bad)
    with pytest.raises(UserError, match="not a pack"):
        load_pack(tmp_path)
    ents = msgspec.json.decode(gzip.decompress((bad / "entities.json.gz").read_bytes()))
    ents["Ghost_1"] = {}
    (bad / "entities.json.gz").write_bytes(gzip.compress(msgspec.json.encode(ents)))
    with pytest.raises(UserError, match=r"entities\.json\.gz.*Ghost_1"):
        load_pack(bad)
    del ents["Ghost_1"]
    ents["Restaurants_2"]["FindRestaurants"]["rows"][0].pop()
    (bad / "entities.json.gz").write_bytes(gzip.compress(msgspec.json.encode(ents)))
    with pytest.raises(UserError, match="Restaurants_2.*FindRestaurants.*row #0"):
        load_pack(bad)
    (bad / "entities.json.gz").write_bytes(b"garbage")
    with pytest.raises(UserError, match="entities.json.gz"):
        load_pack(bad)
    shutil.copy(pack.path / "entities.json.gz", bad / "entities.json.gz")
    (bad / "schemas.json").write_text("[{}]")
    with pytest.raises(UserError, match="schemas.json"):
        load_pack(bad)
    manifest = json.loads((bad / "pack.json").read_text())
    manifest["version"] = 99
    (bad / "pack.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="version"):
        load_pack(bad)


def test_unknown_service_is_a_user_error(small_pack):
    """Asking a pack for a service it lacks is a UserError, not a KeyError."""
    _, pack = small_pack
    with pytest.raises(UserError, match="Ghost_1"):
        pack.service("Ghost_1")


def test_cli_pack_build(tmp_path, capsys):
    """`dialogsim pack build` writes a loadable pack; bad input exits 2 with one line and no pack."""
    out = tmp_path / "cli_pack"
    code = cli_main(["pack", "build", "--sgd", str(SMALL), "--schemas", str(SMALL / "schema.json"),
                     "--out", str(out), "--no-progress"])
    assert code == 0 and load_pack(out).services
    code = cli_main(["pack", "build", "--sgd", str(tmp_path / "nope"), "--schemas", str(SMALL / "schema.json"),
                     "--out", str(tmp_path / "never")])
    assert code == 2 and not (tmp_path / "never").exists()
    assert "nope" in capsys.readouterr().err


def test_entity_rows_are_sensible_trips_and_stays():
    """In the bundled pack, mined and generated rows alike: a trip's two ends differ and end dates follow
    start dates (generated flights no longer go from San Francisco to San Francisco and back before leaving)."""
    from dialogsim.scenarios.sgd.pairs import slot_pairs

    pack = load_pack()
    checked = 0
    for name in pack.services:
        places, dates = slot_pairs(pack.service(name).slots)
        for row in pack.entities(name):
            for a, b in places:
                if row.get(a) and row.get(b):
                    checked += 1
                    assert row[a].lower() != row[b].lower(), (name, row)
            for a, b in dates:
                if row.get(a) and row.get(b):
                    checked += 1
                    assert row[a] < row[b], (name, row)
    assert checked > 1000


def test_result_counts_are_mined():
    """The statistics record the most results a real call of each intent returned."""
    stats = load_pack().stats["services"]
    assert stats["Weather_1"]["results"]["GetWeather"] == 1
    assert stats["Flights_3"]["results"]["SearchOnewayFlight"] == 5
    assert stats["Restaurants_2"]["results"]["FindRestaurants"] == 10


def test_templates_never_spell_out_an_unannotated_entity_value():
    """A system turn that names the car model without annotating it ("a Standard Bolt") is not mined as a
    template (it would name that model whatever car is confirmed); the same turn without the name is."""
    from dialogsim.scenarios.sgd.mine import Miner

    svc = load_pack().service("RentalCars_1")
    act = {"act": "CONFIRM", "slot": "pickup_location", "values": ["Fresno Station"],
           "canonical_values": ["Fresno Station"]}
    results = [{"car_name": "Bolt", "pickup_location": "Fresno Station", "type": "Standard"}]

    def dialogue(text):
        start = text.index("Fresno Station")
        frame = {"service": "RentalCars_1", "actions": [act], "service_results": results,
                 "slots": [{"slot": "pickup_location", "start": start, "exclusive_end": start + 14}]}
        return {"dialogue_id": "x", "services": ["RentalCars_1"],
                "turns": [{"speaker": "SYSTEM", "utterance": text, "frames": [frame]}]}

    leaky, clean = Miner({"RentalCars_1": svc}), Miner({"RentalCars_1": svc})
    leaky.add(dialogue("Please confirm: a Standard Bolt from Fresno Station."), "t")
    clean.add(dialogue("Please confirm: a Standard car from Fresno Station."), "t")
    assert not leaky.templates["SYSTEM"]["RentalCars_1"]
    assert list(clean.templates["SYSTEM"]["RentalCars_1"]["CONFIRM(pickup_location)"]) == [
        ("Please confirm: a Standard car from ", 0, ".")]


def test_value_pools_hold_values_of_the_slots_kind():
    """Every service's value pools: categorical slots only their possible values (never "dontcare"); the
    generated data of unseen services gives trip ends cities (not restaurants or apartments), venues venue
    names, persons names (not account types), waiting times minutes."""
    from dialogsim.scenarios.sgd.values import plausible

    pack = load_pack()
    for name in pack.services:
        svc = pack.service(name)
        for slot in svc.slots:
            pool = pack.value_pool(name, slot)
            if svc.is_categorical(slot):
                assert set(pool) <= set(svc.possible_values(slot)), (name, slot, pool)
            assert "dontcare" not in pool, (name, slot)
    for name, slot in (("Buses_2", "origin"), ("Buses_2", "destination"), ("Buses_3", "to_city"),
                       ("Flights_2", "destination"), ("Trains_1", "to"), ("Hotels_2", "where_to")):
        assert all(plausible("city", v) for v in pack.value_pool(name, slot)), (name, slot)
    for name in ("Events_2", "Events_3"):
        assert not any(v.endswith(" event") for v in pack.value_pool(name, "venue"))
    assert not {"savings", "checking"} & set(pack.value_pool("Payment_1", "receiver"))
    assert all(v.isdigit() for v in pack.value_pool("RideSharing_2", "wait_time"))


def test_derive_builds_each_fact_once_per_pack(small_pack):
    """``derive`` calls a builder once per pack and returns what it built; each builder keeps its own."""
    _, pack = small_pack
    calls = []

    def services(p):
        calls.append(p)
        return sorted(p.services)

    first = pack.derive(services)
    assert pack.derive(services) is first and calls == [pack]
    assert first == sorted(pack.services)
    assert pack.derive(lambda p: "other") == "other"  # a different builder, a different fact


def test_distinct_rows_drop_repeats_outside_the_echo_columns():
    """Rows equal but for an echo column (the travellers count) are one entity: the first is kept."""
    from dialogsim.scenarios.sgd.build import distinct_rows

    cols = ["fare", "leaving_time", "travelers"]
    rows = [["39", "11:10", "1"], ["39", "11:10", "2"], ["39", "11:10", "1"], ["39", "14:30", "2"]]
    assert distinct_rows(cols, rows, ["travelers"]) == [["39", "11:10", "1"], ["39", "14:30", "2"]]
    assert distinct_rows(cols, rows, []) == [["39", "11:10", "1"], ["39", "11:10", "2"], ["39", "14:30", "2"]]
