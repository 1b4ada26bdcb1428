"""Evalsets with conversation scenarios (``--scenarios evalset:FILE``): read and checked, run by model-driven users.

An evalset is ``{eval_set_id, name, eval_cases: [{eval_id, conversation_scenario: {starting_prompt,
conversation_plan}, session_input: {app_name, user_id}, ...}]}``. A case gives the user a starting prompt and
a plan, not lines: only a user driven by a model can follow it, so a run with any other user is refused.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgspec

from ...engine.contracts import Scenario, ToolSpec
from ...engine.errors import UserError
from ...engine.registry import names, parse_spec
from .golden import convert_item, read_json
from .scenario_set import NoWorld

# users that follow a starting prompt and a plan with a model (users/llm.py)
MODEL_USERS = ("llm",)


class ConversationScenario(msgspec.Struct, kw_only=True):
    """What a model-driven user is told: how to open and what to pursue."""

    starting_prompt: str
    conversation_plan: str


class SessionInput(msgspec.Struct, kw_only=True):
    """The agent app and user id the case was recorded with."""

    app_name: str = ""
    user_id: str = ""


class EvalCase(msgspec.Struct, kw_only=True):
    """One case of an evalset."""

    eval_id: str
    conversation_scenario: ConversationScenario
    session_input: SessionInput = msgspec.field(default_factory=SessionInput)


def load_evalset(path: str | Path) -> list[Scenario]:
    """The cases of an evalset as scenarios; one UserError line names the file, case and field."""
    data = read_json(path, "evalset file")
    cases = data.get("eval_cases") if isinstance(data, dict) else None
    if not isinstance(cases, list) or not cases:
        raise UserError(f"{path}: expected a JSON object with a non-empty 'eval_cases' list")
    out: list[Scenario] = []
    seen: set[str] = set()
    for i, raw in enumerate(cases):
        cid = raw.get("eval_id") if isinstance(raw, dict) else None
        where = f"{path}: case {cid!r}" if isinstance(cid, str) and cid else f"{path}: case #{i + 1}"
        if isinstance(raw, dict) and "conversation_scenario" not in raw and "conversation" in raw:
            raise UserError(f"{where}: conversation_scenario: missing; cases with a recorded 'conversation' "
                            "are not read (give them as a golden file: --scenarios golden:FILE)")
        case = convert_item(raw, EvalCase, where)
        if not case.eval_id or case.eval_id in seen:
            raise UserError(f"{where}: eval_id: {'must not be empty' if not case.eval_id else 'used twice'}")
        seen.add(case.eval_id)
        app = case.session_input.app_name
        golden = {"agents_evaluated": [app] if app else [], "reference_data": {},
                  "metadata": {"eval_set_id": str(data.get("eval_set_id") or ""),
                               "user_id": case.session_input.user_id}}
        out.append(Scenario(id=case.eval_id, kind="evalset",
                            data={"user": msgspec.to_builtins(case.conversation_scenario), "golden": golden}))
    return out


class EvalsetScenarios:
    """The cases of an evalset, cycled; they need a model-driven user (``check_user`` refuses any other)."""

    name = "evalset"
    default_user = MODEL_USERS[0]
    default_agent = "schema"

    def __init__(self, path: str | Path, scenarios: list[Scenario]) -> None:
        self.path = str(path)
        self.scenarios = scenarios

    def check_user(self, spec: str) -> None:
        """Refuse a user that cannot follow a conversation plan, naming what to pass instead."""
        name = parse_spec(spec)[0]
        registered = [u for u in MODEL_USERS if u in names("user")]
        if name in registered:
            return
        need = (f"{self.path}: evalset cases (conversation_scenario) need a model-driven user that follows "
                "starting_prompt and conversation_plan")
        if not registered:
            raise UserError(f"{need}; this version has none yet (issue #20 adds --user llm:...)")
        raise UserError(f"{need}, not --user {spec!r}: pass --user {registered[0]}:...")

    def draw(self, index: int, seed: int) -> tuple[Scenario, int]:
        return self.scenarios[index % len(self.scenarios)], index // len(self.scenarios)

    def world(self, scenario: Scenario, rng: random.Random) -> Any:
        return NoWorld()

    def tools(self, scenario: Scenario) -> list[ToolSpec]:
        return []
