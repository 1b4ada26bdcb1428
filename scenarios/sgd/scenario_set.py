"""The "sgd" scenario set: one sampled goal per episode over a pack, with its world and tools.

Spec (``--scenarios``): ``sgd[:[PACK_DIR][#Svc_1,Svc_2][?key=value&key=value]]``, e.g.
``sgd:?failure_rate=0.1&infeasible_share=0.2`` (the bundled pack with more failures),
``sgd:#Trains_1,Messaging_1`` (goals over those services only) or ``sgd:/packs/mine?multi_share=0``.
Options (see OPTIONS): ``failure_rate`` (share of possible bookings that fail at random),
``infeasible_share`` (share of searches stated so that nothing matches at first) and ``multi_share``
(share of multi-service goals; default: the mined share). The defaults keep failures near real SGD dev
(0.4% of searches find nothing there, 4% of bookings fail) while still exercising NOTIFY_FAILURE,
REQUEST_ALTS and relaxation in every thousand dialogues.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from ...engine.contracts import Call, Claim, Scenario, ToolSpec, completed_calls
from ...engine.errors import UserError
from .goals import sample_goal
from .judge import goal_claims, invented, unbacked
from .pack import Pack, load_pack
from .world import SgdWorld


def _stream(*parts: Any) -> random.Random:
    """A random stream from a stable hash of its parts (never Python's salted hash())."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def tool_specs(pack: Pack, service: str) -> list[ToolSpec]:
    """One ToolSpec per intent of a service: a JSON Schema object built from the schema's slots."""
    svc = pack.service(service)
    out = []
    for intent in svc.intents.values():
        props: dict[str, Any] = {}
        for slot in list(intent.required_slots) + list(intent.optional_slots):
            spec = svc.slots[slot]
            prop: dict[str, Any] = {"type": "string", "description": spec.description}
            if spec.is_categorical:
                prop["enum"] = list(spec.possible_values)  # "any" is said by leaving an optional slot out
            default = intent.optional_slots.get(slot)
            if default is not None and default != "dontcare":  # "dontcare" is no value: the slot is left out
                prop["default"] = default
            props[slot] = prop
        params = {"type": "object", "properties": props, "required": list(intent.required_slots),
                  "additionalProperties": False}
        out.append(ToolSpec(service=service, method=intent.name, description=intent.description,
                            parameters=params, transactional=intent.is_transactional))
    return out


class SgdScenarioSet:
    """Scenarios drawn from a pack: a goal per index, an SgdWorld per episode, tools per goal service."""

    name = "sgd"
    default_user = "agenda"
    default_agent = "schema"

    def __init__(self, pack: Pack, services: list[str] | None = None, seed_offset: int = 0, *,
                 failure_rate: float = 0.04, infeasible_share: float = 0.03, multi_share: float | None = None):
        self.pack = pack
        self.services = [pack.service(s).name for s in services] if services else None
        self.seed_offset = seed_offset
        self.failure_rate = failure_rate
        self.infeasible_share = infeasible_share
        self.multi_share = multi_share
        self._tools: dict[str, list[ToolSpec]] = {}

    def draw(self, index: int, seed: int) -> tuple[Scenario, int]:
        """The goal of the ``index``-th episode, from a stream hashed from (seed, offset, index)."""
        rng = _stream("sgd-goal", seed, self.seed_offset, index)
        goal = sample_goal(self.pack, rng, self.services, infeasible_share=self.infeasible_share,
                           multi_share=self.multi_share)
        data = {"pack": self.pack.id, "goal": goal,
                "schemas": {s: self.pack.schemas[s] for s in goal["services"]}}
        return Scenario(id=f"sgd-{index:06d}", kind="sgd", data=data), 0

    def world(self, scenario: Scenario, rng: random.Random) -> SgdWorld:
        """A fresh world for one episode (the pack's tables are shared, read-only)."""
        return SgdWorld(self.pack, rng, failure_rate=self.failure_rate)

    def judge(self, scenario: Scenario, claims: list[Claim], events: list[Any]) -> str | None:
        """Why the episode's events do not back the user's claimed success (see judge.py), or None: first a
        value the agent told the user that no returned row holds (said during the dialogue), then a claim no
        call backs (judged at its end)."""
        schemas = scenario.data.get("schemas") or {}
        claims = claims or goal_claims(scenario.data.get("goal") or {}, schemas)
        return invented(events, self.pack.canonical) or unbacked(claims, completed_calls(events), schemas)

    def tools(self, scenario: Scenario) -> list[ToolSpec]:
        """The tools of every intent of the goal's services."""
        out: list[ToolSpec] = []
        for svc in scenario.data.get("goal", {}).get("services", []):
            if svc not in self._tools:
                self._tools[svc] = tool_specs(self.pack, svc)
            out.extend(self._tools[svc])
        return out


OPTIONS = {"failure_rate": "share of possible bookings that fail at random (default 0.04)",
           "infeasible_share": "share of searches first stated so that nothing matches (default 0.03)",
           "multi_share": "share of goals over several services (default: the pack's mined share)"}


def _options(text: str) -> dict[str, float]:
    """``key=value&key=value`` -> floats in [0, 1], naming the bad part otherwise."""
    out: dict[str, float] = {}
    for part in filter(None, text.split("&")):
        key, sep, value = part.partition("=")
        if key not in OPTIONS:
            raise UserError(f"sgd scenarios: unknown option {key!r} (known: {', '.join(sorted(OPTIONS))})")
        try:
            number = float(value) if sep else float("nan")
        except ValueError:
            number = float("nan")
        if not 0.0 <= number <= 1.0:
            raise UserError(f"sgd scenarios: option {key!r} needs a number between 0 and 1, got {value!r}")
        out[key] = number
    return out


def load_scenario_set(arg: str | None = None) -> SgdScenarioSet:
    """The registry loader: ``arg`` is ``[PACK_DIR][#Svc_1,Svc_2][?key=value&...]`` (see the module docstring).

    No pack directory means the bundled default pack; ``#...`` restricts goals to those services;
    ``?...`` sets options of OPTIONS.
    """
    services = None
    options: dict[str, float] = {}
    if arg and "?" in arg:
        arg, _, query = arg.partition("?")
        options = _options(query)
    if arg and "#" in arg:
        arg, _, names = arg.partition("#")
        services = [s for s in names.split(",") if s]
    pack = load_pack(Path(arg) if arg else None)
    return SgdScenarioSet(pack, services=services, **options)
