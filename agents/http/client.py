"""The reliability layer shared by the HTTP agents and model-driven users: timeouts, retries, in-flight bound,
size cap, faults.

One ``HttpPool`` belongs to one agent (or user) factory, so every episode of a run shares its aiohttp session
and its in-flight bound. The session is created lazily inside the running event loop (a factory is
built before any loop runs) and closed by ``aclose()`` at run end. Each failed attempt becomes a
``FaultReport``; when the retries are exhausted ``AgentFailure`` carries them all to the engine.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import ssl
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

import aiohttp

from ...engine.contracts import AgentFailure, FaultReport
from ...engine.errors import UserError
from ...engine.oplog import get_logger

T = TypeVar("T")

log = get_logger("http-agent")

# Statuses worth another attempt: the server is overloaded or briefly broken, not refusing the request.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class ProtocolError(Exception):
    """The server answered 2xx with a body that breaks the protocol (not JSON, wrong shape)."""


class _Retryable(Exception):
    """One attempt failed in a way another attempt may fix; ``wait`` is a server-requested delay."""

    def __init__(self, fault: FaultReport, wait: float = 0.0) -> None:
        super().__init__(fault.detail)
        self.fault = fault
        self.wait = wait


class _Fatal(Exception):
    """One attempt failed in a way no retry will fix (a 4xx other than 408/429)."""

    def __init__(self, fault: FaultReport) -> None:
        super().__init__(fault.detail)
        self.fault = fault


# Options every HTTP agent (and model-driven user) understands (each adds its own).
COMMON_OPTIONS = frozenset({
    "connect_timeout", "read_timeout", "total_timeout", "retries", "concurrency", "max_response_bytes",
    "verify_tls", "backoff_base", "backoff_max", "retry_after_max", "api_key_env", "price_in_per_1k",
    "price_out_per_1k", "latency"})


def check_options(options: Mapping[str, Any], spec: str, extra: frozenset[str], who: str = "agent",
                  common: frozenset[str] = COMMON_OPTIONS) -> None:
    """A misspelt option would be silently ignored: name it instead, with the ones that exist."""
    unknown = sorted(set(options) - common - extra)
    if unknown:
        known = ", ".join(sorted(common | extra))
        raise UserError(f"unknown option {unknown[0]!r} for {who} {spec} (known: {known})")


def number_option(options: Mapping[str, Any], key: str, default: float, *, integer: bool = False,
                  minimum: float = 0.0, who: str = "agent") -> Any:
    """Option ``key`` as a number >= ``minimum`` (``default`` when absent or empty); a UserError naming it if not."""
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if integer else float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value >= minimum):
        kind = "an integer" if integer else "a number"
        raise UserError(f"bad {who} option {key}={raw!r}: expected {kind} >= {minimum:g}")
    return value


def _flag(options: Mapping[str, Any], key: str, default: bool, who: str) -> bool:
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise UserError(f"bad {who} option {key}={raw!r}: expected true or false")


@dataclass(frozen=True)
class HttpSettings:
    """Timeouts (seconds), retry policy, in-flight bound, response cap and TLS verification."""

    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    total_timeout: float = 120.0
    retries: int = 3
    concurrency: int = 16
    max_response_bytes: int = 4 * 1024 * 1024
    verify_tls: bool = True
    backoff_base: float = 0.5
    backoff_max: float = 20.0
    retry_after_max: float = 60.0

    @classmethod
    def from_options(cls, options: Mapping[str, Any], who: str = "agent") -> HttpSettings:
        """Read the settings from an agent's (or user's) options dict; a bad value is a UserError naming its key."""
        d = cls()

        def number(key: str, default: float, **kw: Any) -> Any:
            return number_option(options, key, default, who=who, **kw)

        return cls(
            connect_timeout=number("connect_timeout", d.connect_timeout, minimum=0.001),
            read_timeout=number("read_timeout", d.read_timeout, minimum=0.001),
            total_timeout=number("total_timeout", d.total_timeout, minimum=0.001),
            retries=number("retries", d.retries, integer=True),
            concurrency=number("concurrency", d.concurrency, integer=True, minimum=1),
            max_response_bytes=number("max_response_bytes", d.max_response_bytes, integer=True, minimum=1),
            verify_tls=_flag(options, "verify_tls", d.verify_tls, who),
            backoff_base=number("backoff_base", d.backoff_base),
            backoff_max=number("backoff_max", d.backoff_max),
            retry_after_max=number("retry_after_max", d.retry_after_max),
        )


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff_delay(attempt: int, settings: HttpSettings, rng: random.Random, retry_after: float | None) -> float:
    """Seconds before retry number ``attempt`` (1-based): equal-jitter exponential backoff from ``rng``,
    never shorter than the server's Retry-After (capped at ``retry_after_max``)."""
    ceiling = min(settings.backoff_max, settings.backoff_base * (2 ** (attempt - 1)))
    delay = ceiling / 2 + rng.uniform(0.0, ceiling / 2)
    if retry_after is not None:
        delay = max(delay, min(retry_after, settings.retry_after_max))
    return delay


