"""The log as the source of truth: verify and replay against the original run, and a fork's copied prefix
against re-simulating it.

1. SGD (the bundled pack, agenda user against the schema agent, default think and latency models): a run of
   ``--episodes`` into a run directory, then ``verify`` of it and ``replay`` of its users against the same agent,
   in this process, ``--rounds`` times; prints episodes/s of each and the ratios to the run (targets >= 0.8).
2. Forks copying their first ``--at-turn`` turns against forks at turn 0, which re-simulate those turns (the
   same participants, the same parents, the same turns simulated after the fork point):
   a. a live agent on a local server answering after ``--delay`` ms (its copied replies are read back, never
      asked again) and a scripted user with 20 lines;
   b. the scripted user and agent of (a) in process: they take the copied turns in one ``warm`` call;
   c. the SGD user and agent, which take the copied turns in one ``warm`` call each (they fold the logged acts and
      tool results into their state without realizing a word; the user's draws are read from its logged answers):
      what is left of the copy's cost is reading and decoding the parent's log.
   Prints seconds of each and the ratio re-simulating / copying (> 1: the copy is cheaper).

    python bench/bench_prefix.py [--episodes 2000] [--rounds 3] [--at-turn 20] [--delay 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from dialogsim.agents.scripted import ScriptLine, ScriptedAgent
from dialogsim.engine import registry
from dialogsim.engine.contracts import Scenario, UserReply
from dialogsim.engine.derive import Source
from dialogsim.engine.log import RunDir, read_episodes
from dialogsim.engine.runner import Batch, BatchSettings, Branch, Job
from dialogsim.engine.session import RunConfig, recorded_config, start_run
from dialogsim.engine.tape import fork_at_turn
from dialogsim.engine.timing import Delay
from dialogsim.engine.verify import verify_run
from dialogsim.scenarios.builtin import BuiltinScenarios
from dialogsim.testing import MemoryLog
from dialogsim.users.scripted import ScriptedUser

EXCHANGES = 20
LINES = [UserReply(utterance=f"This is user line number {i}.", end=i == EXCHANGES - 1) for i in range(EXCHANGES)]
AGENT = [ScriptLine(utterance=f"And this is the agent's answer {i}.") for i in range(EXCHANGES)]
SCENARIOS = BuiltinScenarios([Scenario(id="long", kind="scripted", data={})], {})
SETTINGS = BatchSettings(concurrency=64, think=Delay("uniform", 1, 4), latency=Delay("uniform", 0.2, 0.8))


def timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def sgd_rounds(work: Path, episodes: int, rounds: int) -> None:
    """Part 1: run, verify, replay."""
    registry.load_scenarios("sgd")  # the pack, loaded before any clock starts
    runs, verifies, replays = [], [], []
    for r in range(rounds):
        run = work / f"run{r}"
        runs.append(timed(lambda: start_run(run, RunConfig(episodes=episodes, seed=r, durability="batch"),
                                            progress=False)))
        verified = []
        verifies.append(timed(lambda: verified.append(verify_run(run, progress=False))))
        assert not verified[0].diverged, verified[0].diverged
        source = Source(command="replay", run=str(run), run_id=RunDir.open(run).manifest["run_id"])
        config = msgspec.structs.replace(recorded_config(RunDir.open(run)), source=source, concurrency=None)
        replays.append(timed(lambda: start_run(work / f"replay{r}", config, progress=False)))
        print(f"  round {r + 1}: run {episodes / runs[-1]:7.0f} ep/s   verify {episodes / verifies[-1]:7.0f} ep/s "
              f"(ratio {runs[-1] / verifies[-1]:.2f})   replay {episodes / replays[-1]:7.0f} ep/s "
              f"(ratio {runs[-1] / replays[-1]:.2f})")
    ratio = lambda xs: statistics.median(a / b for a, b in zip(runs, xs))
    print(f"SGD, {episodes} episodes, median of {rounds} rounds: verify/run {ratio(verifies):.2f}, "
          f"replay/run {ratio(replays):.2f} (targets >= 0.8)")


def batch_forks(make_agent, parents: MemoryLog, at_turn: int) -> float:
    """Seconds to run one fork of every parent copying ``at_turn`` turns (the scripted user, ``make_agent``)."""
    jobs = []
    for events in _episodes(parents):
        fork = fork_at_turn(events, at_turn, "f")
        if fork is not None:
            jobs.append(Job(len(jobs), ep=events[0].ep + "-f", fork=fork))
    batch = Batch(run_id="forks", scenarios=SCENARIOS, make_user=lambda: ScriptedUser(LINES), make_agent=make_agent,
                  settings=SETTINGS, sink=MemoryLog())
    return timed(lambda: asyncio.run(batch.run(jobs)))


def _episodes(log: MemoryLog) -> list[list]:
    out: dict[str, list] = {}
    for e in log:
        if e.ep:
            out.setdefault(e.ep, []).append(e)
    return list(out.values())


def parents_of(make_agent, episodes: int) -> MemoryLog:
    log = MemoryLog()
    batch = Batch(run_id="parents", scenarios=SCENARIOS, make_user=lambda: ScriptedUser(LINES), make_agent=make_agent,
                  settings=SETTINGS, sink=log)
    asyncio.run(batch.run([Job(i) for i in range(episodes)]))
    return log


def fork_comparison(name: str, resimulate, copy) -> None:
    again, copied = resimulate(), copy()
    print(f"  {name:<46} re-simulating {again:6.2f} s   copying {copied:6.2f} s   ratio {again / copied:.2f}")


def live_agent(delay_ms: float, episodes: int, at_turn: int) -> None:
    """Part 2a and 2b."""
    bench_http = Path(__file__).with_name("bench_http.py")
    proc = subprocess.Popen([sys.executable, str(bench_http), "--serve", "--delay", str(delay_ms)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = proc.stdout.readline().strip().split()[-1]
        factory = registry.agent_factory(f"http:{url}", SCENARIOS, {"concurrency": 16})
        parents = parents_of(factory, episodes)
        fork_comparison(f"live agent answering after {delay_ms:g} ms", lambda: batch_forks(factory, parents, 0),
                        lambda: batch_forks(factory, parents, at_turn))
        asyncio.run(factory.aclose())
    finally:
        proc.kill()
        proc.wait()
    make = lambda: ScriptedAgent(AGENT)
    parents = parents_of(make, episodes * 25)  # in process they are quick: more of them, to measure
    fork_comparison("scripted user and agent (warm)", lambda: batch_forks(make, parents, 0),
                    lambda: batch_forks(make, parents, at_turn))


def sgd_forks(work: Path, episodes: int, at_turn: int) -> None:
    """Part 2c: forks of an SGD run, through start_run (the code behind ``dialogsim fork``)."""
    start_run(work / "parents", RunConfig(episodes=episodes, seed=7, durability="batch"), progress=False)
    run = RunDir.open(work / "parents")
    config = recorded_config(run)
    source = Source(command="fork", run=str(run.path), run_id=run.manifest["run_id"])
    # the parents with a turn after the copy are forked both ways
    turns = lambda events: sum(type(e).__name__ in ("UserTurn", "AgentTurn") for e in events)
    short = [e[0].ep for e in _episodes_of(run) if turns(e) <= at_turn]  # a fork needs a turn after its copy
    source.episodes = sorted({e[0].ep for e in _episodes_of(run)} - set(short))

    def forks(k: int) -> float:
        derived = msgspec.structs.replace(config, branches=[Branch(name="f", at_turn=k)], source=source,
                                          concurrency=None)
        return timed(lambda: start_run(work / f"fork{k}", derived, progress=False))

    fork_comparison(f"SGD user and agent (warm, {len(source.episodes)} episodes)", lambda: forks(0),
                    lambda: forks(at_turn))


def _episodes_of(run: RunDir) -> list[list]:
    return list(read_episodes(run))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--at-turn", type=int, default=20, help="turns the forks copy (of 40 in parts 2a, 2b)")
    parser.add_argument("--delay", type=float, default=5.0, help="the live agent's answer delay in ms")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print("1. verify and replay against the original run")
        sgd_rounds(work, args.episodes, args.rounds)
        print(f"2. forks copying {args.at_turn} turns against forks re-simulating them")
        live_agent(args.delay, max(50, args.episodes // 10), args.at_turn)
        sgd_forks(work, args.episodes // 2, min(args.at_turn, 12))


if __name__ == "__main__":
    main()
