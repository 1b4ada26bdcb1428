"""Scoring speed: MBPP programs (reference solution + its tests) run in the sandbox per second, on every core.

Runs the bundled MBPP test split's 500 programs (cycled to --programs) through ``SandboxPool`` exactly as
the preference_pairs projection scores trajectories, and, in the same run, the same programs as the
original pipeline runs them (``python FILE`` per program, unsandboxed, the same number at a time) for a
same-run ratio. Prints programs/s, passes, the isolation the sandbox got, and the ratio to 50/s.

    python bench/bench_sandbox.py [--programs 1000] [--workers N] [--rounds 2] [--no-baseline]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from dialogsim.engine.sandbox import SandboxPool, default_workers, isolation_available
from dialogsim.scenarios.proactive.reward import program
from dialogsim.scenarios.proactive.states import bundled_states

TARGET = 50.0


def programs(n: int) -> list[str]:
    """``n`` scoring programs: the reference solutions with their tests, cycled."""
    states, solutions = bundled_states()
    one_each = [program(solutions[s["id"]], s["mbpp_tests"]) for s in states]
    return [one_each[i % len(one_each)] for i in range(n)]


def sandboxed(sources: list[str], workers: int) -> tuple[float, int]:
    """Seconds to score ``sources`` in the sandbox (servers started beforehand), and how many passed."""
    with SandboxPool(workers) as pool:
        list(pool.map(["pass"] * workers))  # start every server: a long scoring run pays this once
        t0 = time.perf_counter()
        passed = sum(r.passed for r in pool.map(sources))
        return time.perf_counter() - t0, passed


def unsandboxed(sources: list[str], workers: int) -> tuple[float, int]:
    """The original's way: each program written to a file and run as ``python FILE`` with a 5 s timeout."""
    def run(source: str) -> bool:
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(source)
        try:
            return subprocess.run([sys.executable, f.name], capture_output=True, timeout=5).returncode == 0
        except subprocess.TimeoutExpired:
            return False
        finally:
            os.unlink(f.name)

    with ThreadPoolExecutor(workers) as pool:
        t0 = time.perf_counter()
        passed = sum(pool.map(run, sources))
        return time.perf_counter() - t0, passed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--programs", type=int, default=1000)
    p.add_argument("--workers", type=int, default=None, help="sandboxes at a time (default: the pool's)")
    p.add_argument("--rounds", type=int, default=2, help="report the best of this many rounds")
    p.add_argument("--no-baseline", action="store_true", help="skip the unsandboxed same-run baseline")
    args = p.parse_args()
    workers = args.workers or default_workers()
    sources = programs(args.programs)
    print(f"{len(sources)} MBPP programs, {workers} at a time on {os.cpu_count()} cores; "
          f"sandbox isolation here: {', '.join(isolation_available()) or 'none'}")
    best = min(sandboxed(sources, workers) for _ in range(args.rounds))
    rate = len(sources) / best[0]
    print(f"sandboxed:   {rate:8.1f} programs/s ({best[1]} passed)  = {rate / TARGET:.2f}x the {TARGET:.0f}/s target")
    if not args.no_baseline:
        base = min(unsandboxed(sources, workers) for _ in range(args.rounds))
        base_rate = len(sources) / base[0]
        print(f"unsandboxed: {base_rate:8.1f} programs/s ({base[1]} passed)  sandboxed/unsandboxed = "
              f"{rate / base_rate:.2f}")


if __name__ == "__main__":
    main()
