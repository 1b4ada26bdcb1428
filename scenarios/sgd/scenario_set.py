"""The "sgd" scenario set: one sampled goal per episode over a pack, with its world and tools."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from ..base import Scenario, ToolSpec
from .goals import sample_goal
from .pack import Pack, load_pack
from .world import SgdWorld


def _stream(*parts: Any) -> random.Random:
    """A random stream from a stable hash of its parts (never Python's salted hash())."""
    digest = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=8).digest()
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
                prop["enum"] = list(spec.possible_values) + (["dontcare"] if "dontcare" not in spec.possible_values else [])
            if slot in intent.optional_slots:
                prop["default"] = intent.optional_slots[slot]
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
                 failure_rate: float = 0.1, infeasible_share: float = 0.2, multi_share: float | None = None):
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

    def tools(self, scenario: Scenario) -> list[ToolSpec]:
        """The tools of every intent of the goal's services."""
        out: list[ToolSpec] = []
        for svc in scenario.data.get("goal", {}).get("services", []):
            if svc not in self._tools:
                self._tools[svc] = tool_specs(self.pack, svc)
            out.extend(self._tools[svc])
        return out


def load_scenario_set(arg: str | None = None) -> SgdScenarioSet:
    """The registry loader: ``arg`` is a pack directory (None: the bundled default pack).

    ``PACK_DIR#Svc_1,Svc_2`` (or ``#Svc_1,...`` with the default pack) restricts goals to those services.
    """
    services = None
    if arg and "#" in arg:
        arg, _, names = arg.partition("#")
        services = [s for s in names.split(",") if s]
    pack = load_pack(Path(arg) if arg else None)
    return SgdScenarioSet(pack, services=services)


def _register() -> None:
    from ...engine.registry import register_scenarios

    register_scenarios("sgd", load_scenario_set)


_register()
