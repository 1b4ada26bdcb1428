"""Golden datasets and evalsets as scenario sets: ``--scenarios golden:FILE`` and ``--scenarios evalset:FILE``.

A golden question is a scenario the scripted user plays: it says the question's ``user_inputs`` in order,
one per turn, the last one ending the episode. The question (``agents_evaluated``, ``metadata``,
``reference_data``) travels in the scenario under ``golden``, which no agent is shown, so every log
carries its own answer key. A question without a world has no tools of dialogsim's: the agent calls
whatever tools it declares, and a call that reaches dialogsim is answered with an error saying that
nothing stands behind it. A question made from an SGD-world episode (``metadata.sgd``, written by the
golden projection) gets that episode's world back: the SGD scenario set named there gives the tools and
the judge, and the world's random stream is the original episode's, so searches return the same rows
and the same bookings fail whatever the run's seed.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgspec

from ...engine.contracts import Claim, Scenario, ToolSpec
from ...engine.errors import UserError
from ...engine.registry import load_scenarios
from ...engine.seeding import stream
from .episode import tool_name
from .golden import GoldenQuestion, LoadedQuestion, convert_item, load_golden


class SgdOrigin(msgspec.Struct, kw_only=True):
    """``metadata.sgd`` of a question made from an SGD-world episode."""

    scenarios: str
    pack: str
    seed: int
    goal: dict[str, Any]
    user_frames: list[list[dict[str, Any]]] = []  # the annotations of each user input, as the episode logged them


class NoWorld:
    """The world of a question without one: every call is answered with an error saying so."""

    def call(self, service: str, method: str, parameters: dict[str, Any]) -> tuple[None, str]:
        return None, (f"no world behind tool {tool_name(service, method)!r}: golden questions carry no backend; "
                      "an agent that runs its own tools executes them itself")


class GoldenScenarios:
    """The questions of a golden file, cycled: episode i plays question i mod n (trial i div n)."""

    name = "golden"
    default_user = "scripted"

    def __init__(self, path: str | Path, questions: list[LoadedQuestion]) -> None:
        self.path = str(path)
        self.sgd_sets: dict[str, Any] = {}  # scenario spec -> the SGD scenario set it loads
        self.scenarios = [self._scenario(q) for q in questions]
        # the built-in agent that reads any text; the agent under test is named with --agent
        self.default_agent = "schema"
        self._pack: Any = None

    @property
    def pack(self) -> Any:
        """The SGD pack of the file's SGD questions, else the bundled one (the schema agent reads any text with it)."""
        if self._pack is None:
            sets = list(self.sgd_sets.values())
            if sets:
                self._pack = sets[0].pack
            else:
                from ..sgd.pack import load_pack

                self._pack = load_pack(None)
        return self._pack

    def _scenario(self, loaded: LoadedQuestion) -> Scenario:
        q = loaded.question
        golden = {k: v for k, v in loaded.raw.items() if k not in ("id", "user_inputs")}
        golden.setdefault("metadata", {})
        data: dict[str, Any] = {"user": list(q.user_inputs), "golden": golden}
        raw_origin = q.metadata.get("sgd")
        if raw_origin is not None:
            origin = convert_item(raw_origin, SgdOrigin, f"{self.path}: question {q.id!r}: metadata.sgd")
            data.update(self._sgd_data(q, origin))
            if origin.user_frames:
                data["user"] = self._annotated(q, origin.user_frames)
        return Scenario(id=q.id, kind="golden", data=data)

    def _annotated(self, q: GoldenQuestion, frames: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The user inputs with the SGD annotations the original episode logged (acts, spans, the user's state),
        so that the user says what it said then, in acts as in words."""
        if len(frames) != len(q.user_inputs):
            raise UserError(f"{self.path}: question {q.id!r}: metadata.sgd.user_frames: {len(frames)} entries for "
                            f"{len(q.user_inputs)} user inputs")
        return [{"utterance": text, "frames": f} for text, f in zip(q.user_inputs, frames)]

    def _sgd_data(self, q: GoldenQuestion, origin: SgdOrigin) -> dict[str, Any]:
        """The SGD part of a question's data (pack, goal, schemas, world), checked against the pack it names."""
        where = f"{self.path}: question {q.id!r}: metadata.sgd"
        sgd = self.sgd_sets.get(origin.scenarios)
        if sgd is None:
            sgd = self.sgd_sets[origin.scenarios] = load_scenarios(origin.scenarios)
            if getattr(sgd, "name", None) != "sgd":
                raise UserError(f"{where}.scenarios: {origin.scenarios!r} is not an SGD scenario set")
        if sgd.pack.id != origin.pack:
            raise UserError(f"{where}.pack: made with pack {origin.pack!r}, but {origin.scenarios!r} loads pack "
                            f"{sgd.pack.id!r}")
        services = origin.goal.get("services")
        if not isinstance(services, list) or not services:
            raise UserError(f"{where}.goal.services: expected a non-empty list of service names")
        unknown = [s for s in services if s not in sgd.pack.schemas]
        if unknown:
            raise UserError(f"{where}.goal.services: unknown service {unknown[0]!r} in pack {origin.pack!r}")
        data = {"pack": origin.pack, "goal": origin.goal,
                "schemas": {s: sgd.pack.schemas[s] for s in services},
                "sgd_world": {"scenarios": origin.scenarios, "seed": origin.seed}}
        known = {tool_name(t.service, t.method) for t in sgd.tools(Scenario(id=q.id, kind="sgd", data=data))}
        for i, call in enumerate(q.reference_data.reference_tool_interactions or []):
            if call.tool_name not in known:
                raise UserError(f"{self.path}: question {q.id!r}: reference_data.reference_tool_interactions[{i}]"
                                f".tool_name: unknown tool {call.tool_name!r} (the question's SGD services "
                                f"have {', '.join(sorted(known))})")
        return data

    def _sgd(self, scenario: Scenario) -> Any:
        world = scenario.data.get("sgd_world")
        return self.sgd_sets[world["scenarios"]] if world else None

    def draw(self, index: int, seed: int) -> tuple[Scenario, int]:
        return self.scenarios[index % len(self.scenarios)], index // len(self.scenarios)

    def world(self, scenario: Scenario, rng: random.Random) -> Any:
        sgd = self._sgd(scenario)
        if sgd is None:
            return NoWorld()
        # the original episode's world stream: the same rows and the same failures as the reference saw
        return sgd.world(scenario, stream(scenario.data["sgd_world"]["seed"], "world"))

    def tools(self, scenario: Scenario) -> list[ToolSpec]:
        sgd = self._sgd(scenario)
        return [] if sgd is None else sgd.tools(scenario)

    def judge(self, scenario: Scenario, claims: list[Claim], events: list[Any]) -> str | None:
        """SGD questions: whether the episode's events back the original goal (see scenarios/sgd/judge.py)."""
        sgd = self._sgd(scenario)
        return None if sgd is None else sgd.judge(scenario, claims, events)


def load_golden_scenarios(arg: str | None) -> GoldenScenarios:
    """The registry loader of ``golden:FILE``."""
    if not arg:
        raise UserError("--scenarios golden:FILE needs the golden file, e.g. golden:datasets/my_golden.json")
    return GoldenScenarios(arg, load_golden(arg))


def load_evalset_scenarios(arg: str | None) -> Any:
    """The registry loader of ``evalset:FILE``."""
    if not arg:
        raise UserError("--scenarios evalset:FILE needs the evalset file, e.g. evalset:my.evalset.json")
    from .evalset import EvalsetScenarios, load_evalset

    return EvalsetScenarios(arg, load_evalset(arg))

