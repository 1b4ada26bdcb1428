"""``dialogsim stats RUN_DIR [--compare SGD_DIALOGUE_DIR] [--json]``: corpus statistics of a run."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import registry
from ..log import RunDir, read_episodes
from ..plugins import DEFAULT_CORPUS
from ..stats import Dialogue, compare, from_episode, render, summarize


def configure(p: argparse.ArgumentParser) -> None:
    """The ``stats`` command's arguments."""
    p.add_argument("run_dir")
    p.add_argument("--compare", metavar="DIR",
                   help="a real corpus (an SGD split directory, dialogues_*.json) or another run directory; only "
                        "dialogues whose services all occur in the run are compared")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--skip-corrupt", action="store_true", help="skip corrupt log lines and count them")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    run = RunDir.open(args.run_dir)
    read_stats: dict[str, int] = {}
    ours = summarize(from_episode(events)
                     for events in read_episodes(run, skip_corrupt=args.skip_corrupt, stats=read_stats))
    if read_stats.get("corrupt"):
        print(f"skipped {read_stats['corrupt']} corrupt line(s)", file=sys.stderr)
    real = cmp = None
    if args.compare:
        services = set(ours["services"])
        real = summarize(d for d in _dialogues(args.compare) if d.services and set(d.services) <= services)
        cmp = compare(ours, real) if real["dialogues"] else None
    if args.json:
        out: dict[str, Any] = {"run": ours}
        if real is not None:
            out["real"] = real
            out["comparison"] = cmp
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render(ours, real, cmp))
        if real is not None and not real["dialogues"]:
            print(f"\nno dialogue of {args.compare} uses only the run's services", file=sys.stderr)
    return 0


def _dialogues(path: str) -> Iterator[Dialogue]:
    """The dialogues of a run directory, or of a corpus directory read by the default corpus reader (whose
    dialogues were never judged: no success rate)."""
    if (Path(path) / "manifest.json").is_file():
        yield from map(from_episode, read_episodes(RunDir.open(path)))
        return
    for events in registry.lookup("corpus", DEFAULT_CORPUS)(path):
        dialogue = from_episode(events)
        dialogue.outcome = None
        yield dialogue
