"""Loading SGD schema.json files: every real split and SGD-X variant, and clear errors for malformed ones."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from dialogsim.engine.errors import UserError
from dialogsim.scenarios.sgd.schema import ServiceSchema, load_schemas

ROOT = Path(__file__).resolve().parents[3]
SHARED_SGD = ROOT.parent / "shared" / "sgd"
FIXTURE = ROOT / "tests" / "fixtures" / "sgd_small" / "schema.json"


def _shared_schema_files() -> list[Path]:
    return sorted(SHARED_SGD.glob("**/schema.json")) if SHARED_SGD.is_dir() else []


def test_every_shared_schema_loads():
    """Every schema.json of the three splits and of the five SGD-X variants loads and validates."""
    files = _shared_schema_files()
    if not files:
        pytest.skip("../shared/sgd is not available")
    assert len(files) >= 18  # 3 splits + 5 variants x 3 splits
    total = 0
    for f in files:
        services = load_schemas(f)
        total += len(services)
        for raw in services:
            svc = ServiceSchema.from_dict(raw)
            for intent in svc.intents.values():
                assert set(intent.required_slots) <= set(svc.slots)
    assert total >= 45 * 6 - 45  # the originals and every variant


def test_typed_view_of_a_service():
    """The typed view answers slot, intent and categorical questions."""
    raw = {s["service_name"]: s for s in load_schemas(FIXTURE)}["Restaurants_2"]
    svc = ServiceSchema.from_dict(raw)
    assert svc.domain == "Restaurants"
    assert svc.is_categorical("price_range") and not svc.is_categorical("restaurant_name")
    assert not svc.is_categorical("intent")  # unknown slots are not categorical
    assert "cheap" in svc.possible_values("price_range")
    assert [i.name for i in svc.search_intents] == ["FindRestaurants"]
    assert [i.name for i in svc.transactional_intents] == ["ReserveRestaurant"]
    assert svc.intents["ReserveRestaurant"].optional_slots["number_of_seats"] == "2"


def _write(tmp_path: Path, data) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def _base() -> list[dict]:
    return copy.deepcopy(load_schemas(FIXTURE))


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d[1]["intents"][0]["required_slots"].append("ghost"), ["Restaurants_2", "ReserveRestaurant", "ghost"]),
    (lambda d: d[1]["intents"][1]["optional_slots"].update({"ghost": "x"}), ["Restaurants_2", "FindRestaurants", "ghost"]),
    (lambda d: d[1]["intents"][0]["result_slots"].append("ghost"), ["Restaurants_2", "ghost", "result_slots"]),
    (lambda d: d.append(copy.deepcopy(d[0])), ["Hotels_4", "duplicate service"]),
    (lambda d: d[0]["slots"].append(copy.deepcopy(d[0]["slots"][0])), ["Hotels_4", "duplicate slot"]),
    (lambda d: d[0]["intents"].append(copy.deepcopy(d[0]["intents"][0])), ["Hotels_4", "duplicate intent"]),
    (lambda d: d[0]["slots"][0].pop("is_categorical"), ["Hotels_4", "is_categorical"]),
    (lambda d: d[0].pop("service_name"), ["service #0", "service_name"]),
    (lambda d: d[0]["slots"][0].update(is_categorical=True, possible_values=[]), ["Hotels_4", "possible_values"]),
    (lambda d: d[2].update(intents="nope"), ["RideSharing_1", "intents"]),
])
def test_malformed_schema_names_file_and_element(tmp_path, mutate, words):
    """Each kind of malformed schema is a UserError naming the file and the service/intent/slot at fault."""
    data = _base()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(UserError) as err:
        load_schemas(path)
    msg = str(err.value)
    assert str(path) in msg
    for w in words:
        assert w in msg, (w, msg)


def test_not_json_and_not_a_list(tmp_path):
    """Broken JSON, a non-list document and a missing file are one-line UserErrors naming the file."""
    for content, word in (("[{", "not valid JSON"), ('{"a": 1}', "list")):
        path = _write(tmp_path, content)
        with pytest.raises(UserError, match=word) as err:
            load_schemas(path)
        assert str(path) in str(err.value)
    with pytest.raises(UserError, match="cannot read"):
        load_schemas(tmp_path / "absent.json")
