"""``dialogsim fork RUN_DIR --at-turn K --out OUT``: new episodes that copy a run's first K turns and go on live.

The copied turns are taken from the log, not re-run (the user and agent are only warmed up on them); from
turn K the episode continues with the given agent, user and options. ``--branches a,b,c`` makes several
forks of each episode, each with its own options (``--branch-agent-opt a:KEY=VALUE``).
"""

from __future__ import annotations

import argparse

from ..session import RunConfig, start_run
from .options import (add_agent_arguments, add_branch_arguments, add_derived_run_arguments, add_user_arguments,
                      agent_options, branches, derived_config, user_options)
from .run import report


def configure(p: argparse.ArgumentParser) -> None:
    """The ``fork`` command's arguments."""
    p.description = ("Fork a run's episodes at a turn into a new run directory: each fork copies the first K turns "
                     "from the log and continues live (episode ids EP-BRANCH; episode_started names the parent).")
    p.add_argument("run_dir", help="the run whose episodes to fork")
    add_branch_arguments(p, default_name="fork")
    p.add_argument("--agent", help="the agent from the fork on (default: the run's)")
    p.add_argument("--user", help="the user from the fork on (default: the run's)")
    add_user_arguments(p)
    add_agent_arguments(p)
    add_derived_run_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    own_user_options, own_agent_options = user_options(args), agent_options(args)
    forks = branches(args, default_name="fork")

    def changes(recorded: RunConfig) -> dict:
        """The fork's user and agent (the run's unless named) with its options (added to the run's, if so)."""
        return dict(agent=args.agent or recorded.agent, user=args.user or recorded.user, branches=forks,
                    agent_options=own_agent_options if args.agent else {**recorded.agent_options, **own_agent_options},
                    user_options=own_user_options if args.user else {**recorded.user_options, **own_user_options})

    return report(start_run(args.out, derived_config(args, "fork", changes), progress=not args.no_progress))
