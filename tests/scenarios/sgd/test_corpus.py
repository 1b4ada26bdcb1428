"""SGD dialogue files: strict reading, validation errors, dialogue <-> events conversion, SGD-X renaming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dialogsim.engine.codec import decode, encode
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import AgentTurn, EpisodeStarted, ToolCalled, ToolReturned, UserTurn
from dialogsim.scenarios.sgd.corpus import (dialogue_to_events, encode_dialogues, events_to_dialogue,
                                            read_dialogue_file, read_dialogue_file_lenient, validate_dialogue)
from dialogsim.scenarios.sgd.schema import load_schemas
from dialogsim.scenarios.sgd.sgdx import load_sgdx

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sgd"


def _schemas(path: Path) -> dict:
    return {s["service_name"]: s for s in load_schemas(path)}


def _through_log(events: list) -> list:
    return [decode(encode(e)) for e in events]


def test_fixture_round_trip_is_byte_identical():
    """Dialogues -> events -> JSON lines -> events -> dialogues gives the original file's bytes."""
    path = FIXTURES / "dialogues_001.json"
    schemas = _schemas(FIXTURES / "schema.json")
    dialogues = read_dialogue_file(path)
    back = []
    for d in dialogues:
        assert validate_dialogue(d, schemas) is None
        back.append(events_to_dialogue(_through_log(dialogue_to_events(d, "r", schemas))))
    assert encode_dialogues(back) == path.read_bytes()


def test_events_of_an_imported_dialogue():
    """One episode per dialogue: snapshot with id, services and schemas; calls before the agent turn."""
    schemas = _schemas(FIXTURES / "schema.json")
    d = read_dialogue_file(FIXTURES / "dialogues_001.json")[0]
    events = dialogue_to_events(d, "r", schemas)
    start = events[0]
    assert isinstance(start, EpisodeStarted) and start.ep == d.dialogue_id
    assert start.scenario["kind"] == "sgd_dialogue"
    assert start.scenario["data"]["services"] == d.services
    assert sorted(start.scenario["data"]["schemas"]) == sorted(d.services)
    assert [e.seq for e in events] == list(range(len(events)))
    turns = [e for e in events if isinstance(e, (UserTurn, AgentTurn))]
    assert [t.turn for t in turns] == list(range(len(d.turns)))
    for i, e in enumerate(events):
        if isinstance(e, ToolCalled):
            assert isinstance(events[i + 1], ToolReturned) and events[i + 1].call_id == e.call_id
            assert isinstance(events[i + 2], (ToolCalled, AgentTurn))
    assert events[-1].outcome == "success" and events[-1].reason == "imported"


def _write(tmp_path: Path, dialogues: list) -> Path:
    path = tmp_path / "dialogues_001.json"
    path.write_text(json.dumps(dialogues))
    return path


def _fixture_json() -> list:
    return json.loads((FIXTURES / "dialogues_001.json").read_text())


def test_missing_key_names_file_dialogue_and_turn(tmp_path):
    """A frame without 'actions' is reported with the file, dialogue id and turn."""
    data = _fixture_json()
    del data[1]["turns"][3]["frames"][0]["actions"]
    path = _write(tmp_path, data)
    with pytest.raises(UserError) as err:
        read_dialogue_file(path)
    message = str(err.value)
    assert str(path) in message and data[1]["dialogue_id"] in message and "turn 3" in message


def test_span_out_of_range_and_unknown_service_are_reported(tmp_path):
    """Semantic checks: a span past the utterance, a service not in the schema."""
    schemas = _schemas(FIXTURES / "schema.json")
    data = _fixture_json()
    frame = next(f for f in data[0]["turns"][0]["frames"] if f["slots"])
    frame["slots"][0]["exclusive_end"] = 10_000
    path = _write(tmp_path, data)
    dialogues = read_dialogue_file(path)
    problem = validate_dialogue(dialogues[0], schemas)
    assert problem and "out of range" in problem and "turn 0" in problem and data[0]["dialogue_id"] in problem
    assert validate_dialogue(dialogues[2], {k: v for k, v in schemas.items() if k != dialogues[2].services[0]})
    assert "unknown service" in validate_dialogue(dialogues[2], {})


