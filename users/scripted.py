"""The scripted user: says fixed lines in order (golden inputs), whatever the agent answers."""

from __future__ import annotations

from typing import Any

import msgspec

from ..engine.contracts import EpisodeContext, UserReply, Verdict
from ..engine.events import AgentTurn, UserTurn
from ..engine.memo import IdentityMemo


class ScriptedUser:
    """Speaks ``lines`` (or the scenario's ``data["user"]`` lines) one per agent turn; the last one ends."""

    deterministic = True

    def __init__(self, lines: list[UserReply] | None = None) -> None:
        self._fixed = lines
        self.lines: list[UserReply] = []
        self.said = 0
        self.agent_ended_early = False

    def start(self, ctx: EpisodeContext) -> None:
        self.lines = _ending(self._fixed) if self._fixed is not None else _prepare(ctx.scenario.data.get("user", []))
        self.said = 0

    def warm(self, history: list[Any]) -> None:
        """Take a logged episode's turns as its own (a fork's copied prefix): the lines said so far are skipped."""
        self.said = sum(1 for e in history if type(e) is UserTurn)
        self.agent_ended_early = any(type(e) is AgentTurn and e.end for e in history)

    def respond(self, agent: AgentTurn | None) -> UserReply | None:
        said = self.said
        if said >= len(self.lines):
            return None
        if agent is not None and agent.end:
            self.agent_ended_early = True
        self.said = said + 1
        return self.lines[said]

    def verdict(self) -> Verdict:
        if self.said < len(self.lines) or self.agent_ended_early:
            return Verdict(outcome="failure", reason=f"script stopped after {self.said} of {len(self.lines)} lines",
                           reward={"lines": self.said})
        return Verdict(outcome="success", reason="script completed", reward={"lines": self.said})


def script_lines(raw: list[Any]) -> list[UserReply]:
    """User lines from JSON: strings or objects with the fields of UserReply."""
    return [UserReply(utterance=x) if isinstance(x, str) else msgspec.convert(x, UserReply) for x in raw]


def _ending(lines: list[UserReply]) -> list[UserReply]:
    """The lines with the last one ending the episode."""
    lines = list(lines)
    if lines and not lines[-1].end:
        lines[-1] = msgspec.structs.replace(lines[-1], end=True)
    return lines


# Scenario scripts prepared once and shared by every user that speaks them (the engine never changes a reply)
_PREPARED = IdentityMemo()


def _prepare(source: list[Any]) -> list[UserReply]:
    return _PREPARED.get((source,), lambda: _ending(script_lines(source)))


def make_factory(arg: str | None, scenarios: Any, options: dict[str, Any]) -> type[ScriptedUser]:
    """The ``scripted`` user plug-in: every episode gets a fresh ScriptedUser."""
    return ScriptedUser
