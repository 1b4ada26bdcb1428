"""Running a batch into a run directory: new runs, resumed runs, progress, interruption.

This is the I/O edge around ``runner.Batch``: it owns the run directory, the log writer, signals and
the progress display. ``dialogsim run`` is a thin layer over ``start_run`` and ``resume_run``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import signal
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import msgspec
from msgspec import UNSET
from tqdm import tqdm

from .. import __version__
from . import registry
from .calls import add_usage, total_cost
from .collector import tuned_collector
from .driver import Interrupted
from .errors import UserError
from .events import EpisodeEnded, Event, RoleUsage, RunEnded, RunStarted
from .log import DURABILITY_CHOICES, LogWriter, RunDir, read_episodes, read_events
from .oplog import get_logger
from .plugins import DEFAULT_SCENARIOS
from .derive import Source, fork_jobs, replay_jobs
from .runner import Batch, BatchSettings, Branch, Cast, Job, Logged
from .seeding import stable_hash
from .timing import parse_arrivals, parse_delay

_log = get_logger("run")


class RunConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What a run's user asked for, as typed: recorded in the manifest and in ``run_started``, and reused by
    ``--resume``.

    Besides the knobs of the batch (which ``validate`` parses into the engine's ``BatchSettings``), it names
    the scenarios, the user and the agent, how many episodes to run, and the log's durability; ``max_cost``
    (USD over every role) and ``llm_cache`` (a directory of model answers by request digest), if given.
    """

    scenarios: str = ""
    user: str = ""
    agent: str = ""
    episodes: int = 100
    seed: int = 0
    concurrency: int | None = None  # episodes in flight; None: default_concurrency's, recorded as chosen
    max_turns: int = 50
    think: str = "uniform:1,4"
    latency: str = "uniform:0.2,0.8"
    arrivals: str = "all"
    durability: str = "episode"
    user_options: dict[str, Any] = {}
    agent_options: dict[str, Any] = {}
    branches: list[Branch] = []  # forks of every episode, run after it ends (in a fork run: its episodes)
    source: Source | None = None  # the run a replay or a fork is made from
    max_cost: float | None = None  # no new episode once the run's model cost reaches it
    llm_cache: str | None = None


# Fields added after runs were first recorded: left out of a config's record while empty, so that the run
# ids (and logs) of runs that do not use them stay what they were.
_LATER_FIELDS = {"branches": [], "source": None, "max_cost": None, "llm_cache": None}


def config_record(config: RunConfig) -> dict[str, Any]:
    """A config as the manifest and ``run_started`` record it."""
    record = msgspec.to_builtins(config)
    for key, empty in _LATER_FIELDS.items():
        if record.get(key) == empty:
            del record[key]
    return record


class RunResult(msgspec.Struct, kw_only=True):
    """How a run (or its resumption) finished; ``reason`` says why a stopped run stopped."""

    run_dir: Path
    status: str
    counts: dict[str, int]
    ran: int
    reason: str = ""
    usage: dict[str, RoleUsage] = {}


DEFAULT_CONCURRENCY = 32  # episodes in flight when the agent runs in-process
EPISODES_PER_AGENT_SLOT = 4  # episodes in flight per request slot of a live agent


def default_concurrency(make_agent: Any, make_user: Any = None) -> int:
    """Episodes in flight when ``--concurrency`` is not given: 32, or four per request slot of a live agent
    and of a live (model-driven) user.

    A live participant's factory says how many requests it keeps in flight (``concurrency``). An episode in
    virtual think time cannot send, since virtual time never passes a call in flight: with one episode
    per slot and the default think and latency models about 40% of the slots sit idle; four per slot
    keep them busy (``bench/bench_http.py --delay 20``).
    """
    slots = [n for n in (getattr(make_agent, "concurrency", None), getattr(make_user, "concurrency", None))
             if n is not None]
    return DEFAULT_CONCURRENCY if not slots else EPISODES_PER_AGENT_SLOT * sum(slots)


