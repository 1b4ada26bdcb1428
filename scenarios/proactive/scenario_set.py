"""The ``proactive`` scenario set: states of the preference-trajectory family as scenarios.

``--scenarios proactive:mbpp`` (the bundled MBPP test split; the default), ``proactive:mbpp:sanitized``,
``proactive:synthetic[:coding|planning]`` (endless: episode i plays state ``{domain}-{i}``) and
``proactive:FILE`` (a JSONL file of states or of MBPP rows). A scenario's data is the state itself, so the
log's scenario snapshot is the trajectory record's ``state``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from ...engine.contracts import Scenario, ToolSpec
from ...engine.errors import UserError
from .states import SYNTHETIC_QUERIES, bundled_states, load_state_file, synthetic_state

SCENARIO_KIND = "proactive"


class NoWorld:
    """The world of a scenario without tools: every call fails."""

    def call(self, service: str, method: str, parameters: dict[str, Any]) -> tuple[None, str]:
        return None, f"no tools in this scenario ({service}.{method})"


class ProactiveScenarios:
    """States as scenarios: episode i plays state i mod n (trial i div n), or synthetic state i."""

    name = "proactive"
    default_user = "persona"
    default_agent = "clarify"
    chat_agent = "proactive-chat"  # what --agent openai:URL plays these tasks with: the action prompts

    def __init__(self, states: list[dict[str, Any]] | None = None, solutions: dict[str, str] | None = None,
                 synthetic: str | None = None) -> None:
        if (states is None) == (synthetic is None):
            raise ValueError("give either states or a synthetic domain")
        self.synthetic = synthetic
        self.scenarios = [as_scenario(s) for s in states] if states is not None else []
        self.solutions = solutions or {}

    def draw(self, index: int, seed: int) -> tuple[Scenario, int]:
        if self.synthetic is not None:
            return as_scenario(synthetic_state(self.synthetic, index)), 0
        return self.scenarios[index % len(self.scenarios)], index // len(self.scenarios)

    def world(self, scenario: Scenario, rng: random.Random) -> NoWorld:
        return NoWorld()

    def tools(self, scenario: Scenario) -> list[ToolSpec]:
        return []

    def solution(self, scenario: Scenario) -> str | None:
        """The reference solution of an MBPP state (its ``code``), or None."""
        return self.solutions.get(scenario.id)


def as_scenario(state: dict[str, Any]) -> Scenario:
    """A state as a scenario (id: the state's id as text)."""
    state_id = state.get("id", "unknown")
    return Scenario(id=state_id if isinstance(state_id, str) else str(state_id), kind=SCENARIO_KIND, data=state)


def load(arg: str | None) -> ProactiveScenarios:
    """The set ``--scenarios proactive[:ARG]`` names."""
    if arg in (None, "", "mbpp"):
        return ProactiveScenarios(*bundled_states())
    if arg == "mbpp:sanitized":
        return ProactiveScenarios(*bundled_states(sanitized=True))
    if arg == "synthetic" or arg.startswith("synthetic:"):
        domain = arg.partition(":")[2] or "coding"
        if domain not in SYNTHETIC_QUERIES:
            raise UserError(f"proactive:{arg}: the synthetic domain is 'coding' or 'planning', not {domain!r}")
        return ProactiveScenarios(synthetic=domain)
    if not Path(arg).is_file():
        raise UserError(f"proactive:{arg}: not mbpp, mbpp:sanitized, synthetic[:coding|planning] or a file")
    return ProactiveScenarios(*load_state_file(arg))