def _safe_url(url: str) -> str:
    """A URL fit for a log: no query string and no user:password part (either may hold a credential)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


@dataclass
class PoolStats:
    """What a pool has sent: attempts, time on the wire, and how many requests were in flight.

    ``mean_in_flight`` is the concurrency actually achieved (Little's law: wire time over the span from
    the first attempt's start to the last one's end); a driver that serialised live calls shows ~1 here
    however high ``concurrency`` is.
    """

    attempts: int = 0
    busy: float = 0.0  # seconds summed over attempts, from holding an in-flight slot to the answer
    first: float = 0.0  # perf_counter() when the first attempt got its slot
    last: float = 0.0  # perf_counter() when the latest attempt ended
    in_flight: int = 0
    peak: int = 0  # most attempts in flight at once

    @property
    def mean_in_flight(self) -> float:
        """Requests in flight on average while the pool was in use."""
        span = self.last - self.first
        return self.busy / span if span > 0 else float(self.peak)


class Answer(asyncio.Future):
    """The future of a request's outcome; ``then``, when set, is called as soon as it is resolved.

    A task awaiting a future resumes one event-loop turn after it is resolved, and at high concurrency
    a turn is dozens of requests' work: a waiter that sets ``then`` (the engine's driver does) can act
    on the answer in the turn that brought it.
    """

    then: Callable[[], None] | None = None  # a class default: no __init__ of our own, creation stays C-fast


class _Job:
    """One request to send until it succeeds or fails for good, and the future its result goes to."""

    __slots__ = ("url", "body", "headers", "rng", "decode", "finish", "future", "faults", "attempt", "fallback")

    def __init__(self, url: str, body: bytes, headers: Mapping[str, str] | None,
                 rng: random.Random | Callable[[], random.Random], decode: Callable[[bytes], Any],
                 finish: Callable[[Any, list[FaultReport], float], Any] | None, future: Answer,
                 fallback: Callable[[int], bytes | None] | None = None) -> None:
        self.url, self.body, self.headers, self.rng = url, body, headers, rng
        self.decode, self.finish, self.future = decode, finish, future
        self.faults: list[FaultReport] = []
        self.attempt = 0
        self.fallback = fallback


class _Sender:
    """A sender task's attempt in flight, as the watchdog sees it."""

    __slots__ = ("task", "busy", "start", "mark", "seen", "resp", "expired")

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.busy = False  # inside an attempt: the only place the watchdog may cancel the task
        self.start = 0.0  # perf_counter() when the attempt began
        self.mark = 0.0  # when the watchdog last saw the answer progress (the start, the headers, body bytes)
        self.seen = -1  # body bytes received at ``mark`` (-1: no headers yet)
        self.resp: aiohttp.ClientResponse | None = None
        self.expired = False  # the watchdog cancelled this attempt for a timeout


