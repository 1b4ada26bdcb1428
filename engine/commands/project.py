"""``dialogsim project RUN_DIR --to NAME``: build (or update) a projection of a run's event log."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..errors import UserError
from ..log import RunDir
from ..projections import get_projection, run_projection
from .eval_dst import seen_services
from .import_ import add_sgdx_arguments, sgdx_from_args


def register(sub: Any) -> None:
    p = sub.add_parser("project", help="derive a dataset or metrics from a run's events (incremental)",
                       description="Run a projection over a run's events. Outputs go to "
                                   "RUN_DIR/projections/<name>@v<k>/ unless --out is given; a second run "
                                   "only folds the episodes that ended since.")
    p.add_argument("run_dir")
    p.add_argument("--to", required=True, metavar="NAME", help="projection: sgd, dst_metrics, ...")
    p.add_argument("--out", help="output directory (default: RUN_DIR/projections/<name>@v<k>)")
    p.add_argument("--rebuild", action="store_true", help="ignore the checkpoint and fold every episode again")
    p.add_argument("--skip-corrupt", action="store_true", help="skip corrupt event lines and count them")
    p.add_argument("--train-schema", metavar="PATH",
                   help="dst_metrics: train-split schema.json whose services count as seen "
                        "(default: the 26 services of the SGD train split)")
    p.add_argument("--otlp-endpoint", metavar="URL",
                   help="otel: also send the traces to this OTLP/HTTP collector (default path /v1/traces)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_sgdx_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.sgdx and args.to != "sgd":
        raise UserError(f"--sgdx applies to --to sgd, not to --to {args.to}")
    if args.otlp_endpoint and args.to != "otel":
        raise UserError(f"--otlp-endpoint applies to --to otel, not to --to {args.to}")
    options: dict[str, Any] = {"sgdx": sgdx_from_args(args),
                               "seen": seen_services(args.train_schema) if args.train_schema else None,
                               "otlp_endpoint": args.otlp_endpoint}
    projection = get_projection(args.to, options)
    run = RunDir.open(args.run_dir)
    imported = run.imported_by()
    if imported and run.manifest.get("status") != "completed":
        # an import writes its events in one go: one that did not complete holds an arbitrary prefix
        raise UserError(f"{run.path}: the import did not finish (status {run.manifest.get('status')!r}); "
                        f"import again into a new directory: dialogsim {imported} --out NEW_DIR")
    bar = None if args.no_progress else tqdm(desc=f"{projection.name}@v{projection.version}", unit=" episodes",
                                             file=sys.stderr, leave=False, disable=None)
    try:
        report = run_projection(run, projection, Path(args.out) if args.out else None, rebuild=args.rebuild,
                                skip_corrupt=args.skip_corrupt, progress=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    print(f"{projection.name}@v{projection.version}: {report.episodes_total} episodes "
          f"({report.episodes_new} new) -> {report.out_dir} ({len(report.files)} files)")
    if report.corrupt:
        print(f"skipped {report.corrupt} corrupt line(s)", file=sys.stderr)
    publish = getattr(projection, "publish", None)  # a projection that also sends its files somewhere
    if callable(publish):
        text = publish(report.out_dir, report.files)
        if text:
            print(text)
    summary = getattr(projection, "summary", None)
    if callable(summary):
        text = summary()
        if text:
            print(text)
    return 0
