"""The driver: steps simpy's clock from asyncio so that network timing never changes a log.

simpy is the clock of record. Episodes are simpy processes that talk to users and agents by direct
calls; when a call returns an awaitable (a live agent), the process waits on a simpy event that the
driver resolves. The driver processes every simpy event due now, never advances virtual time while a
call is in flight, and delivers results strictly in the order the calls were made - so the sequence of
simpy steps, and hence the log, is the same whatever the real latencies were. Calls still run
concurrently on the event loop; only their delivery is ordered.
"""

from __future__ import annotations

import asyncio
from collections import deque
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
        self._inflight: deque[tuple[simpy.Event, asyncio.Future[Any]]] = deque()

    def wait(self, awaitable: Awaitable[Any]) -> simpy.Event:
        """A simpy event that succeeds with the awaitable's result (or fails with its exception)."""
        event = self.env.event()
        self._inflight.append((event, asyncio.ensure_future(awaitable)))
        return event

    async def run(self) -> None:
        """Step the environment until nothing is scheduled or in flight; Interrupted if stopped."""
        env = self.env
        step = env.step
        peek = env.peek
        inflight = self._inflight
        try:
            while True:
                if self.stop_requested:
                    raise Interrupted()
                if inflight:
                    if peek() <= env.now:
                        step()
                        continue
                    event, future = inflight.popleft()
                    try:
                        value = await future
                    except asyncio.CancelledError:
                        raise
                    except BaseException as exc:  # the episode process turns it into a fault
                        event.fail(exc)
                    else:
                        event.succeed(value)
                    continue
                try:
                    step()
                except EmptySchedule:
                    return
        finally:
            for _, future in inflight:
                future.cancel()
            if inflight:
                await asyncio.gather(*(f for _, f in inflight), return_exceptions=True)
            inflight.clear()
