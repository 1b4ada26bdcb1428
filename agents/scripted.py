"""The scripted agent: answers with fixed lines, making the tool calls its script names."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..engine.contracts import AgentReply, EpisodeContext, Observation, ToolCall
from ..engine.events import AgentTurn
from ..engine.memo import IdentityMemo

_FIELD = re.compile(r"\{(\w+)\}")


class ScriptLine(msgspec.Struct, kw_only=True):
    """One scripted agent turn: text (``{slot}`` filled from the first tool result), tool calls, end."""

    utterance: str
    tool_calls: list[ToolCall] = []
    end: bool = False


class ScriptedAgent:
    """Answers the k-th user turn with the k-th line of ``lines`` (or of the scenario's ``data["agent"]``)."""

    deterministic = True

    def __init__(self, lines: list[ScriptLine] | None = None) -> None:
        self._fixed = lines
        self.lines: list[ScriptLine] = []
        self.replies: list[AgentReply | None] = []
        self.answered = 0

    def start(self, ctx: EpisodeContext) -> None:
        source = self._fixed if self._fixed is not None else ctx.scenario.data.get("agent", [])
        self.lines, self.replies = _prepare(source)
        self.answered = 0

    def warm(self, history: list[Any]) -> None:
        """Take a logged episode's turns as its own (a fork's copied prefix): the lines said so far are skipped."""
        self.answered = sum(1 for e in history if type(e) is AgentTurn)

    def respond(self, obs: Observation) -> AgentReply:
        i = self.answered
        if i < len(self.replies) and not obs.tool_results:
            reply = self.replies[i]
            if reply is not None:
                self.answered = i + 1
                return reply
        return self._respond_with_tools(obs)

    def _respond_with_tools(self, obs: Observation) -> AgentReply:
        """The line's tool calls, or (with their results) its text filled from the first result row."""
        if self.answered >= len(self.lines):
            return AgentReply(utterance="Goodbye.", end=True)
        line = self.lines[self.answered]
        if line.tool_calls and not obs.tool_results:
            return AgentReply(tool_calls=line.tool_calls)
        self.answered += 1
        if obs.tool_results and "{" in line.utterance:
            row = next((r.results[0] for r in obs.tool_results if r.results), {})
            text = _FIELD.sub(lambda m: str(row.get(m.group(1), m.group(0))), line.utterance)
            return AgentReply(utterance=text, end=line.end)
        return AgentReply(utterance=line.utterance, end=line.end)


# Scripts prepared once and shared by every agent that speaks them (the engine never changes a reply)
_PREPARED = IdentityMemo()


def _prepare(source: list[Any]) -> tuple[list[ScriptLine], list[AgentReply | None]]:
    """A script's lines and one reply per plain line (None for a line that calls tools first)."""
    def build() -> tuple[list[ScriptLine], list[AgentReply | None]]:
        lines = msgspec.convert(source, list[ScriptLine])
        return lines, [None if line.tool_calls else AgentReply(utterance=line.utterance, end=line.end)
                       for line in lines]

    return _PREPARED.get((source,), build)


def make_factory(arg: str | None, scenarios: Any, options: dict[str, Any]) -> type[ScriptedAgent]:
    """The ``scripted`` agent plug-in: every episode gets a fresh ScriptedAgent."""
    return ScriptedAgent
