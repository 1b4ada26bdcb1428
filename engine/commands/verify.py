"""``dialogsim verify RUN_DIR [--episodes N | --sample K]``: re-simulate a run's episodes and compare every event."""

from __future__ import annotations

import argparse

from ..verify import verify_run


def configure(p: argparse.ArgumentParser) -> None:
    """The ``verify`` command's arguments."""
    p.description = ("Re-simulate a run's episodes from their logged seeds and configuration and compare them with "
                     "the log event by event (wall clock aside, virtual time exactly). Replies of agents or users "
                     "that cannot be re-run are read back from the log. Exit status 1 if any episode differs.")
    p.add_argument("run_dir")
    p.add_argument("--episodes", type=int, metavar="N", help="check the first N episodes of the run (default: all)")
    p.add_argument("--sample", type=int, metavar="K", help="check K episodes drawn at random (seeded by --seed)")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample (default 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    result = verify_run(args.run_dir, episodes=args.episodes, sample=args.sample, seed=args.seed,
                        progress=not args.no_progress)
    for ep, divergence in result.diverged.items():
        print(f"{ep}: {divergence}")
    checked = len(result.checked)
    scope = "" if checked == result.episodes else f" (of {result.episodes} episodes)"
    print(f"verified {checked - len(result.diverged)}/{checked}{scope}")
    return 1 if result.diverged else 0
