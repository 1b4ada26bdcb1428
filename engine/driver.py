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
from simpy.events import Timeout


class Interrupted(Exception):
    """The run was asked to stop (Ctrl-C or SIGTERM)."""


class Driver:
    """Runs a simpy Environment to completion inside an asyncio event loop."""

    def __init__(self, env: simpy.Environment, before_wait: Callable[[], None] | None = None) -> None:
        self.env = env
        self.before_wait = before_wait  # called before blocking on a call: the log commits what has ended
        self.stop_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._current: asyncio.Future[Any] | None = None  # the call the driver is blocked on
        self._waiting: dict[simpy.Event, asyncio.Future[Any]] = {}
        self._failure: BaseException | None = None  # raised while _answered stepped, for run() to raise
        self._then = self._answered  # bound once: given to every call's future

    def start(self, awaitable: Awaitable[Any], due: float) -> tuple[asyncio.Future[Any], simpy.Timeout]:
        """Start a call whose result is taken at virtual time ``due``: its future and the timeout to sleep on.

        A future (a live agent's pending answer) is used as it is; a coroutine gets a task.
        When the caller wakes from the timeout, ``future.result()`` is ready (or raises the call's error).
        A future with a ``then`` slot (the HTTP pool's) gets the driver's hook there, for its producer
        to call as soon as it is resolved: the driver then steps on in that same event-loop turn,
        rather than a turn later when the awaiting task resumes.
        """
        future = awaitable if isinstance(awaitable, asyncio.Future) else asyncio.ensure_future(awaitable)
        if hasattr(future, "then"):
            future.then = self._then
        env = self.env
        # Timeout(env, ...) is env.timeout(...) without simpy's per-access bound-class wrapper; _now is env.now
        timeout = Timeout(env, max(0.0, due - env._now))
        self._waiting[timeout] = future
        return future, timeout

    def request_stop(self) -> None:
        """Stop the run at the next step, and at once if it is waiting on a call.

        Safe to call from a signal handler (Ctrl-C, SIGTERM): the flag stops a busy loop between steps,
        and a loop asleep on a call is woken through the event loop's thread-safe queue (the call it
        waits on is cancelled, as every call in flight is when the run stops).
        """
        self.stop_requested = True
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._interrupt)

    def _interrupt(self) -> None:
        current = self._current
        if current is not None:
            current.cancel()

    def _advance(self) -> asyncio.Future[Any] | None:
        """Step the environment until its next event is a call still in flight: that call's future,
        or None when nothing is scheduled."""
        queue, waiting, step = self.env._queue, self._waiting, self.env.step
        # simpy's event heap of (time, priority, id, event); its head is the next event step() processes.
        while queue:
            if self.stop_requested:
                raise Interrupted()
            head = queue[0][3]
            future = waiting.get(head)
            if future is not None:
                if not future.done():
                    return future
                del waiting[head]
            step()
        return None

    def _answered(self) -> None:
        """A call's answer just came (its producer calls this): if the driver was blocked on that call,
        step on at once; the driver task, resuming a turn later, carries on from where this stopped."""
        current = self._current
        if current is None or not current.done():
            return
        self._current = None  # not blocked while stepping: an answer coming meanwhile does nothing here
        try:
            self._current = self._advance()
        except BaseException as exc:
            self._failure = exc  # raised by the driver task when it resumes

    async def run(self) -> None:
        """Step the environment until nothing is scheduled; Interrupted if stopped."""
        waiting = self._waiting
        self._loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        try:
            future = self._advance()
            while future is not None:
                if self.before_wait is not None:
                    self.before_wait()
                # Awaited directly (no asyncio.wait): the driver resumes one loop hop after the answer.
                self._current = future
                try:
                    await future
                except asyncio.CancelledError:
                    if self.stop_requested:
                        raise Interrupted() from None
                    if me is not None and me.cancelling():
                        raise  # the driver itself is being cancelled
                except Exception:
                    pass  # the call's own failure: its episode takes it from future.result()
                if self._failure is not None:
                    raise self._failure
                if self._current is future:
                    self._current = None
                    future = self._advance()
                else:  # _answered has stepped on already: to the call now blocking, or to the end
                    future = self._current
        finally:
            self._loop = self._current = None
            futures = list(waiting.values())
            for future in futures:
                future.cancel()
            if futures:
                await asyncio.gather(*futures, return_exceptions=True)
            waiting.clear()