def validate(config: RunConfig) -> BatchSettings:
    """Check a config and parse its batch knobs into the engine's settings; every problem is one UserError line.

    A config without a concurrency yet (a new run's, before its agent is made) gets the in-process default.
    """
    if config.episodes < 0:
        raise UserError(f"--episodes must be >= 0, got {config.episodes}")
    if config.concurrency is not None and config.concurrency < 1:
        raise UserError(f"--concurrency must be >= 1, got {config.concurrency}")
    if config.max_turns < 2:
        raise UserError(f"--max-turns must be >= 2, got {config.max_turns}")
    if not 0 <= config.seed < 2**63:
        raise UserError(f"--seed must be an integer in [0, 2**63), got {config.seed}")
    if config.durability not in DURABILITY_CHOICES:
        raise UserError(f"--durability must be one of {', '.join(DURABILITY_CHOICES)}, got {config.durability!r}")
    if config.max_cost is not None and not config.max_cost >= 0:
        raise UserError(f"--max-cost must be a number of USD >= 0, got {config.max_cost}")
    _refuse_secrets(config)
    _check_branches(config.branches)
    return BatchSettings(seed=config.seed, concurrency=config.concurrency or DEFAULT_CONCURRENCY,
                         max_turns=config.max_turns, think=parse_delay(config.think, "--think"),
                         latency=parse_delay(config.latency, "--latency"), arrivals=parse_arrivals(config.arrivals))


_BRANCH_NAME = re.compile(r"[A-Za-z0-9_.]+")


def _check_branches(branches: list[Branch]) -> None:
    """Branch names are unique words (they end episode ids); a branch copies a number of turns >= 0."""
    seen: set[str] = set()
    for branch in branches:
        if not _BRANCH_NAME.fullmatch(branch.name):
            raise UserError(f"branch name {branch.name!r}: use letters, digits, '_' and '.'")
        if branch.name in seen:
            raise UserError(f"branch {branch.name!r} is named twice")
        seen.add(branch.name)
        if branch.at_turn < 0:
            raise UserError(f"branch {branch.name!r}: --at-turn must be >= 0, got {branch.at_turn}")


# Query-parameter names that usually hold a credential.
_SECRET_NAME = re.compile(r"key|token|secret|passw|auth|credential|signature|^sig$", re.IGNORECASE)


def _refuse_secrets(config: RunConfig) -> None:
    """Refuse a config that would write a credential into the manifest and every ``episode_started``."""
    for what, spec in (("--agent", config.agent), ("--user", config.user)):
        parts = urllib.parse.urlsplit(spec.partition(":")[2])
        if parts.scheme in ("http", "https") and ("@" in parts.netloc or any(
                _SECRET_NAME.search(name) for name, _ in urllib.parse.parse_qsl(parts.query))):
            raise UserError(f"{what}: the URL carries a credential (user:password@ or a key in the query), which "
                            f"would be written to the run directory; pass it with --api-key-env VAR instead")


def absolute_scenarios(spec: str) -> str:
    """A scenario spec whose pack directory is made absolute, so that --resume works from any directory."""
    if spec and spec not in registry.names("scenarios"):
        if _absolute(spec) != spec:
            return _absolute(spec)
        name, arg = registry.parse_spec(spec)
        if arg and name in registry.names("scenarios"):
            return f"{name}:{_absolute(arg)}"
    return spec


def _absolute(arg: str) -> str:
    """``PATH[#services][?options]`` with PATH made absolute when it exists; else ``arg`` unchanged."""
    cut = min((i for i in (arg.find("#"), arg.find("?")) if i >= 0), default=len(arg))
    path, rest = arg[:cut], arg[cut:]
    return str(Path(path).resolve()) + rest if path and Path(path).exists() else arg


def run_id_for(config: RunConfig) -> str:
    """A run id that depends only on the config, so the same seed gives the same events."""
    return f"run-{stable_hash(json.dumps(config_record(config), sort_keys=True)):016x}"


