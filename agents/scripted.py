"""The scripted agent: answers with fixed lines, making the tool calls its script names."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..engine.registry import register_agent
from ..scenarios.base import EpisodeContext
from .base import AgentReply, Observation, ToolCall

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
        self.replies: list[AgentReply] = []
        self.answered = 0

    def start(self, ctx: EpisodeContext) -> None:
        raw = ctx.scenario.data.get("agent", [])
        lines = self._fixed if self._fixed is not None else msgspec.convert(raw, list[ScriptLine])
        if lines is not self.lines:
            self.lines = lines
            # The engine never changes a reply, so one prepared reply per line serves every turn.
            self.replies = [AgentReply(utterance=line.utterance, end=line.end) for line in lines]
        self.answered = 0

    def respond(self, obs: Observation) -> AgentReply:
        if self.answered >= len(self.lines):
            return AgentReply(utterance="Goodbye.", end=True)
        line = self.lines[self.answered]
        if line.tool_calls and not obs.tool_results:
            return AgentReply(tool_calls=line.tool_calls)
        reply = self.replies[self.answered]
        self.answered += 1
        if obs.tool_results and "{" in line.utterance:
            row = next((r.results[0] for r in obs.tool_results if r.results), {})
            text = _FIELD.sub(lambda m: str(row.get(m.group(1), m.group(0))), line.utterance)
            return AgentReply(utterance=text, end=line.end)
        return reply


def _factory(arg: str | None, scenarios: Any, options: dict[str, Any]):
    return ScriptedAgent


register_agent("scripted", _factory)
