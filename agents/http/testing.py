"""Loopback HTTP agent servers for tests: a well-behaved one and a fault-injecting one, both protocols.

Users can test their own HTTP agents and reliability settings the same way dialogsim's tests do:

    with serve_in_thread(faulty_app(EchoAgent, "native")) as url:
        ... dialogsim run --agent http:{url} ...

``EchoAgent`` is a tiny deterministic agent with per-episode state (it counts the user turns it has
seen and calls the scenario's first tool on the opening turn), so a server that lost or duplicated
state would show it in the utterances.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from aiohttp import web

from ...engine.contracts import AgentReply, EpisodeContext, Observation, ToolCall
from ...engine.events import Usage
from ...engine.seeding import stable_hash
from .server import HOST, make_app, start_site

INJECTED = web.AppKey("injected", list)
STATS = web.AppKey("stats", dict)
FAULTS = ("500", "429", "malformed", "oversized", "oversized_cl", "reset", "drip", "hang")


class EchoAgent:
    """Echoes the user, numbering its turns; calls the first tool on the opening turn and reports results."""

    deterministic = True

    def start(self, ctx: EpisodeContext) -> None:
        """Begin an episode with a fresh turn counter."""
        self.ctx = ctx
        self.seen = 0

    def respond(self, obs: Observation) -> AgentReply:
        """Call a tool on the first turn, otherwise echo; end when the user ends."""
        usage = Usage(input_tokens=len(obs.user.utterance.split()), output_tokens=3)
        if obs.tool_results:
            rows = sum(len(r.results or []) for r in obs.tool_results)
            errors = sum(r.error is not None for r in obs.tool_results)
            return AgentReply(utterance=f"#{self.seen} found {rows} results, {errors} errors", usage=usage,
                              end=obs.user.end)
        self.seen += 1
        if self.seen == 1 and self.ctx.tools:
            tool = self.ctx.tools[0]
            return AgentReply(tool_calls=[ToolCall(service=tool.service, method=tool.method, parameters={})])
        return AgentReply(utterance=f"#{self.seen} you said: {obs.user.utterance}", usage=usage, end=obs.user.end)


@contextmanager
def serve_in_thread(app: web.Application, host: str = "127.0.0.1", port: int = 0,
                    ssl_context: ssl.SSLContext | None = None) -> Iterator[str]:
    """Run ``app`` on its own event loop in a daemon thread; yields the base URL, stops on exit."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            box["runner"], box["port"] = loop.run_until_complete(start_site(app, host, port, ssl_context))
        except BaseException as exc:  # surfaced to the caller below
            box["error"] = exc
        started.set()
        if "error" not in box:
            loop.run_forever()

    thread = threading.Thread(target=run, name="dialogsim-test-server", daemon=True)
    thread.start()
    started.wait()
    if "error" in box:
        raise box["error"]
    try:
        yield f"{'https' if ssl_context else 'http'}://{host}:{box['port']}"
    finally:
        asyncio.run_coroutine_threadsafe(_stop(box["runner"]), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


async def _stop(runner: web.AppRunner) -> None:
    """Stop serving, then end the handlers still waiting (a hanging fault's), so that none is destroyed pending."""
    await runner.cleanup()
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


def first_attempt_faults(faults: tuple[str, ...] = FAULTS) -> Callable[[str, int], str | None]:
    """A fault plan: the first attempt of each request gets a fault chosen by a hash of its key
    (about one request in two stays clean), later attempts succeed."""

    def plan(key: str, attempt: int) -> str | None:
        if attempt > 1:
            return None
        pick = stable_hash("fault", key) % (2 * len(faults))
        return faults[pick] if pick < len(faults) else None

    return plan


def faulty_app(make_agent: Callable[[], Any], protocol: str = "native", *,
               plan: Callable[[str, int], str | None] | None = None, fail_always: set[str] = frozenset(),
               hang_seconds: float = 3.0, drip_chunks: int = 30, drip_delay: float = 0.1,
               oversize: int = 256 * 1024, retry_after: str = "0", delay: float = 0.0) -> web.Application:
    """A server whose answers come from ``make_agent`` but which injects faults per ``plan(key, attempt)``.

    The key of a request is "episode/turn/step" (native) or a digest of its messages (openai); episodes
    in ``fail_always`` get a 500 on every attempt; every answer waits ``delay`` seconds first.
    ``app[INJECTED]`` lists (key, attempt, fault); ``app[STATS]`` counts requests, the most in
    flight at once, and the headers seen (names only, plus the Authorization values for key tests).
    """
    plan = plan or first_attempt_faults()
    inner = make_app(make_agent, protocol)
    handler = next(r.handler for r in inner.router.routes() if r.method == "POST")
    attempts: dict[str, int] = {}
    injected: list[tuple[str, int, str]] = []
    stats: dict[str, Any] = {"requests": 0, "inflight": 0, "max_inflight": 0, "authorization": set()}

    async def handle(request: web.Request) -> web.StreamResponse:
        stats["requests"] += 1
        stats["inflight"] += 1
        stats["max_inflight"] = max(stats["max_inflight"], stats["inflight"])
        if "Authorization" in request.headers:
            stats["authorization"].add(request.headers["Authorization"])
        try:
            if delay:
                await asyncio.sleep(delay)
            return await answer(request)
        finally:
            stats["inflight"] -= 1

    async def answer(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw)
        if protocol == "native":
            episode = body.get("episode_id", "")
            key = f"{episode}/{body.get('turn_index')}/{body.get('step', 0)}"
        else:
            episode = str(body.get("user", ""))
            key = str(stable_hash(json.dumps(body.get("messages"), sort_keys=True)))
        attempts[key] = attempt = attempts.get(key, 0) + 1
        fault = "500" if episode in fail_always else plan(key, attempt)
        if fault is None:
            return await handler(request)
        injected.append((key, attempt, fault))
        return await inject_fault(request, fault, handler, hang_seconds, drip_chunks, drip_delay, oversize,
                                  retry_after)

    app = web.Application(client_max_size=inner._client_max_size)
    app[INJECTED] = injected
    app[STATS] = stats
    app[HOST] = inner[HOST]
    app.router.add_post(next(r.resource.canonical for r in inner.router.routes() if r.method == "POST"), handle)
    return app


async def inject_fault(request: web.Request, fault: str, handler: Callable[[web.Request], Any], hang: float = 3.0,
                       chunks: int = 30, delay: float = 0.1, oversize: int = 256 * 1024,
                       retry_after: str = "0") -> web.StreamResponse:
    """Answer ``request`` with ``fault`` (one of FAULTS) instead of, or around, ``handler``'s answer."""
    try:
        return await _inject_fault(request, fault, handler, hang, chunks, delay, oversize, retry_after)
    except ConnectionError:  # the client gave up first (its timeout or size cap): that is the point
        return web.Response(status=499)


async def _inject_fault(request: web.Request, fault: str, handler: Callable[[web.Request], Any], hang: float,
                        chunks: int, delay: float, oversize: int, retry_after: str) -> web.StreamResponse:
    if fault == "500":
        return web.json_response({"error": {"message": "injected"}}, status=500)
    if fault == "429":
        return web.json_response({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": retry_after})
    if fault == "malformed":
        return web.Response(body=b'{"utterance": "cut off', content_type="application/json")
    if fault == "oversized_cl":
        return web.Response(body=b'{"utterance": "' + b"x" * oversize + b'"}', content_type="application/json")
    if fault == "oversized":
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b'{"utterance": "')
        for _ in range(oversize // 8192 + 1):
            await resp.write(b"x" * 8192)
        await resp.write(b'"}')
        await resp.write_eof()
        return resp
    if fault == "reset":
        # SO_LINGER 0 makes close() send an RST: the client sees a reset connection, not a clean EOF.
        sock = request.transport.get_extra_info("socket") if request.transport else None
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError()
    if fault == "hang":
        await asyncio.sleep(hang)
        return await handler(request)
    if fault == "drip":
        # A valid answer, a few bytes at a time: each gap is under the read timeout, the whole is not.
        good = await handler(request)
        payload = good.body if isinstance(good.body, bytes) else b""
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = len(payload)
        await resp.prepare(request)
        step = max(1, len(payload) // chunks)
        for i in range(0, len(payload), step):
            await resp.write(payload[i:i + step])
            await asyncio.sleep(delay)
        await resp.write_eof()
        return resp
    raise ValueError(f"unknown fault {fault!r}")


def run_batch(make_agent: Any, episodes: int = 6, *, scenarios: Any = None, user: Any = None, seed: int = 0,
              concurrency: int = 4, max_turns: int = 50, think: Any = None, latency: Any = None) -> Any:
    """Run episodes through the real engine into a MemoryLog, closing the agent factory's session after.

    ``dialogsim.testing.simulate`` does not close factories: an HTTP agent factory given to it leaves its
    aiohttp session open (its pool only closes it when the loop shuts down), so use this for HTTP agents.
    ``think`` and ``latency`` are ``engine.timing.Delay`` models (default: none).
    """
    from ...scenarios.builtin import BuiltinScenarios
    from ...users.scripted import ScriptedUser
    from ...engine.runner import Batch, BatchSettings, Job
    from ...testing import MemoryLog
    from ...engine.timing import Delay

    log = MemoryLog()
    none = Delay("fixed", 0.0)
    batch = Batch(run_id="test-run", scenarios=scenarios or BuiltinScenarios(), make_user=user or ScriptedUser,
                  make_agent=make_agent, sink=log,
                  settings=BatchSettings(seed=seed, concurrency=concurrency, max_turns=max_turns, think=think or none,
                                         latency=latency or none))

    async def go() -> None:
        try:
            await batch.run([Job(i) for i in range(episodes)])
        finally:
            close = getattr(make_agent, "aclose", None)
            if close is not None:
                await close()

    asyncio.run(go())
    return log
