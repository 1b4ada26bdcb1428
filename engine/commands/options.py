"""Command-line options shared by the commands that run episodes (``run``, ``replay``, ``fork``): the agent's
and the user's flags, the branches of a fork, the model budget and cache, and the run a derived run writes."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ..derive import Source, open_source
from ..errors import UserError
from ..registry import parse_options
from ..runner import Branch
from ..session import RunConfig, recorded_config

# agent and user options set by their own flags, to name the flag in an error
AGENT_FLAGS = {"model": "--agent-model", "concurrency": "--agent-concurrency", "total_timeout": "--agent-timeout",
               "retries": "--agent-retries", "api_key_env": "--api-key-env", "price_in_per_1k": "--price",
               "price_out_per_1k": "--price"}
USER_FLAGS = {"model": "--user-model", "api_key_env": "--user-api-key-env", "price_in_per_1k": "--user-price",
              "price_out_per_1k": "--user-price"}


def add_agent_arguments(p: argparse.ArgumentParser) -> None:
    """``--agent-opt`` and the flags of live agents."""
    p.add_argument("--agent-opt", action="append", default=[], metavar="KEY=VALUE", help="agent option")
    p.add_argument("--agent-model", help="model name for openai: agents")
    p.add_argument("--agent-concurrency", type=int, help="bound on in-flight requests to a live agent")
    p.add_argument("--agent-timeout", type=float, help="total timeout of one agent request in seconds")
    p.add_argument("--agent-retries", type=int, help="retries of a failed agent request")
    p.add_argument("--api-key-env", help="environment variable holding the agent's API key (never logged)")
    p.add_argument("--price", metavar="IN,OUT", help="price per 1K input and output tokens, for cost")


def agent_options(args: argparse.Namespace) -> dict[str, Any]:
    """The agent options ``add_agent_arguments``'s flags give."""
    options: dict[str, Any] = parse_options(args.agent_opt, "--agent-opt")
    for key, value in (("model", args.agent_model), ("concurrency", args.agent_concurrency),
                       ("total_timeout", args.agent_timeout), ("retries", args.agent_retries),
                       ("api_key_env", args.api_key_env)):
        if value is not None:
            options[key] = value
    if args.price:
        options.update(prices(args.price, "--price"))
    return options


def add_user_arguments(p: argparse.ArgumentParser) -> None:
    """``--user-opt`` and the flags of model-driven users."""
    p.add_argument("--user-opt", action="append", default=[], metavar="KEY=VALUE", help="user option")
    p.add_argument("--user-model", help="model name for llm: users")
    p.add_argument("--user-api-key-env", help="environment variable holding the user's API key (never logged)")
    p.add_argument("--user-price", metavar="IN,OUT", help="the user model's price per 1K input and output tokens")


def user_options(args: argparse.Namespace) -> dict[str, Any]:
    """The user options ``add_user_arguments``'s flags give."""
    options: dict[str, Any] = parse_options(args.user_opt, "--user-opt")
    for key, value in (("model", args.user_model), ("api_key_env", args.user_api_key_env)):
        if value is not None:
            options[key] = value
    if args.user_price:
        options.update(prices(args.user_price, "--user-price"))
    return options


