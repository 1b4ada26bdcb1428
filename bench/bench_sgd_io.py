"""SGD import and projection throughput, in turns per second on one core.

Imports an SGD split (default: the real dev split in ../shared/sgd, 38,768 turns; without it, the
in-repo fixture repeated to a similar size) into a fresh run directory with ``import_sgd``, then
projects it back with the ``sgd`` projection, then runs the projection again on the unchanged log (the
incremental no-op). Each step is timed end to end, files included, in wall and CPU time. Target: >= 50,000 turns/s each way.

    python bench/bench_sgd_io.py [--src DIR --schema PATH] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from pathlib import Path

from dialogsim.engine.oplog import configure_logging
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import projection
from dialogsim.scenarios.sgd.import_command import import_sgd
from sgd_split import add_split_arguments, chosen_split

TARGET = 50_000


def _timed(fn):
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, (time.perf_counter() - start, time.process_time() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_split_arguments(parser)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported (default 3)")
    args = parser.parse_args()
    configure_logging("console", "warning")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        src, schema = chosen_split(args, tmp, copies=510)
        inf = (float("inf"), float("inf"))
        best_import = best_project = best_noop = inf
        turns = dialogues = 0
        for k in range(args.repeat):
            run, out = tmp / f"run{k}", tmp / f"out{k}"
            stats, t_import = _timed(lambda: import_sgd(src, run, schema=schema))
            report, t_project = _timed(lambda: run_projection(run, projection("sgd"), out))
            _, t_noop = _timed(lambda: run_projection(run, projection("sgd"), out))
            turns, dialogues = stats.turns, stats.dialogues
            best_import, best_project, best_noop = min(best_import, t_import), min(best_project, t_project), \
                min(best_noop, t_noop)
            shutil.rmtree(run)
            shutil.rmtree(out)
    print(f"corpus: {dialogues} dialogues, {turns} turns ({src})")
    print("best of the runs; wall time, and CPU time of this process (steadier on a busy machine)")
    for label, (wall, cpu) in (("import  (SGD files -> event log)", best_import),
                               ("project (event log -> SGD files)", best_project),
                               ("project again, nothing new     ", best_noop)):
        rate, cpu_rate = turns / wall, turns / cpu
        print(f"{label}: wall {wall:6.3f} s {rate:9,.0f} turns/s ({rate / TARGET:4.2f}x the {TARGET:,} target); "
              f"CPU {cpu:6.3f} s {cpu_rate:9,.0f} turns/s ({cpu_rate / TARGET:4.2f}x)")


if __name__ == "__main__":
    main()
