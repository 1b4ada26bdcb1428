"""HTTP agent overhead: dialogsim's requests/s through the real engine against a raw aiohttp client loop.

Starts one local agent server in its own process (it answers every dialogsim/1 request with the same
small JSON, after ``--delay`` ms: 0 by default, the trivial server), then, for each concurrency C (16
and 64 by default), measures in this process:

- dialogsim: ``start_run`` (the code behind ``dialogsim run``) with built-in scenarios, the scripted user
  and ``--agent http:URL`` (registered under a bench name that keeps the factory, for its pool's figures)
  at ``--agent-concurrency C`` and the default episodes in flight (4 per agent slot; ``--in-flight N``
  sets ``--concurrency N``), think time and latency 0, events written to a real run directory; with a
  delay, also with the default think and latency models;
- raw: C asyncio tasks posting a native request of the same shape through one aiohttp session, each one
  encoded with msgspec and its answer decoded into the protocol's response Struct (the client's essential work).

Prints requests/s of each and their ratio (targets: none against the trivial server, where the ratio is
tracked; >= 0.95 with think time 0 and >= 0.9 with the default models against a 20 ms server at C = 64):
medians over ``--rounds`` paired rounds, plus the agent layer alone (``NativeHttpAgent.respond`` in a
loop, no engine). Every figure comes with the requests in flight on average (wire time over wall span,
from the agent's pool): the concurrency actually achieved, so a driver that serialises live calls shows ~1
there whatever C is; and the client's CPU time per request (getrusage of this process), which other load
on the machine hardly moves. ``--single run|raw`` makes one measurement of one side and nothing else, to
count it under valgrind (the server is a child process, which valgrind leaves alone): the difference
between two ``--requests`` counts is the per-request cost without start-up, e.g.

    valgrind --tool=cachegrind --cache-sim=yes --LL=1048576,8,64 python bench/bench_http.py --single run --requests 3000

    python bench/bench_http.py [--requests 10000] [--concurrency 16 64] [--rounds 3] [--delay MS] [--in-flight N]
                               [--single run|raw]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ANSWER = b'{"protocol": "dialogsim/1", "utterance": "Sure, done.", "end": false}'


def serve(port: int, delay: float) -> None:
    """The trivial agent: read the body, wait ``delay`` seconds, answer a constant (run in the server subprocess)."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        if delay:
            await asyncio.sleep(delay)  # a model-like endpoint: most of the time is spent waiting
        return web.Response(body=ANSWER, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        print(f"listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def start_server(kind: str, delay: float) -> tuple[subprocess.Popen, str]:
    if kind == "trivial":
        cmd = [sys.executable, __file__, "--serve", "--delay", str(delay)]
    else:
        cmd = [sys.executable, "-m", "dialogsim.engine.cli", "serve-agent", "--agent", "scripted", "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    return proc, line.split()[-1]


def cpu_seconds() -> float:
    """User + system CPU time of this process (the server runs in its own)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def sample_request() -> object:
    """A native request like the ones the engine sends mid-episode (built-in scenario, third user turn)."""
    from dialogsim.agents.http.native import AgentMessage, NativeRequest, ScenarioInfo, UserMessage
    from dialogsim.scenarios.builtin import BuiltinScenarios

    sc = BuiltinScenarios()
    scenario, _ = sc.draw(1, 0)
    lines = [u if isinstance(u, str) else u["utterance"] for u in scenario.data["user"]]
    msgs = []
    for i, text in enumerate(lines[:3]):
        msgs.append(UserMessage(turn=2 * i, utterance=text))
        if i < 2:
            msgs.append(AgentMessage(turn=2 * i + 1, utterance="Sure, done."))
    return NativeRequest(episode_id="e000001", turn_index=5, tools=sc.tools(scenario), messages=msgs, user=msgs[-1],
                         scenario=ScenarioInfo(id=scenario.id, kind=scenario.kind, data=scenario.data), seed=1)


async def raw_loop(url: str, concurrency: int, total: int, request: object) -> tuple[float, float]:
    """Requests/s of C tasks posting ``request`` through one session until ``total`` are done, and the
    requests in flight on average.

    Each request does the essential work of dialogsim's client and no more: encode the request with
    msgspec, post it with the session's headers, decode the answer into the protocol's response Struct.
    """
    import aiohttp

    from dialogsim.agents.http.native import NativeResponse

    encode = msgspec.json.Encoder().encode
    decode = msgspec.json.Decoder(NativeResponse).decode
    left = total
    busy = 0.0
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), headers=headers) as session:

        async def worker() -> None:
            nonlocal left, busy
            while left > 0:
                left -= 1
                sent = time.perf_counter()
                async with session.post(url, data=encode(request)) as resp:
                    decode(await resp.read())
                busy += time.perf_counter() - sent

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
        return total / elapsed, busy / elapsed


async def agent_loop(url: str, concurrency: int, total: int) -> tuple[float, float]:
    """Requests/s of C tasks calling NativeHttpAgent.respond directly (the agent layer without the engine),
    and the requests in flight on average."""
    import random

    from dialogsim.engine.contracts import Observation
    from dialogsim.agents.http.native import NativeAgentFactory
    from dialogsim.engine.events import AgentTurn, UserTurn
    from dialogsim.engine.contracts import EpisodeContext
    from dialogsim.scenarios.builtin import BuiltinScenarios

    sc = BuiltinScenarios()
    scenario, _ = sc.draw(1, 0)
    factory = NativeAgentFactory(url, None, {"concurrency": concurrency})
    left = total

    async def worker(k: int) -> None:
        # Episodes of 5 exchanges whose history grows as the engine's does, so that request building costs
        # what it costs in a run (each message encoded once per episode).
        nonlocal left
        history: list = []
        while left > 0:
            left -= 1
            if len(history) >= 10:
                history = []
            if not history:
                agent = factory()
                agent.start(EpisodeContext(episode_id=f"e{k}-{left}", scenario=scenario, tools=sc.tools(scenario),
                                           rng=random.Random(k), seed=k))
            turn = len(history)
            said = UserTurn(run="r", ep=f"e{k}", seq=turn, t=0.0, wall=0, turn=turn, utterance="Hello.")
            history.append(said)
            reply = await agent.respond(Observation(user=said, history=history, turn_index=turn + 1))
            history.append(AgentTurn(run="r", ep=f"e{k}", seq=turn + 1, t=0.0, wall=0, turn=turn + 1,
                                     utterance=reply.utterance))

    start = time.perf_counter()
    try:
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
    finally:
        await factory.aclose()
    return total / (time.perf_counter() - start), factory.pool.stats.mean_in_flight


_pools: list = []  # the pool of each run's agent factory, for its in-flight figures


def _capturing_factory(arg: str | None, scenarios: object, options: dict) -> object:
    """``http:`` as registered, keeping the factory's pool for the figures."""
    from dialogsim.agents.http.native import NativeAgentFactory

    factory = NativeAgentFactory(arg, scenarios, options)
    _pools.append(factory.pool)
    return factory


def dialogsim_run(url: str, concurrency: int, episodes: int, durability: str, in_flight: int | None,
                  timed: bool = False) -> tuple[float, int, float, float]:
    """Requests/s of a real run (start_run) with ``concurrency`` agent request slots and ``in_flight``
    episodes at once (None: the run's default), think time and latency 0 or (``timed``) the default
    models: the agent requests it made, how many were in flight on average and the CPU seconds per request."""
    from dialogsim.engine.log import read_events
    from dialogsim.engine.registry import register
    from dialogsim.engine.session import RunConfig, start_run

    register("agent", "bench-http", _capturing_factory)
    times = {} if timed else {"think": "0", "latency": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        config = RunConfig(scenarios="builtin", user="scripted", agent=f"bench-http:{url}", episodes=episodes,
                           concurrency=in_flight, durability=durability, agent_options={"concurrency": concurrency},
                           **times)
        cpu, start = cpu_seconds(), time.perf_counter()
        result = start_run(out, config, progress=False)
        elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu
        assert result.status == "completed", result
        requests = sum(1 for _ in read_events(out, types={"agent_turn"}))
    return requests / elapsed, requests, _pools.pop().stats.mean_in_flight, cpu / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=10000, help="agent requests per measurement")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64],
                        help="agent request slots (raw: tasks); each value is measured in turn")
    parser.add_argument("--in-flight", type=int,
                        help="episodes in flight in dialogsim's runs (default: the run's default for a live agent)")
    parser.add_argument("--delay", type=float, default=0.0, metavar="MS",
                        help="the server waits this long before each answer (default 0: the trivial server); "
                             "above 0, each round also runs dialogsim with the default think and latency models")
    parser.add_argument("--server", choices=["trivial", "serve-agent"], default="trivial")
    parser.add_argument("--durability", default="batch", choices=["none", "batch", "episode"])
    parser.add_argument("--rounds", type=int, default=3, help="paired measurement rounds per concurrency")
    parser.add_argument("--single", choices=["run", "raw"],
                        help="one measurement of one side at the first concurrency, no warm-up (for valgrind)")
    args = parser.parse_args()
    if args.serve:
        serve(0, args.delay / 1000)
        return
    if args.delay and args.server != "trivial":
        parser.error("--delay is the trivial server's")
    from dialogsim.engine.oplog import configure_logging

    configure_logging("console", "warning")
    proc, url = start_server(args.server, args.delay)
    try:
        request = sample_request()
        per_episode = 10 / 3  # built-in scenarios: 2, 5 and 3 agent turns
        episodes = max(1, int(args.requests / per_episode))
        if args.single:
            c = args.concurrency[0]
            if args.single == "run":
                rate, n, _, _ = dialogsim_run(url, c, episodes, args.durability, args.in_flight)
            else:
                n = args.requests
                rate, _ = asyncio.run(raw_loop(url, c, n, request))
            print(f"{args.single}: {n} requests at concurrency {c}, {rate:.0f} req/s")
            return
        asyncio.run(raw_loop(url, 8, 500, request))  # warm-up: connections, server code paths
        dialogsim_run(url, 8, 150, args.durability, 8)
        print(f"server: {args.server} ({url}, answers after {args.delay:g} ms), {os.cpu_count()} CPUs, load "
              f"{os.getloadavg()[0]:.2f}, body {len(msgspec.json.encode(request))} bytes, durability "
              f"{args.durability}, {args.rounds} paired rounds of {episodes} episodes, episodes in flight "
              f"{args.in_flight or 'by default'}")
        sides = {"run": "dialogsim run", "timed": "dialogsim run, default think/latency", "raw": "raw aiohttp",
                 "layer": "agent layer alone"}
        if not args.delay:
            del sides["timed"]
        for c in args.concurrency:
            # Paired rounds, each measuring every side back to back: on a shared machine the load drifts, and
            # the median of per-round ratios is far steadier than a ratio of two separate bests.
            rates: dict[str, list[float]] = {k: [] for k in sides}
            flight: dict[str, list[float]] = {k: [] for k in sides}
            cpu: dict[str, list[float]] = {k: [] for k in sides}
            n = 0
            for _ in range(args.rounds):
                rate, n, f, u = dialogsim_run(url, c, episodes, args.durability, args.in_flight)
                rates["run"].append(rate), flight["run"].append(f), cpu["run"].append(u)
                if "timed" in sides:
                    rate, _, f, u = dialogsim_run(url, c, episodes, args.durability, args.in_flight, timed=True)
                    rates["timed"].append(rate), flight["timed"].append(f), cpu["timed"].append(u)
                t0 = cpu_seconds()
                rate, f = asyncio.run(raw_loop(url, c, n, request))
                t1 = cpu_seconds()
                rates["raw"].append(rate), flight["raw"].append(f), cpu["raw"].append((t1 - t0) / n)
                rate, f = asyncio.run(agent_loop(url, c, n))
                rates["layer"].append(rate), flight["layer"].append(f), cpu["layer"].append((cpu_seconds() - t1) / n)
            print(f"concurrency {c}, {n} requests per round, raw aiohttp {statistics.median(rates['raw']):.0f} req/s; "
                  f"ratio to raw: median of the rounds' (their range); requests in flight on average (of {c}); "
                  f"client CPU per request:")
            for key, name in sides.items():
                ratios = [r / b for r, b in zip(rates[key], rates["raw"])]
                ratio = "" if key == "raw" else \
                    f" ratio {statistics.median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f})"
                print(f"  {name:38s} {statistics.median(rates[key]):7.0f} req/s{ratio:22s} | in flight "
                      f"{statistics.median(flight[key]):5.1f} | {1e6 * statistics.median(cpu[key]):4.0f} us")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