class Casting:
    """The makers of a run's users and agents: the run's own, and those its branches name, each made once (and
    handed the run's ``--llm-cache``, if it calls a model)."""

    def __init__(self, config: RunConfig, scenarios: Any) -> None:
        self.config, self.scenarios = config, scenarios
        self.factories: dict[str, Any] = {}
        self.casts: dict[str, Cast] = {}
        self.make_user = self.factory("user", config.user, config.user_options)
        self.make_agent = self.factory("agent", config.agent, config.agent_options)
        self.cast = Cast(self.make_user, self.make_agent, config.user, config.agent)
        # the scenario set's branches, else the agent's (an agent with actions forks into its other actions)
        hook = getattr(scenarios, "branches", None) or getattr(self.make_agent, "branches", None)
        self.plan: Callable[[list[Event]], list[Branch]] | None = None
        if config.source is None and (config.branches or hook is not None):
            static = list(config.branches)
            self.plan = (lambda events: static + list(hook(events))) if hook is not None else (lambda events: static)
        if config.llm_cache is not None:
            for branch in config.branches:
                self.of(branch)
            if not any(hasattr(f, "use_llm_cache") for f in self.factories.values()):
                raise UserError(f"--llm-cache {config.llm_cache}: neither the user ({config.user}) nor the agent "
                                f"({config.agent}) calls a model")

    def factory(self, kind: str, spec: str, options: dict[str, Any]) -> Any:
        """The maker of ``kind`` ("user" or "agent") for ``spec`` with ``options``."""
        key = json.dumps([kind, spec, options], sort_keys=True, default=str)
        made = self.factories.get(key)
        if made is None:
            build = registry.user_factory if kind == "user" else registry.agent_factory
            made = self.factories[key] = build(spec, self.scenarios, options)
            if self.config.llm_cache is not None and hasattr(made, "use_llm_cache"):
                made.use_llm_cache(self.config.llm_cache)
        return made

    def of(self, branch: Branch) -> Cast:
        """Who plays ``branch``: its user and agent (the run's unless it names others), with its options added
        to the run's (or alone, for a user or agent the run does not have)."""
        cast = self.casts.get(branch.name)
        if cast is None:
            config = self.config
            user, agent = branch.user or config.user, branch.agent or config.agent
            user_options = {**(config.user_options if user == config.user else {}), **branch.user_options}
            agent_options = {**(config.agent_options if agent == config.agent else {}), **branch.agent_options}
            cast = self.casts[branch.name] = Cast(self.factory("user", user, user_options),
                                                  self.factory("agent", agent, agent_options), user, agent)
        return cast

    def jobs(self) -> list[Job]:
        """The run's jobs: episodes 0 to N - 1, or those made from its source run."""
        config, source = self.config, self.config.source
        if source is None:
            return [Job(i) for i in range(config.episodes)]
        with tuned_collector():  # the decoded prefixes live through the run
            return self._derived_jobs(source)

    def _derived_jobs(self, source: Source) -> list[Job]:
        """The jobs of a fork or a replay of ``source``."""
        config = self.config
        if source.command == "fork":
            jobs, short = fork_jobs(source, config.branches, self.of)
            if short:
                _log.warning("episodes too short to fork (no turn after the copied ones), left out", source=source.run,
                             episodes=short)
            return jobs
        probe = self.make_user()
        recorded = not getattr(probe, "deterministic", True)
        return replay_jobs(source, self.cast, recorded, self.make_user if hasattr(probe, "warm") else None,
                           calls_model=hasattr(self.make_user, "use_llm_cache"))


def start_run(out: str | Path, config: RunConfig, *, progress: bool = True) -> RunResult:
    """Run a new batch into the empty (or absent) directory ``out``: episodes 0 to N - 1, or (with a source
    in the config) those made from another run's log, their number recorded as the run's."""
    settings = validate(config)
    RunDir.refuse_existing(out)
    scenarios = registry.load_scenarios(config.scenarios or None)
    spec = absolute_scenarios(config.scenarios or DEFAULT_SCENARIOS)
    config = msgspec.structs.replace(config, scenarios=spec,
                                     user=config.user or getattr(scenarios, "default_user", "scripted"),
                                     agent=config.agent or getattr(scenarios, "default_agent", "scripted"))
    casting = Casting(config, scenarios)
    if config.concurrency is None:  # chosen now and recorded, so that --resume runs as many at once
        config = msgspec.structs.replace(config, concurrency=default_concurrency(casting.make_agent,
                                                                                 casting.make_user))
        settings.concurrency = config.concurrency
    jobs = casting.jobs()
    if config.source is not None:
        config = msgspec.structs.replace(config, episodes=len(jobs))
    casting.config = config
    run = RunDir.create(out, run_id=run_id_for(config), config=config_record(config), seed=config.seed)
    return _execute(run, config, settings, scenarios, casting, jobs, Counter(), {}, 0, progress)


