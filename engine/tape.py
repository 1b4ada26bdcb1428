"""An episode's logged prefix (its tape): what a resumed episode runs through again before it goes on.

A resumed episode re-runs its deterministic user and agent against the tape: every event they produce must
match the logged one (``check``), or the episode ends with a divergence fault. An agent that cannot be re-run
(a live model) is not asked while the tape lasts: its steps are read back from the tape (``agent_step``).
Past the tape's end the episode continues live. A new episode has an empty tape.
"""

from __future__ import annotations

import msgspec

from .calls import model_call
from .contracts import AgentFailure, AgentReply, FaultReport, ModelCall, ToolCall
from .events import AgentTurn, EpisodeEnded, Event, Fault, ModelCalled, ToolCalled, ToolReturned


class Divergence(Exception):
    """A re-run of a logged episode prefix produced a different event than the log holds."""


class Tape:
    """The logged events of one episode that a re-run must reproduce, from seq 0 to ``end``."""

    __slots__ = ("events", "end")

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.end = len(events)  # the first seq past the tape: from there on the episode is live

    @property
    def start(self) -> float:
        """The virtual time the episode started at (0 for a new episode)."""
        return self.events[0].t if self.events else 0.0

    def check(self, event: Event) -> None:
        """Check a re-run event against the logged one at its seq: equal but for its times, which it takes from
        the log (the episode goes on with what the log holds); Divergence if it differs."""
        logged = self.events[event.seq]
        if msgspec.structs.replace(event, t=logged.t, wall=logged.wall) != logged:
            raise Divergence(f"event {event.seq} differs from the log: expected {type(logged).__name__}, "
                             f"re-run gave {type(event).__name__}")
        event.t, event.wall = logged.t, logged.wall

    def cut(self, seq: int) -> None:
        """Stop checking at ``seq``: after a divergence, the episode records what happens from there on."""
        self.events = self.events[:seq]
        self.end = len(self.events)

    def agent_step(self, seq: int) -> AgentReply | None:
        """The agent's step logged from ``seq`` on (its faults and model calls, then its tool calls or its turn),
        or None when the tape holds none; AgentFailure when the logged agent failed there."""
        tape, i = self.events, seq
        faults: list[FaultReport] = []
        model_calls: list[ModelCall] = []
        while i < len(tape):
            event = tape[i]
            if isinstance(event, Fault) and event.who == "agent":
                faults.append(FaultReport(kind=event.kind, detail=event.detail, attempt=event.attempt))
            elif isinstance(event, ModelCalled) and event.role == "agent":
                model_calls.append(model_call(event, faults))  # the faults before a call are its own
                faults = []
            else:
                break
            i += 1
        calls = []
        while i < len(tape) and isinstance(tape[i], (ToolCalled, ToolReturned)):
            if isinstance(tape[i], ToolCalled):
                calls.append(ToolCall(service=tape[i].service, method=tape[i].method,
                                      parameters=tape[i].parameters, call_id=tape[i].call_id))
            i += 1
        if calls:
            return AgentReply(tool_calls=calls, faults=faults, model_calls=model_calls)
        if i < len(tape) and isinstance(tape[i], AgentTurn):
            turn = tape[i]
            return AgentReply(utterance=turn.utterance, frames=turn.frames, state=turn.state,
                              tagged_slots=turn.tagged_slots, end=turn.end, usage=turn.usage, cost=turn.cost,
                              action=turn.action, latency=turn.latency, faults=faults, model_calls=model_calls)
        if i < len(tape) and isinstance(tape[i], EpisodeEnded) and faults:
            raise AgentFailure(faults[-1].detail, faults)
        return None