def prices(text: str, flag: str) -> dict[str, float]:
    """``IN,OUT`` USD per 1K tokens as the price options of a model-calling participant."""
    try:
        price_in, price_out = (float(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected IN,OUT prices per 1K tokens") from None
    return {"price_in_per_1k": price_in, "price_out_per_1k": price_out}


def add_model_arguments(p: argparse.ArgumentParser, resume: bool = False) -> None:
    """``--max-cost`` and ``--llm-cache``."""
    p.add_argument("--max-cost", type=float, metavar="USD",
                   help="stop starting episodes once the run's model cost (every role) reaches USD" + (
                       "; with --resume, a new budget for the rest of the run" if resume else ""))
    p.add_argument("--llm-cache", metavar="DIR",
                   help="reuse model answers across runs by request digest (a directory; off by default)")


def model_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields ``add_model_arguments``'s flags give (the cache directory made absolute, so that
    --resume works from anywhere)."""
    given: dict[str, Any] = {}
    if args.max_cost is not None:
        given["max_cost"] = args.max_cost
    if args.llm_cache is not None:
        given["llm_cache"] = str(Path(args.llm_cache).resolve())
    return given


def add_branch_arguments(p: argparse.ArgumentParser, default_name: str | None) -> None:
    """``--at-turn``, ``--branches`` and the per-branch options."""
    p.add_argument("--at-turn", type=int, metavar="K", help="the branches copy the first K turns (user and agent "
                   "turns both count: 1 is the decision point after the user's first turn)")
    p.add_argument("--branches", metavar="A,B,...", help="names of the branches" + (
        f" (default: one, {default_name!r})" if default_name else ""))
    for who in ("agent", "user"):
        p.add_argument(f"--branch-{who}", action="append", default=[], metavar="NAME:SPEC",
                       help=f"the {who} of one branch (default: the run's)")
        p.add_argument(f"--branch-{who}-opt", action="append", default=[], metavar="NAME:KEY=VALUE",
                       help=f"a {who} option of one branch, added to the run's")


def branches(args: argparse.Namespace, default_name: str | None) -> list[Branch]:
    """The branches the options of ``add_branch_arguments`` describe ([] when none are asked for)."""
    names = [n.strip() for n in args.branches.split(",")] if args.branches else (
        [default_name] if default_name else [])
    per_branch = [("--branch-agent", args.branch_agent), ("--branch-user", args.branch_user),
                  ("--branch-agent-opt", args.branch_agent_opt), ("--branch-user-opt", args.branch_user_opt)]
    if not names:
        given = next((flag for flag, values in per_branch if values), "--at-turn" if args.at_turn is not None else None)
        if given:
            raise UserError(f"{given} needs --branches NAME,...")
        return []
    if args.at_turn is None:
        raise UserError("--at-turn K is required with branches: how many turns they copy")
    fields: dict[str, dict[str, Any]] = {name: {} for name in names}
    for flag, values in per_branch:
        for value in values:
            name, sep, rest = value.partition(":")
            if not sep or name not in fields:
                raise UserError(f"{flag} {value!r}: expected NAME:{'SPEC' if flag.count('-') == 3 else 'KEY=VALUE'} "
                                f"with NAME one of the branches ({', '.join(names)})")
            key = flag[len("--branch-"):].replace("-opt", "_options")
            if key.endswith("_options"):
                fields[name].setdefault(key, {}).update(parse_options([rest], flag))
            else:
                fields[name][key] = rest
    return [Branch(name=name, at_turn=args.at_turn, **fields[name]) for name in names]


def add_derived_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a run made from another (``replay``, ``fork``): where it goes and how it runs (its budget
    and llm cache are its own, not the source run's)."""
    p.add_argument("--episode", action="append", default=[], metavar="EP",
                   help="only this episode of the source run (repeatable)")
    p.add_argument("--concurrency", type=int, help="episodes in flight (default: 32, or 4 per live agent slot)")
    p.add_argument("--durability", choices=["none", "batch", "episode"], help="as for run (default: the run's)")
    add_model_arguments(p)
    p.add_argument("--out", required=True, help="run directory to create (must be absent or empty)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")


def derived_config(args: argparse.Namespace, command: str,
                   changes: Callable[[RunConfig], dict[str, Any]]) -> RunConfig:
    """The config of a run made from ``args.run_dir`` by ``command``: the source's recorded config with
    ``changes(config)``, the options of ``add_derived_run_arguments`` and the source named."""
    run = open_source(args.run_dir)
    config = recorded_config(run)
    source = Source(command=command, run=str(Path(run.path).resolve()), run_id=run.manifest["run_id"],
                    episodes=args.episode)
    own = {"max_cost": None, "llm_cache": None, **model_settings(args)}  # not the source run's
    return msgspec.structs.replace(config, concurrency=args.concurrency, source=source,
                                   durability=args.durability or config.durability, **own, **changes(config))