def resume_run(out: str | Path, *, progress: bool = True, max_cost: float | None = None) -> RunResult:
    """Finish a run: ended episodes hold their slots as logged, unfinished ones continue from their logged
    prefix (checked), the rest run; every episode starts when it would have in an uninterrupted run.

    ``max_cost`` replaces the run's budget (a stopped run goes on with a higher one)."""
    run = RunDir.open(out)
    imported = run.imported_by()
    if imported:
        raise UserError(f"{run.path}: an imported corpus, not a simulated run, so there is nothing to resume; "
                        f"to redo it, import again into a new directory: dialogsim {imported} --out NEW_DIR")
    config = recorded_config(run)
    if max_cost is not None:
        config = msgspec.structs.replace(config, max_cost=max_cost)
        run.manifest["config"] = config_record(config)
    settings = validate(config)
    scenarios = registry.load_scenarios(config.scenarios)
    casting = Casting(config, scenarios)
    jobs = casting.jobs()
    # Repair torn tails before reading, so the tapes match what the writer will append to.
    for shard in run.shards():
        LogWriter(shard, "none").close()
    counts: Counter[str] = Counter()
    usage: dict[str, RoleUsage] = {}
    logged = read_logged(run, counts, usage, keep_ended=casting.plan is not None)
    run_seq = sum(1 for e in read_events(run, types={"run_started", "run_ended"}))
    _log.info("resuming", run=str(run.path), ended=len(logged.ends),
              unfinished=sum(1 for ep in logged.events if ep not in logged.ends))
    return _execute(run, config, settings, scenarios, casting, jobs, counts, usage, run_seq, progress, resumed=True,
                    logged=logged)


def recorded_config(run: RunDir) -> RunConfig:
    """The config a run's manifest records (refused for a run another command wrote)."""
    recorded = run.manifest.get("config")
    made_by = recorded.get("command") if isinstance(recorded, dict) else None
    if made_by:  # a run another command wrote (the RL environment's): its episodes' decisions came from outside
        raise UserError(f"{run.path}: written by {made_by!r}, not by dialogsim run, so its episodes cannot be run "
                        f"again (resumed, verified, replayed or forked)")
    try:
        return msgspec.convert(run.manifest.get("config"), RunConfig)
    except msgspec.ValidationError as exc:
        raise UserError(f"{run.path / 'manifest.json'}: bad config ({exc})") from None


def read_logged(run: RunDir, counts: Counter[str] | None = None, usage: dict[str, RoleUsage] | None = None, *,
                check: set[str] | None = None, keep_ended: bool = False) -> Logged:
    """What the log of ``run`` holds: each ended episode's end time, and the events of the unfinished ones (and
    of ended ones in ``check`` or, with ``keep_ended``, all); ``counts`` gets the ended ones' outcomes, ``usage``
    their model usage per role."""
    ends: dict[str, float] = {}
    events: dict[str, list[Event]] = {}
    for episode in read_episodes(run, include_unfinished=True):
        last = episode[-1]
        if isinstance(last, EpisodeEnded):
            ends[last.ep] = last.t
            if counts is not None:
                counts[last.outcome] += 1
            if usage is not None and last.usage is not UNSET:
                add_usage(usage, last.usage)
            if keep_ended or (check is not None and last.ep in check):
                events[last.ep] = episode
        else:
            events[last.ep] = episode
    return Logged(ends, events, check or ())