class HttpPool:
    """One aiohttp session, ``concurrency`` sender tasks and one timeout watchdog for an agent factory.

    Requests queue up and the senders take them in order, so ``concurrency`` bounds the requests in
    flight without a task or a semaphore per request. Timeouts are enforced by one watchdog per pool
    rather than by aiohttp's timer handles, which cost several heap operations per request (one per
    chunk read): every ``tick`` it expires an attempt older than ``total_timeout`` or whose answer made
    no progress for ``read_timeout`` (counted from the attempt's start until the headers arrive, then
    between body chunks). aiohttp still bounds each new connection by ``connect_timeout``.
    A failed attempt is retried after its backoff without holding a sender.
    """

    def __init__(self, settings: HttpSettings, secrets: tuple[str, ...] = (),
                 headers: Mapping[str, str] | None = None, who: str = "agent") -> None:
        self.settings = settings
        self.who = who  # whose requests these are, for failure messages: "agent" or "user"
        self.stats = PoolStats()
        # Headers every request carries: the session's defaults, so aiohttp does not merge them per request.
        self._headers = dict(headers or {})
        # Values that must never appear in a fault detail (API keys): scrubbed defensively.
        self._secrets = tuple(s for s in secrets if s)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._guard: asyncio.Task[None] | None = None
        self._jobs: deque[_Job] = deque()
        self._idle: list[asyncio.Future[None]] = []  # wake-ups of senders waiting for a job
        self._looking = 0  # senders that just delivered an answer and look for a job before they wait
        self._senders: list[_Sender] = []
        self._watchdog: asyncio.Task[None] | None = None
        # Finer than the shortest timeout, so that one fires at most a tenth late.
        self._tick = max(0.001, min(settings.read_timeout, settings.total_timeout) / 10)
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.connect_timeout, sock_read=None)

    def _open(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start a session, senders and watchdog in ``loop``: at the first request, and again in a new loop
        (a session belongs to the loop it was made in: a second asyncio.run gets its own)."""
        ssl_ctx: ssl.SSLContext | bool = True if self.settings.verify_tls else False
        connector = aiohttp.TCPConnector(limit=self.settings.concurrency, limit_per_host=0, ssl=ssl_ctx)
        self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, headers=self._headers,
                                              auto_decompress=True, trust_env=False)
        self._loop = loop
        self._jobs, self._idle, self._senders, self._looking = deque(), [], [], 0
        self._watchdog = loop.create_task(self._watch())
        self._guard = loop.create_task(self._close_at_shutdown(self._session))

    @property
    def open(self) -> bool:
        """True while the pool holds a session that is not closed."""
        return self._session is not None and not self._session.closed

    async def _close_at_shutdown(self, session: aiohttp.ClientSession) -> None:
        """Wait until cancelled, then close ``session`` unless ``aclose`` took it first.

        ``asyncio.run`` cancels the tasks left when its coroutine returns, so a factory nobody closed
        (one given to ``engine.testing.simulate``, which does not call ``aclose``) still closes its
        session cleanly instead of leaving an "Unclosed client session" warning and open sockets.
        """
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            if self._session is session:
                self._session = None
                self._stop_tasks()
                await session.close()

    def _stop_tasks(self) -> list[asyncio.Task[None]]:
        """Cancel the senders and the watchdog, and every job still queued; the tasks cancelled."""
        tasks = [s.task for s in self._senders if s.task is not None]
        if self._watchdog is not None:
            tasks.append(self._watchdog)
        self._watchdog = None
        self._senders, self._idle, self._looking = [], [], 0
        for task in tasks:
            task.cancel()
        while self._jobs:
            self._jobs.popleft().future.cancel()
        return tasks

    async def aclose(self) -> None:
        """Stop the senders and close the session (idempotent); the engine calls this at run end."""
        session, self._session = self._session, None
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.cancel()
        tasks = self._stop_tasks()
        if self._loop is asyncio.get_running_loop():
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            if session is not None and not session.closed:
                await session.close()

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text[:500]

    def submit(self, url: str, body: bytes, headers: Mapping[str, str] | None,
               rng: random.Random | Callable[[], random.Random], decode: Callable[[bytes], T],
               finish: Callable[[T, list[FaultReport], float], Any] | None = None,
               fallback: Callable[[int], bytes | None] | None = None) -> Answer:
        """Queue a POST of ``body``; a future of ``finish(decoded, faults met, seconds of the good attempt)``.

        ``headers`` are added to the pool's own (None: the pool's alone, the cheapest). ``decode`` turns
        a 2xx body into a value or raises ProtocolError (a retryable fault). ``finish`` (default: the
        tuple of its arguments) runs in the sender as soon as the answer decodes. ``rng`` (the agent's
        stream, or a maker of it) draws the backoff jitter, only when a retry is due. The future fails
        with ``AgentFailure`` carrying every fault when the retries are exhausted or a fault is not
        retryable; cancelling it abandons the request. ``fallback(status)``, asked once when the server
        refuses the request with a status not worth retrying, may give another body to retry with (a
        chat request without a field the server does not accept).
        """
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._session is None:  # only this pool closes its session, and drops it first
            self._open(loop)
        future = Answer(loop=loop)
        self._enqueue(_Job(url, body, headers, rng, decode, finish, future, fallback))
        return future

    async def post(self, url: str, body: bytes, headers: Mapping[str, str] | None,
                   rng: random.Random | Callable[[], random.Random],
                   decode: Callable[[bytes], T]) -> tuple[T, list[FaultReport], float]:
        """``submit`` awaited: (decoded, faults met, seconds of the good attempt); raises ``AgentFailure``."""
        return await self.submit(url, body, headers, rng, decode)

    def _enqueue(self, job: _Job) -> None:
        self._jobs.append(job)
        if len(self._jobs) <= self._looking:
            return  # a sender that just delivered an answer takes it before it would wait
        idle = self._idle
        while idle:
            wake = idle.pop()
            if not wake.done():
                wake.set_result(None)
                return
        if len(self._senders) < self.settings.concurrency:
            sender = _Sender()
            sender.task = asyncio.get_running_loop().create_task(self._send(sender))
            self._senders.append(sender)

    async def _send(self, me: _Sender) -> None:
        """A sender: take queued jobs in order and make one attempt of each."""
        jobs, loop = self._jobs, asyncio.get_running_loop()
        while True:
            if not jobs:
                wake = loop.create_future()
                self._idle.append(wake)
                await wake
                continue
            job = jobs.popleft()
            future = job.future
            if future.done():  # cancelled while queued
                continue
            try:
                value, seconds = await self._attempt(job, me)
            except _Fatal as exc:
                job.faults.append(exc.fault)
                log.warning(f"{self.who} request failed, not retryable", kind=exc.fault.kind, detail=exc.fault.detail)
                _fail(future, AgentFailure(f"{self.who} request failed: {exc.fault.detail}", job.faults))
            except _Retryable as exc:
                self._retry(job, exc)
            else:
                if not future.done():
                    try:
                        result = (value, job.faults, seconds) if job.finish is None else job.finish(
                            value, job.faults, seconds)
                    except Exception as exc:  # the agent's own bug: its episode reports it
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
            if not future.done():
                continue  # to be retried after its backoff
            # Whoever waits on the answer usually submits its next request at once (from ``then``) or on
            # the loop's next turn: counted as looking, this sender takes that request itself, in this
            # turn or, after yielding once, the next, instead of an idle sender being woken a turn later.
            self._looking += 1
            if future.then is not None:
                try:
                    future.then()
                except Exception as exc:  # the waiter's bug: reported, and this sender carries on
                    loop.call_exception_handler({"message": "an answer's then hook failed", "exception": exc,
                                                 "future": future})
            if not jobs:
                await asyncio.sleep(0)  # only closing the pool cancels a sender here, and it resets the count
            self._looking -= 1

    def _retry(self, job: _Job, exc: _Retryable) -> None:
        """Record a retryable fault; fail the job when it was the last attempt, else requeue it after the backoff."""
        job.faults.append(exc.fault)
        attempts = self.settings.retries + 1
        if job.attempt >= attempts:
            log.warning(f"{self.who} request failed, retries exhausted", kind=exc.fault.kind, detail=exc.fault.detail,
                        attempts=attempts)
            _fail(job.future, AgentFailure(f"{self.who} request failed after {attempts} attempts: {exc.fault.detail}",
                                           job.faults))
            return
        log.debug(f"{self.who} request failed, retrying", kind=exc.fault.kind, detail=exc.fault.detail,
                  attempt=job.attempt)
        if job.future.done():
            return
        if not isinstance(job.rng, random.Random):
            job.rng = job.rng()
        delay = backoff_delay(job.attempt, self.settings, job.rng, exc.wait or None)
        asyncio.get_running_loop().call_later(delay, self._requeue, job)

    def _requeue(self, job: _Job) -> None:
        if job.future.done():
            return
        if self._session is None or self._loop is not asyncio.get_running_loop():
            job.future.cancel()  # the pool closed during the backoff
        else:
            self._enqueue(job)

    def _timed_out(self, attempt: int) -> _Retryable:
        s = self.settings
        detail = (f"no answer within the timeouts (connect {s.connect_timeout:g}s, read {s.read_timeout:g}s, "
                  f"total {s.total_timeout:g}s)")
        return _Retryable(FaultReport(kind="timeout", detail=detail, attempt=attempt))

    async def _watch(self) -> None:
        """Every tick, expire the attempts that ran past ``total_timeout`` or idled past ``read_timeout``."""
        total, read, tick = self.settings.total_timeout, self.settings.read_timeout, self._tick
        sleep, now = asyncio.sleep, time.perf_counter
        while True:
            await sleep(tick)
            t = now()
            for s in self._senders:
                if not s.busy or s.expired:
                    continue
                resp = s.resp
                if resp is not None and resp.content.total_bytes != s.seen:  # headers or body bytes came
                    s.seen, s.mark = resp.content.total_bytes, t
                if t - s.start >= total or t - s.mark >= read:
                    s.expired = True
                    assert s.task is not None
                    s.task.cancel()

    async def _attempt(self, job: _Job, me: _Sender) -> tuple[Any, float]:
        """One attempt of ``job`` by sender ``me``: the decoded answer and the attempt's seconds, or
        _Retryable/_Fatal with its fault."""
        session, stats = self._session, self.stats
        assert session is not None
        job.attempt = attempt = job.attempt + 1
        me.start = me.mark = started = time.perf_counter()
        if not stats.attempts:
            stats.first = started
        stats.attempts += 1
        stats.in_flight += 1
        if stats.in_flight > stats.peak:
            stats.peak = stats.in_flight
        me.resp, me.seen, me.expired, me.busy = None, -1, False, True
        url, cap = job.url, self.settings.max_response_bytes
        try:
            async with session.post(url, data=job.body, headers=job.headers, allow_redirects=False) as resp:
                me.resp = resp
                if resp.status >= 300:
                    # Drain a little so the connection can be reused; the body is never put in the detail.
                    detail = f"HTTP {resp.status} from {_safe_url(url)}"
                    fault = FaultReport(kind="http_status", detail=self._scrub(detail), attempt=attempt)
                    if resp.status in RETRY_STATUSES:
                        wait = parse_retry_after(resp.headers.get("Retry-After")) if resp.status in (429, 503) else None
                        raise _Retryable(fault, wait or 0.0)
                    other = job.fallback(resp.status) if job.fallback is not None else None
                    if other is not None:  # the request refused as it was: once more in the form offered
                        job.body, job.fallback = other, None
                        raise _Retryable(fault)
                    raise _Fatal(fault)
                length = resp.content_length
                if length is not None and length > cap:
                    raise _Retryable(FaultReport(kind="limit", attempt=attempt, detail=(
                        f"response of {length} bytes exceeds max_response_bytes={cap}")))
                if length is not None and resp.headers.get("Content-Encoding", "identity") == "identity":
                    data = await resp.read()  # the declared length is within the cap: one read
                else:
                    buf = bytearray()
                    async for chunk in resp.content.iter_chunked(65536):
                        buf.extend(chunk)
                        if len(buf) > cap:
                            raise _Retryable(FaultReport(kind="limit", attempt=attempt, detail=(
                                f"response exceeds max_response_bytes={cap}")))
                    data = bytes(buf)
        except (_Retryable, _Fatal):
            raise
        except asyncio.CancelledError:
            task = me.task
            if not me.expired or task is None or task.uncancel() > 0:
                job.future.cancel()  # the pool is closing: nobody will answer this job
                raise
            raise self._timed_out(attempt) from None
        except asyncio.TimeoutError:  # aiohttp's connect timeout
            raise self._timed_out(attempt) from None
        except aiohttp.ClientSSLError as exc:
            # A certificate problem will not fix itself: fail at once and say why.
            raise _Fatal(FaultReport(kind="exception", detail=self._scrub(f"TLS error: {exc}"),
                                     attempt=attempt)) from None
        except (aiohttp.ClientError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise _Retryable(FaultReport(kind="exception", detail=self._scrub(detail), attempt=attempt)) from None
        finally:
            me.busy, me.resp = False, None
            stats.in_flight -= 1
            stats.last = ended = time.perf_counter()
            stats.busy += ended - started
        try:
            return job.decode(data), ended - started
        except ProtocolError as exc:
            raise _Retryable(FaultReport(kind="protocol", detail=self._scrub(str(exc)), attempt=attempt)) from None


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