def test_lenient_reading_keeps_the_valid_dialogues(tmp_path):
    """With lenient reading, one broken dialogue is reported and the others are kept."""
    data = _fixture_json()
    data[2]["turns"][0]["speaker"] = "BOT"
    good, errors = read_dialogue_file_lenient(_write(tmp_path, data))
    assert len(good) == len(data) - 1 and len(errors) == 1 and data[2]["dialogue_id"] in errors[0]


def test_not_json_is_a_user_error(tmp_path):
    """A file that is not JSON fails with its name."""
    path = tmp_path / "dialogues_001.json"
    path.write_text("{not json")
    with pytest.raises(UserError, match="dialogues_001.json"):
        read_dialogue_file(path)


def test_sgdx_renames_names_not_values():
    """SGD-X v1 renames services, slots, intents (also intent act values) and keeps slot values."""
    mapping = load_sgdx("v1", FIXTURES / "sgd_x", FIXTURES / "originals")
    original = json.loads((FIXTURES / "originals" / "dev" / "schema.json").read_text())
    variant = json.loads((FIXTURES / "sgd_x" / "v1" / "dev" / "schema.json").read_text())
    slot_map = {a["name"]: b["name"] for o, v in zip(original, variant) for a, b in zip(o["slots"], v["slots"])
                if o["service_name"] == "Restaurants_2"}
    intent_map = {a["name"]: b["name"] for o, v in zip(original, variant) for a, b in zip(o["intents"], v["intents"])
                  if o["service_name"] == "Restaurants_2"}
    d = next(x for x in read_dialogue_file(FIXTURES / "dialogues_001.json") if x.services == ["Restaurants_2"])
    r = mapping.dialogue(d)
    assert r.services == ["Restaurants_21"]
    for t0, t1 in zip(d.turns, r.turns):
        assert t0.utterance == t1.utterance
        for f0, f1 in zip(t0.frames, t1.frames):
            assert f1.service == "Restaurants_21"
            for a0, a1 in zip(f0.actions, f1.actions):
                if a0.slot == "intent":
                    assert a1.values == [intent_map[v] for v in a0.values]
                elif a0.slot in slot_map:
                    assert a1.slot == slot_map[a0.slot] and a1.values == a0.values
            if f0.state:
                assert f1.state.active_intent == intent_map.get(f0.state.active_intent, "NONE")
                assert f1.state.slot_values == {slot_map[k]: v for k, v in f0.state.slot_values.items()}
                assert list(f1.state.slot_values) == sorted(f1.state.slot_values)  # as the real files
            if f0.service_call:
                assert f1.service_call.method == intent_map[f0.service_call.method]
                assert set(f1.service_call.parameters) == {slot_map[k] for k in f0.service_call.parameters}
                assert [sorted(row.values()) for row in f1.service_results] == \
                    [sorted(row.values()) for row in f0.service_results]
    assert mapping.schema("Restaurants_2")["service_name"] == "Restaurants_21"


def test_sgdx_bad_variant_is_a_user_error():
    """Only v1..v5 exist; a missing directory names what to pass."""
    with pytest.raises(UserError, match="v1"):
        load_sgdx("v9", FIXTURES / "sgd_x", FIXTURES / "originals")
    with pytest.raises(UserError, match="no v2/"):
        load_sgdx("v2", FIXTURES / "sgd_x", FIXTURES / "originals")


def test_sgdx_real_variants_map_every_dev_service(shared_sgd):
    """Each real SGD-X variant maps all 45 services, with variant names ending in the variant number."""
    for variant in ("v1", "v3", "v5"):
        mapping = load_sgdx(variant, shared_sgd / "sgd_x")
        assert len(mapping.services) == 45
        assert all(new == old + variant[1] for old, new in mapping.services.items())


