"""``dialogsim diff RUN_A RUN_B [--out diff.json]``: two runs' episodes paired and compared."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import msgspec

from ..diff import compare, metric_plugins, read_run, render
from ..errors import UserError
from ..paired import RESAMPLES


def configure(p: argparse.ArgumentParser) -> None:
    """The ``diff`` command's arguments."""
    p.description = ("Pair the episodes of two runs by scenario, trial and branch and report outcome transitions, "
                     "the first differing turn of each pair and metric deltas with paired statistics (McNemar's "
                     "exact test for success, paired bootstrap intervals for means).")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--out", metavar="FILE", help="also write the whole comparison, every pair included, as JSON")
    p.add_argument("--resamples", type=int, default=RESAMPLES, help=f"bootstrap resamples (default {RESAMPLES})")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.resamples < 1:
        raise UserError(f"--resamples must be >= 1, got {args.resamples}")
    plugins = metric_plugins()
    run_a, a = read_run(args.run_a, plugins)
    run_b, b = read_run(args.run_b, plugins)
    diff = compare(_name(run_a), a, _name(run_b), b, resamples=args.resamples, seed=args.seed)
    print(render(diff))
    if args.out:
        out = Path(args.out)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(msgspec.to_builtins(diff), indent=1) + "\n", encoding="utf-8")
        tmp.replace(out)
        print(f"wrote {out}")
    return 0


def _name(run) -> str:
    config = run.manifest.get("config") or {}
    options = " ".join(f"{k}={v}" for k, v in sorted((config.get("agent_options") or {}).items()))
    agent = " ".join(x for x in (config.get("agent", "?"), options) if x)
    return f"{run.path} ({run.manifest.get('run_id')}, agent {agent})"
