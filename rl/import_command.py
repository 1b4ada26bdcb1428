"""``dialogsim import tcbot FILE --out RUN_DIR``: a TC-Bot / seed-style simulated-dialogue file as an event log."""

from __future__ import annotations

import argparse

from .tcbot import import_tcbot


def configure(p: argparse.ArgumentParser) -> None:
    """The ``import tcbot`` command's arguments."""
    p.description = ("Import a TC-Bot / seed-style dialogue file: one episode per episode id, each act kept "
                     "verbatim (see docs/rl.md).")
    p.add_argument("file", help="JSON file {episode_id: [{diaact, inform_slots, request_slots, speaker}, ...]}")
    p.add_argument("--out", required=True, help="run directory to create (must be absent or empty)")
    p.add_argument("--run-id", help="run id (default: tcbot-<file name without extension>)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    episodes, acts = import_tcbot(args.file, args.out, run_id=args.run_id)
    print(f"imported {episodes} episodes ({acts} acts) from {args.file} into {args.out}")
    return 0
