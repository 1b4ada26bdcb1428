"""``dialogsim import trajectories FILE --out RUN_DIR``: a JSONL file of preference-trajectory records as an event log."""

from __future__ import annotations

import argparse
import sys

from .importer import import_trajectories


def configure(p: argparse.ArgumentParser) -> None:
    """The ``import trajectories`` command's arguments."""
    p.description = ("Import trajectory records (the ProactiveLLM generator's format): one episode per record, "
                     "branches linked to their mainline.")
    p.add_argument("src_file", help="JSONL file, one trajectory record per line")
    p.add_argument("--out", required=True, help="run directory to create (must be absent or empty)")
    p.add_argument("--run-id", help="run id (default: trajectories-<name of the file>)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    counts = import_trajectories(args.src_file, args.out, run_id=args.run_id)
    print(f"imported {counts.records} trajectories ({counts.mainlines} mainlines, {counts.branches} branches, "
          f"{counts.unlinked} branches without their mainline) from {args.src_file} into {args.out}")
    if counts.kept_as_is:
        print(f"{counts.kept_as_is} record(s) differ from the generator's shape and are kept as they are",
              file=sys.stderr)
    return 0
