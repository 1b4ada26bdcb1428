"""HTTP agent overhead: dialogsim's requests/s through the real engine against a raw aiohttp client loop.

Starts one trivial local agent server in its own process (it answers every dialogsim/1 request with
the same small JSON), then, for each concurrency (16 and 64 by default), measures in this process:

- dialogsim: ``start_run`` (the code behind ``dialogsim run``) with built-in scenarios, the scripted user
  and ``--agent http:URL`` (registered under a bench name that keeps the factory, for its pool's figures)
  at ``--concurrency C --agent-concurrency C``, think time and latency 0 so that all C episodes can have a
  call in flight at once, events written to a real run directory;
- raw: C asyncio tasks posting a native request of the same shape through one aiohttp session, each one
  encoded with msgspec and its answer decoded into the protocol's response Struct (the client's essential work).

Prints requests/s of each and their ratio (target >= 0.8): medians over ``--rounds`` paired rounds, plus
the agent layer alone (``NativeHttpAgent.respond`` in a loop, no engine). ``--with-think`` adds runs against
a 20 ms endpoint with think time 0 and with the default think/latency models. Every figure comes with the
requests in flight on average (wire time over wall span, from the agent's pool): the concurrency actually
achieved, so a driver that serialises live calls shows ~1 there whatever ``--concurrency`` says; and the
client's CPU time per request (getrusage of this process), which other load on the machine hardly moves.
``--single run|raw`` makes one measurement of one side and nothing else, to count it under valgrind
(the server is a child process, which valgrind leaves alone): the difference between two ``--requests``
counts is the per-request cost without start-up, e.g.

    valgrind --tool=cachegrind --cache-sim=yes --LL=1048576,8,64 python bench/bench_http.py --single run --requests 3000

    python bench/bench_http.py [--requests 10000] [--concurrency 16 64] [--rounds 3] [--with-think] [--single run|raw]
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
SLOW = 0.02  # seconds the /slow endpoint waits before answering


def serve(port: int) -> None:
    """The trivial agent: read the body, answer a constant (run in the server subprocess)."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(SLOW)  # a model-like endpoint: most of the time is spent waiting
        return await handle(request)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/", handle)
        app.router.add_post("/slow", slow)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        print(f"listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def start_server(kind: str) -> tuple[subprocess.Popen, str]:
    if kind == "trivial":
        cmd = [sys.executable, __file__, "--serve"]
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
    from dialogsim.agents.http.native import http_agent_factory
    from dialogsim.engine.events import AgentTurn, UserTurn
    from dialogsim.engine.contracts import EpisodeContext
    from dialogsim.scenarios.builtin import BuiltinScenarios

    sc = BuiltinScenarios()
    scenario, _ = sc.draw(1, 0)
    factory = http_agent_factory(url, None, {"concurrency": concurrency})
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
    from dialogsim.agents.http.native import http_agent_factory

    factory = http_agent_factory(arg, scenarios, options)
    _pools.append(factory.pool)
    return factory


def dialogsim_run(url: str, concurrency: int, episodes: int, durability: str, think: str = "0",
                  latency: str = "0") -> tuple[float, int, float, float]:
    """Requests/s of a real run (start_run), the agent requests it made, how many were in flight on average
    and the CPU seconds per request."""
    from dialogsim.engine.log import read_events
    from dialogsim.engine.registry import register
    from dialogsim.engine.session import RunConfig, start_run

    register("agent", "bench-http", _capturing_factory)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        config = RunConfig(scenarios="builtin", user="scripted", agent=f"bench-http:{url}", episodes=episodes,
                           concurrency=concurrency, think=think, latency=latency, durability=durability,
                           agent_options={"concurrency": concurrency})
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
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--server", choices=["trivial", "serve-agent"], default="trivial")
    parser.add_argument("--durability", default="batch", choices=["none", "batch", "episode"])
    parser.add_argument("--rounds", type=int, default=3, help="paired measurement rounds per concurrency")
    parser.add_argument("--with-think", action="store_true",
                        help="also measure against a 20 ms endpoint with think time 0 and with the default models")
    parser.add_argument("--single", choices=["run", "raw"],
                        help="one measurement of one side at the first concurrency, no warm-up (for valgrind)")
    args = parser.parse_args()
    if args.serve:
        serve(0)
        return
    from dialogsim.engine.oplog import configure_logging

    configure_logging("console", "warning")
    proc, url = start_server(args.server)
    try:
        request = sample_request()
        per_episode = 10 / 3  # built-in scenarios: 2, 5 and 3 agent turns
        episodes = max(1, int(args.requests / per_episode))
        if args.single:
            c = args.concurrency[0]
            if args.single == "run":
                rate, n, _, _ = dialogsim_run(url, c, episodes, args.durability)
            else:
                n = args.requests
                rate, _ = asyncio.run(raw_loop(url, c, n, request))
            print(f"{args.single}: {n} requests at concurrency {c}, {rate:.0f} req/s")
            return
        asyncio.run(raw_loop(url, 8, 500, request))  # warm-up: connections, server code paths
        dialogsim_run(url, 8, 150, args.durability)
        print(f"server: {args.server} ({url}), {os.cpu_count()} CPUs, body {len(msgspec.json.encode(request))} bytes, "
              f"durability {args.durability}, {args.rounds} paired rounds of {episodes} episodes")
        for c in args.concurrency:
            # Paired rounds, each measuring all three back to back: on a shared machine the load drifts, and
            # the median of per-round ratios is far steadier than a ratio of two separate bests.
            rates: dict[str, list[float]] = {"run": [], "raw": [], "layer": []}
            flight: dict[str, list[float]] = {"run": [], "raw": [], "layer": []}
            cpu: dict[str, list[float]] = {"run": [], "raw": [], "layer": []}
            ratios, layer_ratios, n = [], [], 0
            for _ in range(args.rounds):
                rate, n, f_run, c_run = dialogsim_run(url, c, episodes, args.durability)
                t0 = cpu_seconds()
                base, f_raw = asyncio.run(raw_loop(url, c, n, request))
                t1 = cpu_seconds()
                alone, f_layer = asyncio.run(agent_loop(url, c, n))
                t2 = cpu_seconds()
                for key, r, f, u in (("run", rate, f_run, c_run), ("raw", base, f_raw, (t1 - t0) / n),
                                     ("layer", alone, f_layer, (t2 - t1) / n)):
                    rates[key].append(r), flight[key].append(f), cpu[key].append(u)
                ratios.append(rate / base), layer_ratios.append(alone / base)
            med = {k: (statistics.median(rates[k]), statistics.median(flight[k]), 1e6 * statistics.median(cpu[k]))
                   for k in rates}
            print(f"concurrency {c:3d}: dialogsim run {med['run'][0]:7.0f} req/s | raw aiohttp {med['raw'][0]:7.0f} "
                  f"req/s | ratio {statistics.median(ratios):.2f} (rounds {min(ratios):.2f}..{max(ratios):.2f}; "
                  f"target >= 0.8) | agent layer alone {med['layer'][0]:7.0f} req/s, ratio "
                  f"{statistics.median(layer_ratios):.2f} | {n} requests per round")
            print(f"                 in flight on average (of {c}) / client CPU per request: dialogsim run "
                  f"{med['run'][1]:5.1f} / {med['run'][2]:4.0f} us | raw aiohttp {med['raw'][1]:5.1f} / "
                  f"{med['raw'][2]:4.0f} us | agent layer alone {med['layer'][1]:5.1f} / {med['layer'][2]:4.0f} us")
        if args.with_think and args.server == "trivial":
            c = args.concurrency[0]
            few = max(1, episodes // 10)
            slow = url.rstrip("/") + "/slow"
            flat, n, f_flat, _ = dialogsim_run(slow, c, few, args.durability)
            spread, _, f_spread, _ = dialogsim_run(slow, c, few, args.durability, "uniform:1,4", "uniform:0.2,0.8")
            raw_slow, f_raw = asyncio.run(raw_loop(slow, c, n, request))
            print(f"endpoint answering in {SLOW * 1000:.0f} ms, concurrency {c}, {n} requests (req/s, in flight on "
                  f"average): raw aiohttp {raw_slow:6.0f}, {f_raw:4.1f} | dialogsim think 0 {flat:6.0f}, "
                  f"{f_flat:4.1f} | dialogsim think uniform:1,4 latency uniform:0.2,0.8 {spread:6.0f}, {f_spread:4.1f}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
