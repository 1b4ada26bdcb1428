"""``dialogsim run``: simulate a batch of episodes into a run directory, or resume one."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from ..errors import UserError
from ..log import RunDir
from ..session import RunConfig, RunResult, absolute_scenarios, resume_run, start_run
from .options import (AGENT_FLAGS, USER_FLAGS, add_agent_arguments, add_branch_arguments, add_model_arguments,
                      add_user_arguments, agent_options, branches, model_settings, user_options)

# The RunConfig fields set by a flag of their own. The parser's defaults are None so that --resume can
# tell an option given from one left out (a given option must match what the run recorded); a new run
# takes RunConfig's defaults for the others.
_FLAG_FIELDS = ("scenarios", "user", "agent", "episodes", "seed", "concurrency", "max_turns", "think", "latency",
                "arrivals", "durability")


def _seed(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad seed {text!r}: expected a non-negative integer") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"bad seed {text!r}: expected an integer in [0, 2**63)")
    return value


def configure(p: argparse.ArgumentParser) -> None:
    """The ``run`` command's arguments."""
    p.description = ("Run simulated users against an agent, one episode per scenario, logging every step as "
                     "an event.")
    p.add_argument("--out", help="run directory to create (must be absent or empty)")
    p.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted or crashed run")
    p.add_argument("--scenarios", help="scenario set name (sgd, builtin) or a pack directory (default: sgd)")
    p.add_argument("--user", help="user simulator spec (default: the scenario set's)")
    p.add_argument("--agent", help="agent spec, e.g. schema, http:URL, openai:URL (default: the scenario set's)")
    p.add_argument("--episodes", type=int, help="number of episodes (default 100)")
    p.add_argument("--seed", type=_seed, help="master seed (default 0)")
    p.add_argument("--concurrency", type=int, help="episodes in flight at once (default 32; with a live agent 4 per "
                                                       "--agent-concurrency slot, 64 at its default 16)")
    p.add_argument("--max-turns", type=int, help="turn limit per episode, counting both sides (default 50)")
    p.add_argument("--think", help="user think time model in virtual seconds (default uniform:1,4)")
    p.add_argument("--latency", help="agent latency model in virtual seconds (default uniform:0.2,0.8)")
    p.add_argument("--arrivals", help="'all' (default) or 'poisson:RATE' (episodes per virtual second)")
    p.add_argument("--durability", choices=["none", "batch", "episode"],
                   help="when events are fsynced (default: at every episode end)")
    add_user_arguments(p)
    add_agent_arguments(p)
    add_branch_arguments(p, default_name=None)
    add_model_arguments(p, resume=True)
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.set_defaults(handler=handle)


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields the command line sets, by RunConfig field name."""
    given = {key: getattr(args, key) for key in _FLAG_FIELDS if getattr(args, key) is not None}
    options = agent_options(args)
    if options:
        given["agent_options"] = options
    options = user_options(args)
    if options:
        given["user_options"] = options
    forks = branches(args, default_name=None)
    if forks:
        given["branches"] = forks
    given.update(model_settings(args))
    return given


def _check_same_as_recorded(run_dir: str, given: dict[str, Any]) -> None:
    """Refuse an option that differs from the resumed run's recorded config: resuming never changes a run."""
    run = RunDir.open(run_dir)
    recorded = run.manifest.get("config")
    if not isinstance(recorded, dict):
        return  # resume_run reports the bad config
    if "scenarios" in given:
        given = {**given, "scenarios": absolute_scenarios(given["scenarios"])}
    differences = []
    for key, value in given.items():
        if key in ("agent_options", "user_options"):
            options = recorded.get(key) if isinstance(recorded.get(key), dict) else {}
            for name, option in value.items():
                if options.get(name) != option:
                    flag = AGENT_FLAGS.get(name, f"--agent-opt {name}") if key == "agent_options" else \
                        USER_FLAGS.get(name, f"--user-opt {name}")
                    differences.append((flag, option, options.get(name)))
        elif recorded.get(key) != msgspec.to_builtins(value):
            differences.append(("--" + key.replace("_", "-"), msgspec.to_builtins(value), recorded.get(key)))
    if differences:
        flag, value, was = differences[0]
        was = "not set" if was is None else repr(was)
        raise UserError(f"{flag} {value!r} differs from the value {run.path} was started with ({was}); "
                        f"--resume finishes a run as recorded: drop the option, or start a new run with --out")


def handle(args: argparse.Namespace) -> int:
    given = _given(args)
    if args.resume:
        if args.out:
            raise UserError("give either --out (a new run) or --resume RUN_DIR, not both")
        given.pop("max_cost", None)  # a new budget for the rest of the run, not a change of it
        _check_same_as_recorded(args.resume, given)
        result = resume_run(args.resume, progress=not args.no_progress, max_cost=args.max_cost)
    else:
        if not args.out:
            raise UserError("--out RUN_DIR is required (or --resume RUN_DIR)")
        result = start_run(args.out, RunConfig(**given), progress=not args.no_progress)
    return report(result)


def report(result: RunResult) -> int:
    """Print how a run finished; its exit status."""
    if result.status == "interrupted":
        print(f"interrupted: {result.run_dir} (finish it with: dialogsim run --resume {result.run_dir})")
        return 130
    summary = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items()) if k != "episodes")
    print(f"{result.status}: {result.counts.get('episodes', 0)} episodes in {result.run_dir} ({summary})")
    for role, u in sorted(result.usage.items()):
        cost = "" if u.cost is None else f", {u.cost:.4f} USD"
        print(f"  {role}: {u.calls} model calls, {u.input_tokens} input and {u.output_tokens} output tokens{cost}")
    if result.reason:
        print(f"  {result.reason}")
    return 0
