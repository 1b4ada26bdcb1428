"""The Agent protocol: what the engine asks of an agent, and what an agent answers.

An agent answers each user turn with an ``AgentReply``; a reply that carries ``tool_calls`` is not
spoken: the engine runs the calls against the scenario's world, logs them, and asks again with the
results in ``Observation.tool_results``, until a reply without tool calls is the agent's turn.
``respond`` may be a plain method or return an awaitable (live agents); only awaitables cost an
event-loop hop.
"""

from __future__ import annotations

from typing import Any, Awaitable, Protocol

import msgspec

from ..engine.events import AgentTurn, DialogueState, Event, Frame, SlotSpan, Usage, UserTurn
from ..scenarios.base import EpisodeContext, ToolResult


class ToolCall(msgspec.Struct, kw_only=True):
    """A call the agent asks the engine to make: service, method (intent) and parameters."""

    service: str
    method: str
    parameters: dict[str, Any] = {}
    call_id: str = ""


class FaultReport(msgspec.Struct, kw_only=True):
    """A failure the agent met and survived (a retried request, say), logged as a ``fault`` event."""

    kind: str
    detail: str = ""
    attempt: int = 0


class AgentReply(msgspec.Struct, kw_only=True):
    """An agent's answer: either tool calls to run, or its turn (utterance, acts, tracked state)."""

    utterance: str = ""
    frames: list[Frame] = []
    state: dict[str, DialogueState] | None = None
    tagged_slots: dict[str, list[SlotSpan]] | None = None  # spans found in the user's utterance, per service
    end: bool = False
    tool_calls: list[ToolCall] = []
    usage: Usage | None = None
    cost: float | None = None
    action: str | None = None
    latency: float | None = None  # virtual seconds; None lets the engine's latency model decide
    faults: list[FaultReport] = []


class AgentFailure(Exception):
    """The agent could not answer at all (retries exhausted): the episode ends with outcome error."""

    def __init__(self, detail: str, faults: list[FaultReport] | None = None) -> None:
        # Both in args: simpy re-raises a failed event's exception as type(exc)(*exc.args).
        super().__init__(detail, faults or [])
        self.detail = detail
        self.faults = faults or []

    def __str__(self) -> str:
        return self.detail


class Observation(msgspec.Struct, kw_only=True):
    """What the agent sees when asked: the new user turn, the episode so far, and tool results."""

    user: UserTurn
    history: list[Event]
    tool_results: list[ToolResult] = []
    turn_index: int = 0


class Agent(Protocol):
    """A dialogue agent; ``deterministic`` agents are re-run on resume, others are replayed from the log."""

    deterministic: bool

    def start(self, ctx: EpisodeContext) -> None:
        """Begin an episode."""
        ...

    def respond(self, obs: Observation) -> AgentReply | Awaitable[AgentReply]:
        """Answer the user turn in ``obs`` (or continue after tool results)."""
        ...


def history_turns(history: list[Event]) -> list[UserTurn | AgentTurn]:
    """The spoken turns of a history, in order."""
    return [e for e in history if isinstance(e, (UserTurn, AgentTurn))]
