"""Engine overhead: the real engine and log writer against a raw loop that writes the same events.

Runs N episodes of a scripted user against a scripted agent (20 exchanges, 2 events each, plus the
episode's start and end) through ``Batch`` + ``LogWriter``; then, in the same process, a raw loop that
builds the same events with msgspec and writes them as JSONL; then reads the engine's log back.
Prints episodes/s, events/s, peak RSS and the ratio engine/raw. Targets: ratio >= 0.5; read >= 500k
events/s on one core.

    python bench/bench_engine.py [--episodes 5000] [--durability episode]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path

from dialogsim.agents.scripted import ScriptLine, ScriptedAgent
from dialogsim.engine.codec import encode_into
from dialogsim.engine.contracts import Scenario, UserReply
from dialogsim.engine.events import Act, AgentTurn, EpisodeEnded, EpisodeStarted, Frame, UserTurn
from dialogsim.engine.log import LogWriter, read_events
from dialogsim.engine.runner import Batch, BatchSettings, Job
from dialogsim.engine.timing import Delay
from dialogsim.scenarios.builtin import BuiltinScenarios
from dialogsim.users.scripted import ScriptedUser

EXCHANGES = 20


def _frames(i: int) -> list[Frame]:
    return [Frame(service="Bench_1", actions=[Act(act="INFORM", slot="count", values=[str(i)],
                                                  canonical_values=[str(i)])])]


USER_LINES = [UserReply(utterance=f"This is user line number {i}.", frames=_frames(i), end=i == EXCHANGES - 1)
              for i in range(EXCHANGES)]
AGENT_LINES = [ScriptLine(utterance=f"And this is the agent's answer {i}.", end=i == EXCHANGES - 1)
               for i in range(EXCHANGES)]
SCENARIO = Scenario(id="bench", kind="scripted", data={})


THINK = Delay("uniform", 1, 4)
LATENCY = Delay("uniform", 0.2, 0.8)


def run_engine(path: Path, episodes: int, durability: str) -> tuple[float, float, int]:
    writer = LogWriter(path, durability)  # type: ignore[arg-type]
    batch = Batch(run_id="bench", scenarios=BuiltinScenarios([SCENARIO], {}),
                  make_user=lambda: ScriptedUser(USER_LINES), make_agent=lambda: ScriptedAgent(AGENT_LINES),
                  settings=BatchSettings(concurrency=32, think=THINK, latency=LATENCY), sink=writer)
    start, cpu = time.perf_counter(), time.process_time()
    asyncio.run(batch.run([Job(i) for i in range(episodes)]))
    writer.close()
    return time.perf_counter() - start, time.process_time() - cpu, writer.events_written


def run_raw(path: Path, episodes: int) -> tuple[float, float, int]:
    start, cpu = time.perf_counter(), time.process_time()
    # Times drawn from the same models as the engine's, so that the raw loop encodes events of the same
    # size (a float like 3.6446460283329447 costs more to print than 2.5); one stream, no per-episode seeds.
    rng = random.Random(0)
    think, latency = THINK.sample, LATENCY.sample
    buffer = bytearray()
    count = 0
    scenario = {"id": SCENARIO.id, "kind": SCENARIO.kind, "data": SCENARIO.data}
    with open(path, "wb") as f:
        for n in range(episodes):
            ep = f"e{n:06d}"
            seq = 0
            t = 0.0
            encode_into(EpisodeStarted(run="bench", ep=ep, seq=seq, t=t, wall=time.time_ns(), scenario_id="bench",
                                       seed=n, scenario=scenario, user="scripted", agent="scripted"), buffer)
            for i in range(EXCHANGES):
                u, a = USER_LINES[i], AGENT_LINES[i]
                t += think(rng)
                seq += 1
                encode_into(UserTurn(run="bench", ep=ep, seq=seq, t=t, wall=time.time_ns(), turn=2 * i,
                                     utterance=u.utterance, frames=u.frames, end=u.end), buffer)
                lag = latency(rng)
                t += lag
                seq += 1
                encode_into(AgentTurn(run="bench", ep=ep, seq=seq, t=t, wall=time.time_ns(), turn=2 * i + 1,
                                      utterance=a.utterance, end=a.end, latency=lag), buffer)
            seq += 1
            encode_into(EpisodeEnded(run="bench", ep=ep, seq=seq, t=t, wall=time.time_ns(), outcome="success",
                                     turns=2 * EXCHANGES), buffer)
            count += seq + 1
            if len(buffer) > 1 << 20:
                f.write(buffer)
                buffer.clear()
        f.write(buffer)
    return time.perf_counter() - start, time.process_time() - cpu, count


def read_back(run_dir: Path) -> tuple[float, int]:
    start = time.perf_counter()
    count = sum(1 for _ in read_events(run_dir))
    return time.perf_counter() - start, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=5000)
    parser.add_argument("--durability", default="episode", choices=["none", "batch", "episode"])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each is kept")
    args = parser.parse_args()
    engine_s = raw_s = read_s = engine_cpu = raw_cpu = float("inf")
    paired: list[float] = []  # each round's own ratio: a machine whose speed drifts shows here as spread
    for _ in range(args.rounds):  # alternate so that a noisy neighbour hurts both sides alike
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            (tmp_path / "run" / "events").mkdir(parents=True)
            (tmp_path / "run" / "manifest.json").write_text(
                '{"format": "dialogsim-run", "format_version": 1, "shards": ["events/shard-000.jsonl"]}')
            seconds, cpu, engine_events = run_engine(tmp_path / "run" / "events" / "shard-000.jsonl",
                                                     args.episodes, args.durability)
            engine_s, engine_cpu = min(engine_s, seconds), min(engine_cpu, cpu)
            round_engine = seconds
            seconds, cpu, raw_events = run_raw(tmp_path / "raw.jsonl", args.episodes)
            raw_s, raw_cpu = min(raw_s, seconds), min(raw_cpu, cpu)
            paired.append(seconds / round_engine)
            seconds, read_count = read_back(tmp_path / "run")
            read_s = min(read_s, seconds)
            assert read_count == engine_events
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"episodes: {args.episodes}, {EXCHANGES} exchanges each, durability {args.durability}, "
          f"best of {args.rounds} rounds")
    print(f"engine : {args.episodes / engine_s:10.0f} episodes/s {engine_events / engine_s:12.0f} events/s")
    print(f"raw    : {args.episodes / raw_s:10.0f} episodes/s {raw_events / raw_s:12.0f} events/s")
    print(f"ratio engine/raw: {raw_s / engine_s:.2f} wall, {raw_cpu / engine_cpu:.2f} CPU time (target >= 0.5; CPU "
          f"time is steadier on a busy machine)")
    print(f"ratio per round: {min(paired):.2f}..{max(paired):.2f}, median {statistics.median(paired):.2f}")
    print(f"read back: {read_count / read_s:12.0f} events/s (target >= 500000)")
    print(f"peak RSS: {rss_mb:.0f} MB")


if __name__ == "__main__":
    main()
