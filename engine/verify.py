"""Verifying a run: its episodes re-simulated from their logged seeds and configuration, every event compared
with the log (wall clock aside), the whole schedule run again so that virtual times are compared exactly.

Each episode to check runs with its full log as its tape in check mode (engine/tape.py); the others that
ended hold their slots as logged (phantoms); nothing is written. Participants that cannot be re-run are read
back from the log, so a run with a live agent verifies the user, the world and the judge around it.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

import msgspec
from tqdm import tqdm

from . import rawlog, registry
from .errors import UserError
from .events import Event
from .log import RunDir
from .runner import Batch, Logged, Sink, episode_id
from .session import Casting, recorded_config, run_batch, validate
from .tape import Divergence, RawEpisode


class VerifyResult(msgspec.Struct, kw_only=True):
    """What a verification found: the episodes checked, and how each diverging one first differed."""

    checked: list[str]
    diverged: dict[str, Divergence]
    episodes: int  # that ended in the run


class _Discard(Sink):
    """A sink for a verification: nothing is written (events past an episode's log follow a divergence)."""

    def append(self, event: Event) -> None:
        pass

    def append_many(self, events: list[Event]) -> None:
        pass


class _Pulled:
    """The logged lines of the episodes to check, read from the log as the batch asks for them: episodes that
    end before the one asked for wait in memory until asked (about as many as run at once)."""

    def __init__(self, run: RunDir, wanted: frozenset[str]) -> None:
        self.wanted = wanted
        self.episodes = rawlog.episodes(run, wanted)
        self.waiting: dict[str, RawEpisode] = {}

    def get(self, ep: str, default: Any = None) -> Any:
        if ep not in self.wanted:
            return default
        events = self.waiting.pop(ep, None)
        while events is None:
            found = next(self.episodes, None)
            if found is None:
                return default
            if found[0] == ep:
                events = RawEpisode(found[1])
            else:
                self.waiting[found[0]] = RawEpisode(found[1])
        return events

    def __contains__(self, ep: str) -> bool:
        return ep in self.wanted


def verify_run(path: str | Path, *, episodes: int | None = None, sample: int | None = None, seed: int = 0,
               progress: bool = True) -> VerifyResult:
    """Verify the run in ``path``: every ended episode, the first ``episodes`` of them (in run order) or a
    ``sample`` of that many drawn with ``seed``."""
    run = RunDir.open(path)
    imported = run.imported_by()
    if imported:
        raise UserError(f"{run.path}: an imported corpus ({imported}): there is no simulation to verify")
    config = recorded_config(run)
    settings = validate(config)
    scenarios = registry.load_scenarios(config.scenarios)
    casting = Casting(config, scenarios)
    jobs = casting.jobs()
    ends, started = rawlog.ends(run)
    if started - set(ends) or len(ends) != run.manifest.get("counts", {}).get("episodes", len(ends)):
        ends, started = rawlog.ends(run, any_layout=True)  # lines the writer did not write, or a run not closed
    unfinished = sorted(started - set(ends))
    if unfinished:
        raise UserError(f"{run.path}: {len(unfinished)} episode(s) did not end (first {unfinished[0]}); finish the run "
                        f"with: dialogsim run --resume {run.path}")
    order = [job.ep or episode_id(job.index) for job in jobs]
    known = set(order)
    order += sorted(ep for ep in ends if ep not in known)  # branches made in the run, after the rest
    ended = [ep for ep in order if ep in ends]
    chosen = _choose(ended, episodes, sample, seed)
    wanted = frozenset(ended) if casting.plan is not None else frozenset(chosen)  # branches need their mainline
    logged = Logged(ends, _Pulled(run, wanted), check=chosen, run_new=False)
    bar = tqdm(total=len(chosen), unit="ep", desc="verified", disable=not (progress and sys.stderr.isatty()),
               file=sys.stderr, mininterval=0.25)
    checked = set(chosen)
    batch = Batch(run_id=run.manifest["run_id"], scenarios=scenarios, make_user=casting.make_user,
                  make_agent=casting.make_agent, settings=settings, sink=_Discard(), user_spec=config.user,
                  agent_spec=config.agent, logged=logged, plan=casting.plan, cast_of=casting.of,
                  on_episode_end=lambda event: bar.update(1) if event.ep in checked else None)
    try:
        asyncio.run(run_batch(batch, jobs, *casting.factories.values()))
    finally:
        bar.close()
    return VerifyResult(checked=chosen, diverged={ep: batch.diverged[ep] for ep in chosen if ep in batch.diverged},
                        episodes=len(ended))


def _choose(ended: list[str], episodes: int | None, sample: int | None, seed: int) -> list[str]:
    """The episodes to check: all, the first ``episodes``, or a seeded ``sample`` (kept in run order)."""
    if episodes is not None and sample is not None:
        raise UserError("give --episodes N or --sample K, not both")
    for flag, value in (("--episodes", episodes), ("--sample", sample)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be >= 1, got {value}")
    if episodes is not None:
        return ended[:episodes]
    if sample is not None and sample < len(ended):
        picked = set(random.Random(seed).sample(range(len(ended)), sample))
        return [ep for i, ep in enumerate(ended) if i in picked]
    return list(ended)
