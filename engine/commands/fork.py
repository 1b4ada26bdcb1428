"""``dialogsim fork RUN_DIR --at-turn K --out OUT``: new episodes that copy a run's first K turns and go on live.

The copied turns are taken from the log, not re-run (the user and agent are only warmed up on them); from
turn K the episode continues with the given agent, user and options. ``--branches a,b,c`` makes several
forks of each episode, each with its own options (``--branch-agent-opt a:KEY=VALUE``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec

from ..derive import Source, open_source
from ..registry import parse_options
from ..session import recorded_config, start_run
from .options import add_agent_arguments, add_branch_arguments, agent_options, branches
from .run import report


def configure(p: argparse.ArgumentParser) -> None:
    """The ``fork`` command's arguments."""
    p.description = ("Fork a run's episodes at a turn into a new run directory: each fork copies the first K turns "
                     "from the log and continues live (episode ids EP-BRANCH; episode_started names the parent).")
    p.add_argument("run_dir", help="the run whose episodes to fork")
    add_branch_arguments(p, default_name="fork")
    p.add_argument("--episode", action="append", default=[], metavar="EP", help="fork only this episode (repeatable)")
    p.add_argument("--agent", help="the agent from the fork on (default: the run's)")
    p.add_argument("--user", help="the user from the fork on (default: the run's)")
    p.add_argument("--user-opt", action="append", default=[], metavar="KEY=VALUE", help="user option")
    add_agent_arguments(p)
    p.add_argument("--concurrency", type=int, help="episodes in flight (default: 32, or 4 per live agent slot)")
    p.add_argument("--durability", choices=["none", "batch", "episode"], help="as for run (default: the run's)")
    p.add_argument("--out", required=True, help="run directory to create (must be absent or empty)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    source = open_source(args.run_dir)
    config = recorded_config(source)
    user_options = parse_options(args.user_opt, "--user-opt")
    derived = msgspec.structs.replace(
        config, agent=args.agent or config.agent,
        agent_options=agent_options(args) if args.agent else {**config.agent_options, **agent_options(args)},
        user=args.user or config.user,
        user_options=user_options if args.user else {**config.user_options, **user_options},
        concurrency=args.concurrency, branches=branches(args, default_name="fork"),
        durability=args.durability or config.durability,
        source=Source(command="fork", run=str(Path(source.path).resolve()), run_id=source.manifest["run_id"],
                      episodes=args.episode))
    return report(start_run(args.out, derived, progress=not args.no_progress))
