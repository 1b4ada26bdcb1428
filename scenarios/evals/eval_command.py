"""``dialogsim eval RUN_DIR``: deterministic and reference metrics of a run's episodes."""

from __future__ import annotations

import argparse
from pathlib import Path

from .evaluate import evaluate_run, render_table, write_report


def configure(p: argparse.ArgumentParser) -> None:
    """The ``eval`` command's arguments."""
    p.description = ("Deterministic metrics from each episode's spans and, when the run played a golden dataset (or "
                     "--golden names one), reference metrics: trajectory, tool-call and state-variable match. Prints "
                     "the aggregate; writes everything as JSON.")
    p.add_argument("run_dir")
    p.add_argument("--golden", metavar="FILE", help="golden file to score against (default: the references the "
                                                    "episodes' scenarios carry)")
    p.add_argument("--prices", metavar="FILE", help="price table, CSV: model,input_per_1k,output_per_1k ('*' = any)")
    p.add_argument("--out", metavar="FILE", help="metrics JSON (default: RUN_DIR/eval_metrics.json)")
    p.add_argument("--skip-corrupt", action="store_true", help="skip corrupt event lines")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    report = evaluate_run(args.run_dir, args.golden, args.prices, skip_corrupt=args.skip_corrupt)
    out = Path(args.out) if args.out else Path(args.run_dir) / "eval_metrics.json"
    write_report(report, out)
    print(render_table(report))
    print(f"-> {out}")
    return 0