def test_sgdx_renames_all_keys_at_once():
    """A variant name that is another slot's original name (SGD-X v3 Events_1: event_location -> event_name,
    event_name -> name) must not overwrite that slot's value, as sequential in-place renaming would."""
    from dialogsim.scenarios.sgd.corpus import SgdCall, SgdDialogue, SgdFrame, SgdState, SgdTurn
    from dialogsim.scenarios.sgd.sgdx import SgdxMap

    def renamed_frame(frame):
        dialogue = SgdDialogue(dialogue_id="d", services=["Events_1"],
                               turns=[SgdTurn(frames=[frame], speaker="USER", utterance="")])
        return mapping.dialogue(dialogue).turns[0].frames[0]

    def schema(name, slots, intents):
        return {"service_name": name, "slots": [{"name": s} for s in slots], "intents": [{"name": i} for i in intents]}

    mapping = SgdxMap("v3")
    mapping.add([schema("Events_1", ["event_name", "event_location"], ["FindEvents"])],
                [schema("Events_13", ["name", "event_name"], ["SearchEvents"])], "test")
    frame = SgdFrame(actions=[], service="Events_1", slots=[],
                     state=SgdState(active_intent="FindEvents", requested_slots=["event_location"],
                                    slot_values={"event_location": ["Oracle Park"], "event_name": ["Giants Vs Cubs"]}))
    out = renamed_frame(frame)
    assert out.state.slot_values == {"event_name": ["Oracle Park"], "name": ["Giants Vs Cubs"]}
    assert out.state.requested_slots == ["event_name"] and out.state.active_intent == "SearchEvents"
    call = SgdFrame(actions=[], service="Events_1", slots=[], service_call=SgdCall(
        method="FindEvents", parameters={"event_location": "Oracle Park", "event_name": "Giants Vs Cubs"}),
        service_results=[{"event_location": "Oracle Park", "event_name": "Giants Vs Cubs"}])
    renamed = renamed_frame(call)
    assert renamed.service_call.parameters == {"event_name": "Oracle Park", "name": "Giants Vs Cubs"}
    assert renamed.service_results == [{"event_name": "Oracle Park", "name": "Giants Vs Cubs"}]


@pytest.mark.parametrize("edit, element", [
    (lambda t: t["frames"][0]["state"]["slot_values"].update(colour=["red"]), "state.slot_values: unknown slot 'colour'"),
    (lambda t: t["frames"][0]["state"]["requested_slots"].append("colour"), "state.requested_slots: unknown slot 'colour'"),
    (lambda t: t["frames"][0]["state"].update(active_intent="FlyToMoon"), "state.active_intent: unknown intent 'FlyToMoon'"),
    (lambda t: t["frames"][0]["actions"][0].update(slot="colour"), "unknown slot 'colour'"),
    (lambda t: t["frames"][0]["actions"].append({"act": "INFORM_INTENT", "slot": "intent", "values": ["FlyToMoon"],
                                                 "canonical_values": ["FlyToMoon"]}), "unknown intent 'FlyToMoon'"),
    (lambda t: t["frames"][0]["slots"].append({"slot": "colour", "start": 0, "exclusive_end": 1}),
     "slots: span of unknown slot 'colour'"),
])
def test_unknown_slot_or_intent_names_dialogue_turn_and_element(tmp_path, edit, element):
    """A slot or intent name the schema does not define is reported with the dialogue, turn, service and element."""
    data = _fixture_json()
    turn = data[1]["turns"][0]
    edit(turn)
    dialogue = read_dialogue_file(_write(tmp_path, data))[1]
    problem = validate_dialogue(dialogue, _schemas(FIXTURES / "schema.json"))
    service = turn["frames"][0]["service"]
    assert problem is not None and problem.startswith(f"dialogue {data[1]['dialogue_id']}, turn 0: frame for {service}")
    assert element in problem and "not in the schema" in problem


def test_fixture_dialogues_use_only_schema_names():
    """The real fixture dialogues pass the slot and intent checks (empty, 'intent' and 'count' action slots included)."""
    schemas = _schemas(FIXTURES / "schema.json")
    for dialogue in read_dialogue_file(FIXTURES / "dialogues_001.json"):
        assert validate_dialogue(dialogue, schemas) is None
