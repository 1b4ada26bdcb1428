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
from typing import Any, Awaitable, Callable

import simpy
from simpy.core import EmptySchedule


class Interrupted(Exception):
    """The run was asked to stop (Ctrl-C or SIGTERM)."""


class Driver:
    """Runs a simpy Environment to completion inside an asyncio event loop."""

    def __init__(self, env: simpy.Environment, before_wait: Callable[[], None] | None = None) -> None:
        self.env = env
        self.before_wait = before_wait  # called before blocking on a call: the log commits what has ended
        self.stop_requested = False
        self._stop: asyncio.Future[None] | None = None
        self._waiting: dict[simpy.Event, asyncio.Future[Any]] = {}

    def start(self, awaitable: Awaitable[Any], due: float) -> tuple[asyncio.Future[Any], simpy.Timeout]:
        """Start a call whose result is taken at virtual time ``due``: its future and the timeout to sleep on.

        When the caller wakes from the timeout, ``future.result()`` is ready (or raises the call's error).
        """
        future = asyncio.ensure_future(awaitable)
        timeout = self.env.timeout(max(0.0, due - self.env.now))
        self._waiting[timeout] = future
        return future, timeout

    def request_stop(self) -> None:
        """Stop the run at the next step, and at once if it is waiting on a call.

        Safe to call from a signal handler (Ctrl-C, SIGTERM): the flag stops a busy loop between steps,
        and a loop asleep on a call is woken through the event loop's thread-safe queue.
        """
        self.stop_requested = True
        stop = self._stop
        if stop is not None:
            stop.get_loop().call_soon_threadsafe(_resolve, stop)

    async def run(self) -> None:
        """Step the environment until nothing is scheduled; Interrupted if stopped."""
        env = self.env
        step = env.step
        waiting = self._waiting
        self._stop = stop = asyncio.get_running_loop().create_future()
        # simpy's event heap of (time, priority, id, event); its head is the next event step() processes.
        queue = env._queue
        try:
            while True:
                if self.stop_requested:
                    raise Interrupted()
                if waiting and queue:
                    future = waiting.pop(queue[0][3], None)
                    if future is not None and not future.done():
                        if self.before_wait is not None:
                            self.before_wait()
                        await asyncio.wait((future, stop), return_when=asyncio.FIRST_COMPLETED)
                        if self.stop_requested:
                            waiting[queue[0][3]] = future  # cancelled below with every other call in flight
                            raise Interrupted()
                try:
                    step()
                except EmptySchedule:
                    return
        finally:
            self._stop = None
            futures = list(waiting.values())
            for future in futures:
                future.cancel()
            if futures:
                await asyncio.gather(*futures, return_exceptions=True)
            waiting.clear()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
