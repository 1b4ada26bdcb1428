"""rl projection throughput, in transitions per second on one core.

Imports an SGD split (default: the real dev split in ../shared/sgd, 19,384 agent turns; without it, the
small in-repo fixture) into a fresh run directory, then projects it with ``rl``
end to end (log read, fold, render, files written) into a fresh output directory, and again with nothing
new (the render alone, from the checkpoint). Also times its parts on the same log: reading the log alone,
and the fold over every episode. Target: >= 100,000 transitions/s.

    python bench/bench_rl.py [--src DIR --schema PATH] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from pathlib import Path

from dialogsim.scenarios.sgd.import_command import import_sgd
from dialogsim.engine.log import RunDir, read_episodes_from
from dialogsim.engine.oplog import configure_logging
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import projection as get_projection
from sgd_split import add_split_arguments, chosen_split

TARGET = 100_000


def _timed(fn):
    gc.collect()
    gc.disable()  # as run_projection does
    try:
        start, cpu = time.perf_counter(), time.process_time()
        result = fn()
        return result, (time.perf_counter() - start, time.process_time() - cpu)
    finally:
        gc.enable()


def _read_all(run: Path) -> list:
    return list(read_episodes_from(RunDir.open(run), {}, {}, done=set()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_split_arguments(parser)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported (default 3)")
    args = parser.parse_args()
    configure_logging("console", "warning")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        src, schema = chosen_split(args, tmp, copies=1)
        run = tmp / "run"
        stats = import_sgd(src, run, schema=schema)
        inf = (float("inf"), float("inf"))
        best = {"project": inf, "again": inf, "read": inf, "fold": inf}
        transitions = 0
        for k in range(args.repeat):
            out = tmp / f"out{k}"
            projection = get_projection("rl")
            _, t_project = _timed(lambda: run_projection(run, projection, out))
            _, t_again = _timed(lambda: run_projection(run, get_projection("rl"), out))
            transitions = projection.transitions
            episodes, t_read = _timed(lambda: _read_all(run))
            _, t_fold = _timed(lambda: [projection.fold(events) for events in episodes])
            del episodes
            for key, value in (("project", t_project), ("again", t_again), ("read", t_read), ("fold", t_fold)):
                best[key] = min(best[key], value)
            shutil.rmtree(out)
    print(f"corpus: {stats.dialogues} dialogues, {stats.turns} turns, {transitions} transitions ({src})")
    print("best of the runs; wall time, and CPU time of this process (steadier on a busy machine)")
    for label, key in (("project (event log -> rl files)     ", "project"),
                       ("project again, nothing new (render) ", "again"),
                       ("  part: read the event log alone    ", "read"),
                       ("  part: fold every episode          ", "fold")):
        wall, cpu = best[key]
        rate, cpu_rate = transitions / wall, transitions / cpu
        print(f"{label}: wall {wall:6.3f} s {rate:9,.0f} transitions/s ({rate / TARGET:4.2f}x the {TARGET:,} "
              f"target); CPU {cpu:6.3f} s {cpu_rate:9,.0f}/s ({cpu_rate / TARGET:4.2f}x)")


if __name__ == "__main__":
    main()
