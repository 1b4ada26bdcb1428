"""``dialogsim project RUN_DIR --to NAME``: build (or update) a projection of a run's event log."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .. import registry
from ..errors import UserError
from ..log import RunDir
from ..projections import run_projection


def configure(p: argparse.ArgumentParser) -> None:
    """The ``project`` command's arguments."""
    p.description = ("Run a projection over a run's events. Outputs go to RUN_DIR/projections/<name>@v<k>/ "
                     "unless --out is given; a second run only folds the episodes that ended since.")
    p.add_argument("run_dir")
    p.add_argument("--to", required=True, metavar="NAME",
                   help=f"projection: {', '.join(registry.names('projection'))}; its own options follow "
                        f"(dialogsim project RUN --to NAME --options lists them)")
    p.add_argument("--out", help="output directory (default: RUN_DIR/projections/<name>@v<k>)")
    p.add_argument("--rebuild", action="store_true", help="ignore the checkpoint and fold every episode again")
    p.add_argument("--skip-corrupt", action="store_true", help="skip corrupt event lines and count them")
    p.add_argument("--options", action="store_true", help="list the options of the projection --to names")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=handle, takes_extra=True)


def _projection(args: argparse.Namespace) -> Any:
    """The projection --to names, built from its own options (the arguments ``project`` does not know)."""
    factory = registry.lookup("projection", args.to)
    parser = _OptionParser(prog=f"dialogsim project --to {args.to}", add_help=False)
    add_arguments = getattr(factory, "add_arguments", None)
    if add_arguments is not None:
        add_arguments(parser)
    if args.options:
        print(parser.format_help() if add_arguments is not None else f"--to {args.to} takes no options")
        return None
    own = parser.parse_args(args.extra)
    return factory.from_arguments(own) if add_arguments is not None else factory({})


class _OptionParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message}")


def handle(args: argparse.Namespace) -> int:
    projection = _projection(args)
    if projection is None:
        return 0
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
