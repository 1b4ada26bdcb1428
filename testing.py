"""Testing helpers: run your user or agent through the real engine in memory and look at the events.

Users test their agents the way dialogsim tests itself (the README's "Testing your own agent" shows a
complete agent)::

    from dialogsim.testing import ScriptedUser, UserReply, simulate

    events = simulate(agent=MyAgent, user=lambda: ScriptedUser([UserReply(utterance="hi")]))
    assert events.outcomes() == {"e000000": "success"}

This module sits above the engine and the built-ins it runs (the scripted user and agent, the built-in
scenarios); loopback HTTP servers for live agents are in ``dialogsim.agents.http.testing``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from .agents.scripted import ScriptLine, ScriptedAgent
from .engine.contracts import AgentReply, EpisodeContext, Observation, ScenarioSet, UserReply
from .engine.events import AgentTurn, EpisodeEnded, Event, UserTurn, event_type
from .engine.runner import Batch, BatchSettings, Job, Sink
from .engine.timing import Delay
from .scenarios.builtin import BuiltinScenarios
from .users.scripted import ScriptedUser

__all__ = ["MemoryLog", "simulate", "capture_events", "SleepyAgent", "ScriptedUser", "ScriptedAgent",
           "ScriptLine", "UserReply", "AgentReply", "strip_wall"]

_taps: list[list[Event]] = []


class MemoryLog(list, Sink):
    """An in-memory event sink: a list of events with a few views for assertions."""

    def append(self, event: Event) -> None:  # type: ignore[override]
        super().append(event)
        for tap in _taps:
            tap.append(event)

    def of_type(self, kind: str) -> list[Event]:
        """Events of one type, e.g. ``"user_turn"``."""
        return [e for e in self if event_type(e) == kind]

    def episode(self, ep: str) -> list[Event]:
        """One episode's events in order."""
        return [e for e in self if e.ep == ep]

    def outcomes(self) -> dict[str, str]:
        """Episode id -> outcome."""
        return {e.ep: e.outcome for e in self if isinstance(e, EpisodeEnded)}

    def transcript(self, ep: str) -> list[tuple[str, str]]:
        """``[("user", text), ("agent", text), ...]`` of one episode."""
        return [("user" if isinstance(e, UserTurn) else "agent", e.utterance)
                for e in self.episode(ep) if isinstance(e, (UserTurn, AgentTurn))]


def simulate(*, user: Callable[[], Any] | None = None, agent: Callable[[], Any] | None = None,
             scenarios: ScenarioSet | None = None, episodes: int = 1, seed: int = 0, concurrency: int = 8,
             max_turns: int = 50, think: Delay = Delay("fixed", 0.0), latency: Delay = Delay("fixed", 0.0),
             run_id: str = "test-run") -> MemoryLog:
    """Run episodes through the real engine into memory (defaults: built-in scenarios, scripted sides)."""
    scenarios = scenarios or BuiltinScenarios()
    log = MemoryLog()
    batch = Batch(run_id=run_id, scenarios=scenarios, make_user=user or ScriptedUser,
                  make_agent=agent or ScriptedAgent, sink=log,
                  settings=BatchSettings(seed=seed, concurrency=concurrency, max_turns=max_turns, think=think,
                                         latency=latency))
    asyncio.run(batch.run([Job(i) for i in range(episodes)]))
    return log


@contextmanager
def capture_events() -> Iterator[list[Event]]:
    """Collect every event appended to any MemoryLog inside the block (like structlog's capture_logs)."""
    tap: list[Event] = []
    _taps.append(tap)
    try:
        yield tap
    finally:
        _taps.remove(tap)


class SleepyAgent:
    """Wraps an agent so that every answer arrives after a random real delay, as a live agent's would."""

    deterministic = True

    def __init__(self, inner: Any, max_sleep: float = 0.005, rng: random.Random | None = None) -> None:
        self.inner = inner
        self.max_sleep = max_sleep
        self.rng = rng or random.Random()

    def start(self, ctx: EpisodeContext) -> None:
        self.inner.start(ctx)

    async def respond(self, obs: Observation) -> AgentReply:
        await asyncio.sleep(self.rng.random() * self.max_sleep)
        return self.inner.respond(obs)


def strip_wall(events: list[Event]) -> list[bytes]:
    """Events encoded with ``wall`` zeroed, for comparing two runs byte for byte."""
    return [msgspec.json.encode(msgspec.structs.replace(e, wall=0)) for e in events]