def _execute(run: RunDir, config: RunConfig, settings: BatchSettings, scenarios: Any, casting: Casting,
             jobs: list[Job], counts: Counter[str], usage: dict[str, RoleUsage], run_seq: int, progress: bool,
             resumed: bool = False, logged: Logged | None = None) -> RunResult:
    run_id = run.manifest["run_id"]
    writer = LogWriter(run.path / run.manifest["shards"][0], config.durability)
    writer.append(RunStarted(run=run_id, ep="", seq=run_seq, t=0.0, wall=time.time_ns(),
                             config=config_record(config), code_version=__version__, seed=config.seed,
                             resumed=resumed))
    run.manifest["status"] = "running"
    run.save_manifest()
    done = sum(counts.values())
    bar = tqdm(total=len(jobs), initial=done, unit="ep", desc="episodes",
               disable=not (progress and sys.stderr.isatty()), file=sys.stderr, mininterval=0.25)
    ticker = _Ticker(len(jobs), enabled=progress and not sys.stderr.isatty(), done=done)

    budget = Budget(config.max_cost, usage)

    def episode_ended(event: EpisodeEnded) -> None:
        counts[event.outcome] += 1
        if event.usage is not UNSET:
            add_usage(usage, event.usage)
            budget.check(batch)
        bar.update(1)
        ticker.tick()

    batch = Batch(run_id=run_id, scenarios=scenarios, make_user=casting.make_user, make_agent=casting.make_agent,
                  settings=settings, sink=writer, user_spec=config.user, agent_spec=config.agent,
                  on_episode_end=episode_ended, logged=logged, plan=casting.plan, cast_of=casting.of)
    budget.check(batch)  # a resumed run whose budget is spent starts nothing new
    status = "completed"
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def stop(signum: int, frame: Any) -> None:
        batch.driver.request_stop()

    for s in previous:
        signal.signal(s, stop)
    try:
        asyncio.run(run_batch(batch, jobs, *casting.factories.values()))
    except Interrupted:
        status = "interrupted"
    except BaseException:
        status = "failed"
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        bar.close()
        total = dict(counts)
        total["episodes"] = sum(counts.values())
        reason = ""
        if status == "completed" and batch.left:  # the budget left episodes unstarted
            status, reason = "stopped", budget.reason(batch.left)
        writer.append(RunEnded(run=run_id, ep="", seq=run_seq + 1, t=batch.env.now, wall=time.time_ns(),
                               status=status, counts=total, usage=usage or UNSET, reason=reason or UNSET))
        writer.close()
        run.manifest.update(status=status, counts=total)
        run.manifest.pop("reason", None)
        if reason:
            run.manifest["reason"] = reason
        if usage:
            run.manifest["usage"] = msgspec.to_builtins(usage)
        run.save_manifest()
    ran = sum(counts.values())
    if batch.diverged:
        ep, first = next(iter(batch.diverged.items()))
        _log.warning("episodes diverged from their log", episodes=len(batch.diverged), first=ep, at=str(first))
    _log.info("run " + status, run=str(run.path), **{k: v for k, v in sorted(total.items())},
              **({"reason": reason} if reason else {}))
    return RunResult(run_dir=run.path, status=status, counts=total, ran=ran, reason=reason, usage=usage)


class Budget:
    """``--max-cost``: once the run's model cost (every role, summed over ended episodes) reaches it, no new
    episode starts; the episodes in flight (and those the log holds) finish, so the run may end a little over it."""

    def __init__(self, max_cost: float | None, usage: dict[str, RoleUsage]) -> None:
        self.max_cost = max_cost
        self.usage = usage

    def check(self, batch: Batch) -> None:
        """Stop the batch starting episodes when the budget is spent."""
        if self.max_cost is not None and not batch.stopping and total_cost(self.usage) >= self.max_cost:
            batch.stop_starting()

    def reason(self, left: int) -> str:
        """Why the run stopped, for the manifest and run_ended."""
        return (f"--max-cost {self.max_cost:g} USD spent ({total_cost(self.usage):.4f} USD); {left} episode"
                f"{'s' if left != 1 else ''} not started (finish with: dialogsim run --resume RUN_DIR "
                f"--max-cost HIGHER)")


async def run_batch(batch: Batch, jobs: list[Job], *factories: Any) -> None:
    """Run a batch's jobs, then close the factories that have ``aclose`` (live agents' clients)."""
    try:
        await batch.run(jobs)
    finally:
        for factory in factories:
            close = getattr(factory, "aclose", None)
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    await result


class _Ticker:
    """Progress for non-terminal stderr: one log line every few seconds."""

    def __init__(self, total: int, enabled: bool, every: float = 5.0, done: int = 0) -> None:
        self.total, self.enabled, self.every = total, enabled, every
        self.done = done
        self.next_at = time.monotonic() + every

    def tick(self) -> None:
        self.done += 1
        if self.enabled and (self.done & 63) == 0 and time.monotonic() >= self.next_at:
            self.next_at = time.monotonic() + self.every
            _log.info("progress", episodes=self.done, of=self.total)

