"""Loading and validating SGD ``schema.json`` files, plus a small typed view of one service."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Container

import msgspec

from ...engine.errors import UserError


# The acts whose "intent" slot holds intent names: INFORM_INTENT(intent=FindRestaurants), OFFER_INTENT(...).
INTENT_ACTS = frozenset(("INFORM_INTENT", "OFFER_INTENT"))


def names_intents(act: str, slot: str, service_slots: Container[str]) -> bool:
    """Whether an act's values are intent names rather than values of a slot of the service.

    SGD writes intent names under the slot "intent", but a service may define a slot called "intent" too
    (Homes_2: rent or buy): there only the intent acts name intents, as in the SGD-X generator; an
    INFORM(intent=buy) informs that slot.
    """
    return slot == "intent" and (act in INTENT_ACTS or slot not in service_slots)


class SlotSchema(msgspec.Struct, frozen=True):
    """One slot of a service: name, description, whether categorical, and its possible values."""

    name: str
    description: str
    is_categorical: bool
    possible_values: tuple[str, ...]


class IntentSchema(msgspec.Struct, frozen=True):
    """One intent of a service: its slots by role and whether it is a transaction."""

    name: str
    description: str
    is_transactional: bool
    required_slots: tuple[str, ...]
    optional_slots: dict[str, str]
    result_slots: tuple[str, ...]


class ServiceSchema:
    """A validated service schema with slot and intent lookup."""

    def __init__(self, raw: dict[str, Any]):
        self.raw = raw
        self.name: str = raw["service_name"]
        self.description: str = raw.get("description", "")
        self.slots: dict[str, SlotSchema] = {
            s["name"]: SlotSchema(s["name"], s.get("description", ""), bool(s["is_categorical"]),
                                  tuple(s.get("possible_values", ())))
            for s in raw["slots"]}
        self.intents: dict[str, IntentSchema] = {
            i["name"]: IntentSchema(i["name"], i.get("description", ""), bool(i["is_transactional"]),
                                    tuple(i["required_slots"]), dict(i.get("optional_slots", {})),
                                    tuple(i["result_slots"]))
            for i in raw["intents"]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "ServiceSchema":
        """The typed view of a raw (already validated) schema dict."""
        return cls(raw)

    @property
    def domain(self) -> str:
        """The domain part of the service name ("Restaurants" for "Restaurants_2")."""
        return self.name.rsplit("_", 1)[0]

    def is_categorical(self, slot: str) -> bool:
        """Whether ``slot`` is categorical (False for slots the service lacks, such as "count")."""
        s = self.slots.get(slot)
        return bool(s and s.is_categorical)

    def possible_values(self, slot: str) -> list[str]:
        """The schema's possible values of ``slot`` (a sample for non-categorical slots, often empty)."""
        s = self.slots.get(slot)
        return list(s.possible_values) if s else []

    @cached_property
    def search_intents(self) -> list[IntentSchema]:
        """The intents that search (not transactional)."""
        return [i for i in self.intents.values() if not i.is_transactional]

    @cached_property
    def transactional_intents(self) -> list[IntentSchema]:
        """The intents that book, buy or change something."""
        return [i for i in self.intents.values() if i.is_transactional]


def _fail(path: Path | str, where: str, what: str) -> UserError:
    return UserError(f"{path}: {where}: {what}")


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def validate_schemas(data: Any, path: Path | str) -> list[dict[str, Any]]:
    """Check a decoded schema list; raise UserError naming the file and the service/intent/slot at fault."""
    if not isinstance(data, list):
        raise _fail(path, "top level", "expected a JSON list of service schemas")
    seen: set[str] = set()
    for n, svc in enumerate(data):
        if not isinstance(svc, dict):
            raise _fail(path, f"service #{n}", "expected an object")
        name = svc.get("service_name")
        if not isinstance(name, str) or not name:
            raise _fail(path, f"service #{n}", "missing or empty 'service_name'")
        where = f"service {name!r}"
        if name in seen:
            raise _fail(path, where, "duplicate service name")
        seen.add(name)
        if not isinstance(svc.get("description", ""), str):
            raise _fail(path, where, "'description' must be a string")
        slots = svc.get("slots")
        if not isinstance(slots, list):
            raise _fail(path, where, "missing 'slots' list")
        slot_names: set[str] = set()
        for k, slot in enumerate(slots):
            if not isinstance(slot, dict) or not isinstance(slot.get("name"), str) or not slot["name"]:
                raise _fail(path, f"{where} slot #{k}", "expected an object with a non-empty 'name'")
            sw = f"{where} slot {slot['name']!r}"
            if slot["name"] in slot_names:
                raise _fail(path, sw, "duplicate slot name")
            slot_names.add(slot["name"])
            if not isinstance(slot.get("is_categorical"), bool):
                raise _fail(path, sw, "'is_categorical' must be true or false")
            if not _str_list(slot.get("possible_values", [])):
                raise _fail(path, sw, "'possible_values' must be a list of strings")
            if slot["is_categorical"] and not slot.get("possible_values"):
                raise _fail(path, sw, "categorical slot without 'possible_values'")
            if not isinstance(slot.get("description", ""), str):
                raise _fail(path, sw, "'description' must be a string")
        intents = svc.get("intents")
        if not isinstance(intents, list) or not intents:
            raise _fail(path, where, "missing or empty 'intents' list")
        intent_names: set[str] = set()
        for k, intent in enumerate(intents):
            if not isinstance(intent, dict) or not isinstance(intent.get("name"), str) or not intent["name"]:
                raise _fail(path, f"{where} intent #{k}", "expected an object with a non-empty 'name'")
            iw = f"{where} intent {intent['name']!r}"
            if intent["name"] in intent_names:
                raise _fail(path, iw, "duplicate intent name")
            intent_names.add(intent["name"])
            if not isinstance(intent.get("is_transactional"), bool):
                raise _fail(path, iw, "'is_transactional' must be true or false")
            for key in ("required_slots", "result_slots"):
                if not _str_list(intent.get(key)):
                    raise _fail(path, iw, f"'{key}' must be a list of slot names")
            optional = intent.get("optional_slots", {})
            if not isinstance(optional, dict) or not all(isinstance(v, str) for v in optional.values()):
                raise _fail(path, iw, "'optional_slots' must map slot names to default values")
            for key, names in (("required_slots", intent["required_slots"]), ("optional_slots", list(optional)),
                               ("result_slots", intent["result_slots"])):
                for slot_name in names:
                    if slot_name not in slot_names:
                        raise _fail(path, iw, f"{key} names slot {slot_name!r}, which is not a slot of the service")
            both = set(intent["required_slots"]) & set(optional)
            if both:
                raise _fail(path, iw, f"slot {sorted(both)[0]!r} is both required and optional")
    return data


def load_schemas(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate one SGD schema.json; any problem is a UserError naming the file and the element."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read schema file ({exc.strerror or exc})") from None
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None
    return validate_schemas(data, path)
