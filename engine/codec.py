"""Encoding events to JSON lines and reading them back, with upcasting of old versions.

Reading is two-stage: the fast path decodes a line straight into the tagged union; a line of an old
version or of an unknown type takes the slow path (a dict, the envelope, upcasters keyed by
(type, v), then conversion), so old logs stay readable and unknown types are kept as opaque events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import msgspec

from .events import EVENT_TAGS, EVENT_TYPES, AnyEvent, Event, OpaqueEvent

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

# (type, v) -> function turning a payload dict of version v into one of version v + 1.
UPCASTERS: dict[tuple[str, int], Upcaster] = {}

CURRENT_VERSION: dict[str, int] = {
    tag: next(f.default for f in msgspec.structs.fields(cls) if f.name == "v")
    for tag, cls in EVENT_TYPES.items()
}

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)
_dict_decoder = msgspec.json.Decoder(dict[str, Any])
_ENVELOPE = ("type", "run", "ep", "seq", "t", "wall", "v")


class CorruptEvent(ValueError):
    """A line that is not an event at all (broken JSON, a missing envelope, a bad payload)."""


def register_upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Decorator: register ``fn(payload) -> payload`` turning ``event_type`` v``from_version`` into v+1."""

    def register(fn: Upcaster) -> Upcaster:
        UPCASTERS[(event_type, from_version)] = fn
        return fn

    return register


def encode(event: Event) -> bytes:
    """One event as a compact JSON object (no newline)."""
    return _encoder.encode(event)


def encode_into(event: Event, buffer: bytearray) -> None:
    """Append one event and a newline to ``buffer``: the writer's hot path."""
    _encoder.encode_into(event, buffer, -1)
    buffer.extend(b"\n")


def decode(line: bytes | str) -> Event | OpaqueEvent:
    """One JSON line as an event: typed when known (upcast if old), opaque when its type is unknown."""
    try:
        event = _decoder.decode(line)
        if event.v == CURRENT_VERSION[EVENT_TAGS[type(event)]]:
            return event
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    return _decode_slow(line)


def decode_lines(data: bytes | memoryview) -> list[Event] | None:
    """The events of a block of whole JSON lines if every line is an event of a current version, else None.

    None sends the block to ``decode`` line by line, which upcasts old versions, keeps unknown types as
    opaque events and reports corrupt lines. Blank lines are skipped, as ``decode``'s callers do; unlike
    them, this also passes over a line of only spaces and reads two objects on one line as two events
    (neither is something the log writer can produce).
    """
    try:
        events = _decoder.decode_lines(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    current, tag = CURRENT_VERSION, EVENT_TAGS
    for event in events:
        if event.v != current[tag[type(event)]]:
            return None
    return events


def _decode_slow(line: bytes | str) -> Event | OpaqueEvent:
    try:
        raw = _dict_decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise CorruptEvent(f"not JSON: {exc}") from None
    except msgspec.ValidationError:
        raise CorruptEvent("not a JSON object") from None
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise CorruptEvent("no 'type' field")
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        return _opaque(raw, kind)
    raw = upcast(kind, raw)
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        raise CorruptEvent(f"bad {kind} event: {exc}") from None


def upcast(kind: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Apply the registered upcasters to a payload dict until it reaches the current version."""
    current = CURRENT_VERSION[kind]
    version = raw.get("v", 1)
    if not isinstance(version, int) or version > current:
        raise CorruptEvent(f"{kind} event is v{version!r}; this dialogsim reads up to v{current}")
    while version < current:
        step = UPCASTERS.get((kind, version))
        if step is None:
            raise CorruptEvent(f"no upcaster for {kind} v{version} -> v{version + 1}")
        raw = step(dict(raw))
        version += 1
        raw["v"] = version
    return raw


def _opaque(raw: dict[str, Any], kind: str) -> OpaqueEvent:
    envelope = {k: raw[k] for k in _ENVELOPE if k in raw}
    data = {k: v for k, v in raw.items() if k not in _ENVELOPE}
    try:
        return msgspec.convert({**envelope, "data": data}, OpaqueEvent)
    except msgspec.ValidationError as exc:
        raise CorruptEvent(f"bad envelope on {kind} event: {exc}") from None


def to_builtins(event: Event | OpaqueEvent) -> dict[str, Any]:
    """An event as plain JSON-ready Python objects, with its "type" tag (opaque payloads flattened)."""
    if isinstance(event, OpaqueEvent):
        out = msgspec.to_builtins(event)
        return {**{k: out[k] for k in _ENVELOPE}, **out["data"]}
    return msgspec.to_builtins(event)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the event union, as committed in ``engine/events.schema.json``."""
    return msgspec.json.schema(AnyEvent)


SCHEMA_PATH = Path(__file__).with_name("events.schema.json")


def json_schema_text() -> str:
    """The exported schema file's exact text (sorted keys, two-space indent, final newline)."""
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
