"""The event catalogue and codec: round trips, the committed schema, upcasting, unknown types."""

from __future__ import annotations

import json

import msgspec
import pytest

from dialogsim.engine import codec
from dialogsim.engine.events import (EVENT_TYPES, event_type, Act, AgentTurn, DialogueState, EpisodeEnded, EpisodeRef,
                                     EpisodeStarted, Fault, Frame, ModelCalled, ModelToolCall, OpaqueEvent, RoleUsage,
                                     RunEnded, RunStarted, SlotSpan, ToolCalled, ToolReturned, Usage, UserTurn)

ENV = dict(run="r", ep="e1", seq=0, t=1.5, wall=123)

SAMPLES = [
    RunStarted(**ENV, config={"a": 1}, code_version="0.1.0", seed=7),
    RunEnded(**ENV, status="completed", counts={"success": 2}),
    EpisodeStarted(**ENV, scenario_id="s", seed=1, scenario={"id": "s"}, parent=EpisodeRef("e0", 3), branch="b"),
    UserTurn(**ENV, turn=0, utterance="Thai in San Jose", frames=[Frame(
        service="Restaurants_2", actions=[Act(act="INFORM", slot="city", values=["San Jose"],
                                              canonical_values=["San Jose"])],
        slots=[SlotSpan(slot="city", start=8, exclusive_end=16)],
        state=DialogueState(active_intent="FindRestaurants", slot_values={"city": ["San Jose"]}))]),
    AgentTurn(**ENV, turn=1, utterance="ok", state={"Restaurants_2": DialogueState()}, usage=Usage(input_tokens=3),
              cost=0.1, action="MID"),
    ModelCalled(**ENV, role="user", model="m", digest="sha256:00", content=None, finish_reason="tool_calls",
                tool_calls=[ModelToolCall(id="c1", name="S__M", arguments='{"x": "1"}')], usage=Usage(input_tokens=9),
                cost=0.001, attempt=2),
    ToolCalled(**ENV, call_id="c", service="S", method="M", parameters={"x": "1"}),
    ToolReturned(**ENV, call_id="c", results=[{"x": "1"}]),
    Fault(**ENV, who="agent", kind="timeout", detail="read timeout", attempt=2),
    EpisodeEnded(**ENV, outcome="success", turns=4, reward={"turns": 4}),
    EpisodeEnded(**ENV, outcome="success", turns=4, usage={"user": RoleUsage(calls=2, input_tokens=5, cost=0.5)}),
    UserTurn(**ENV, turn=2, utterance="hi", inferred=True, usage=Usage(output_tokens=2), cost=0.25),
    RunEnded(**ENV, status="stopped", reason="budget spent", usage={"agent": RoleUsage(calls=1)}),
]


def test_unset_extras_stay_out_of_the_encoding():
    """A user turn, episode end and run end without model usage encode as before the fields existed."""
    for event, extras in ((UserTurn(**ENV, turn=0, utterance="x"), {"inferred", "usage", "cost"}),
                          (EpisodeEnded(**ENV, outcome="success"), {"usage"}),
                          (RunEnded(**ENV, status="completed"), {"usage", "reason"})):
        assert not extras & set(json.loads(codec.encode(event)))


def test_catalogue_is_complete():
    """Every event type of the catalogue has a sample here."""
    assert {event_type(e) for e in SAMPLES} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: event_type(e))
def test_round_trip(event):
    """Encoding then decoding gives back an equal event."""
    assert codec.decode(codec.encode(event)) == event


def test_committed_schema_is_current():
    """engine/events.schema.json matches the catalogue; regenerate it deliberately when events change."""
    assert codec.SCHEMA_PATH.read_text(encoding="utf-8") == codec.json_schema_text(), (
        "the event schema changed: review it, then run `python -m dialogsim.engine.schema_export`")


def test_unknown_type_is_opaque():
    """An event of a type this version does not know is kept as an opaque event with its payload."""
    line = json.dumps({"type": "persona_mood", "run": "r", "ep": "e", "seq": 4, "t": 2.0, "wall": 9, "v": 3,
                       "mood": "grumpy"})
    event = codec.decode(line)
    assert isinstance(event, OpaqueEvent)
    assert (event.type, event.ep, event.seq, event.v, event.data) == ("persona_mood", "e", 4, 3, {"mood": "grumpy"})
    assert codec.to_builtins(event)["mood"] == "grumpy"


def test_upcaster_applies_to_old_versions(monkeypatch):
    """An old version of a type is upcast at read time by the registered upcaster chain."""
    monkeypatch.setitem(codec.CURRENT_VERSION, "fault", 3)
    monkeypatch.setattr(codec, "UPCASTERS", {})
    calls = []

    @codec.register_upcaster("fault", 1)
    def rename_error(raw):
        calls.append(1)
        raw["detail"] = raw.pop("error")
        return raw

    @codec.register_upcaster("fault", 2)
    def default_attempt(raw):
        calls.append(2)
        raw.setdefault("attempt", 1)
        return raw

    old = {"type": "fault", "run": "r", "ep": "e", "seq": 1, "t": 0.0, "wall": 0, "v": 1, "who": "tool",
           "kind": "exception", "error": "boom"}
    event = codec.decode(json.dumps(old))
    assert isinstance(event, Fault)
    assert (event.detail, event.attempt, event.v, calls) == ("boom", 1, 3, [1, 2])


def test_newer_version_than_known_is_an_error():
    """A version newer than this dialogsim knows is a clear error, not a silent misread."""
    line = json.dumps({"type": "fault", "run": "r", "ep": "e", "seq": 1, "t": 0, "wall": 0, "v": 99,
                       "who": "tool", "kind": "exception"})
    with pytest.raises(codec.CorruptEvent, match="v99"):
        codec.decode(line)


@pytest.mark.parametrize("line", [b"{not json", b"[1, 2]", b'{"no_type": 1}',
                                  b'{"type": "user_turn", "run": "r", "ep": "e", "seq": "x"}'])
def test_corrupt_lines_raise(line):
    """Lines that are not events raise CorruptEvent."""
    with pytest.raises(codec.CorruptEvent):
        codec.decode(line)


def test_envelope_field_order_is_stable():
    """The envelope comes first on the wire, so a line's head is readable without the payload."""
    head = list(msgspec.json.decode(codec.encode(SAMPLES[3])))[:7]
    assert head == ["type", "run", "ep", "seq", "t", "wall", "v"]
