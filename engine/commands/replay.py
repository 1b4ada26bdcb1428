"""``dialogsim replay RUN_DIR --agent SPEC --out OUT``: the users of a run against another agent.

Each episode of RUN_DIR is played again with its logged scenario and seeds (common random numbers: the user
draws what it drew, so what changes comes from the agent). A user that cannot be re-run has its logged turns
played back while the new agent stays compatible (engine/recorded.py). The new run records its source.
"""

from __future__ import annotations

import argparse

from ..session import start_run
from .options import add_agent_arguments, add_derived_run_arguments, agent_options, derived_config
from .run import report


def configure(p: argparse.ArgumentParser) -> None:
    """The ``replay`` command's arguments."""
    p.description = ("Replay the users of a run against another agent into a new run directory: the same "
                     "scenarios and seeds, each episode's start naming the one it replays.")
    p.add_argument("run_dir", help="the run whose users to replay")
    p.add_argument("--agent", required=True, help="the new agent's spec, e.g. schema, http:URL, openai:URL")
    add_agent_arguments(p)
    add_derived_run_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    options = agent_options(args)
    config = derived_config(args, "replay", lambda recorded: dict(agent=args.agent, agent_options=options, branches=[]))
    return report(start_run(args.out, config, progress=not args.no_progress))
