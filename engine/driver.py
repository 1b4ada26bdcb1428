"""The driver: steps simpy's clock from asyncio so that network timing never changes a log.

simpy is the clock of record. Episodes are simpy processes that talk to users and agents by direct
calls; when a call returns an awaitable (a live agent), the process starts it through the driver with
the virtual time its result is due (the call's start plus its modelled latency) and sleeps on a simpy
timeout until then. simpy runs freely; only when that very timeout is the next event to process does
the driver wait for the call to finish. So virtual time never passes a call still in flight, every
result is taken at a fixed point of simpy's event order, and the sequence of simpy steps - hence the
log - is the same whatever the real latencies were, while all calls in flight run concurrently.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable

import simpy
from simpy.core import EmptySchedule


class Interrupted(Exception):
    """The run was asked to stop (Ctrl-C or SIGTERM)."""


class Driver:
    """Runs a simpy Environment to completion inside an asyncio event loop."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.stop_requested = False
        self._waiting: dict[simpy.Event, asyncio.Future[Any]] = {}

    def start(self, awaitable: Awaitable[Any], due: float) -> tuple[asyncio.Future[Any], simpy.Timeout]:
        """Start a call whose result is taken at virtual time ``due``: its future and the timeout to sleep on.

        When the caller wakes from the timeout, ``future.result()`` is ready (or raises the call's error).
        """
        future = asyncio.ensure_future(awaitable)
        timeout = self.env.timeout(max(0.0, due - self.env.now))
        self._waiting[timeout] = future
        return future, timeout

    async def run(self) -> None:
        """Step the environment until nothing is scheduled; Interrupted if stopped."""
        env = self.env
        step = env.step
        waiting = self._waiting
        # simpy's event heap of (time, priority, id, event); its head is the next event step() processes.
        queue = env._queue
        try:
            while True:
                if self.stop_requested:
                    raise Interrupted()
                if waiting and queue:
                    future = waiting.pop(queue[0][3], None)
                    if future is not None and not future.done():
                        await asyncio.wait((future,))
                try:
                    step()
                except EmptySchedule:
                    return
        finally:
            futures = list(waiting.values())
            for future in futures:
                future.cancel()
            if futures:
                await asyncio.gather(*futures, return_exceptions=True)
            waiting.clear()
