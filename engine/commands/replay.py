"""``dialogsim replay RUN_DIR --agent SPEC --out OUT``: the users of a run against another agent.

Each episode of RUN_DIR is played again with its logged scenario and seeds (common random numbers: the user
draws what it drew, so what changes comes from the agent). A user that cannot be re-run has its logged turns
played back while the new agent stays compatible (engine/recorded.py). The new run records its source.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec

from ..derive import Source, open_source
from ..session import recorded_config, start_run
from .options import add_agent_arguments, agent_options
from .run import report


def configure(p: argparse.ArgumentParser) -> None:
    """The ``replay`` command's arguments."""
    p.description = ("Replay the users of a run against another agent into a new run directory: the same "
                     "scenarios and seeds, each episode's start naming the one it replays.")
    p.add_argument("run_dir", help="the run whose users to replay")
    p.add_argument("--agent", required=True, help="the new agent's spec, e.g. schema, http:URL, openai:URL")
    add_agent_arguments(p)
    p.add_argument("--episode", action="append", default=[], metavar="EP", help="replay only this episode (repeatable)")
    p.add_argument("--concurrency", type=int, help="episodes in flight (default: 32, or 4 per live agent slot)")
    p.add_argument("--durability", choices=["none", "batch", "episode"], help="as for run (default: the run's)")
    p.add_argument("--out", required=True, help="run directory to create (must be absent or empty)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    source = open_source(args.run_dir)
    config = recorded_config(source)
    derived = msgspec.structs.replace(
        config, agent=args.agent, agent_options=agent_options(args), concurrency=args.concurrency, branches=[],
        durability=args.durability or config.durability,
        source=Source(command="replay", run=str(Path(source.path).resolve()), run_id=source.manifest["run_id"],
                      episodes=args.episode))
    return report(start_run(args.out, derived, progress=not args.no_progress))
