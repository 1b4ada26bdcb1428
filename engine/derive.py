"""Runs made from another run's log: the jobs of a replay (the same users against another agent) and of a
fork (episodes that copy a logged prefix, then go on live). See docs/prefix.md.

A derived run records its ``Source`` in its config, so that ``--resume`` (and ``verify``) rebuild the
same jobs from the same source log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import msgspec

from .errors import UserError
from .events import EpisodeStarted, Event
from .log import RunDir, read_episodes
from .recorded import RecordedUser
from .runner import Branch, Cast, Job, branch_id
from .tape import Fork, fork_at_turn


class Source(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The run a replay or a fork is made from: its directory and run id, and the episodes used ([]: every
    episode that ended)."""

    command: Literal["replay", "fork"]
    run: str
    run_id: str
    episodes: list[str] = []


def open_source(path: str | Path) -> RunDir:
    """The run directory a replay or a fork reads, refused when it is not a simulated run."""
    run = RunDir.open(path)
    imported = run.imported_by()
    if imported:
        raise UserError(f"{run.path}: an imported corpus ({imported}); replay and fork need a simulated run, whose "
                        "manifest records the users, scenarios and timing to run again")
    return run


def source_episodes(source: Source) -> Iterator[list[Event]]:
    """The ended episodes of a source run that it names (all when it names none), in log order."""
    run = RunDir.open(source.run)
    if run.manifest.get("run_id") != source.run_id:
        raise UserError(f"{run.path}: run id {run.manifest.get('run_id')!r} is not the {source.run_id!r} this run was "
                        "made from (the source run was replaced)")
    wanted = set(source.episodes) or None
    seen = set()
    for events in read_episodes(run, episodes=wanted):
        if type(events[0]) is EpisodeStarted:
            seen.add(events[0].ep)
            yield events
    missing = sorted((wanted or set()) - seen)
    if missing:
        raise UserError(f"{run.path}: no ended episode {missing[0]!r}")


def replay_jobs(source: Source, cast: Cast, user_is_recorded: bool,
                make_live_user: Callable[[], object] | None) -> list[Job]:
    """One job per source episode (forks aside), in episode-id order: its scenario and seeds, nothing copied; a
    recorded user plays its logged turns back (``RecordedUser``), handing over to ``make_live_user()`` when it
    can warm up."""
    found = []
    for events in source_episodes(source):
        started = events[0]
        if started.branch is not None:
            continue
        job_cast = cast
        if user_is_recorded:  # the only case that keeps more than the start of each episode
            job_cast = Cast(_recorded(events, make_live_user), cast.make_agent, started.user, cast.agent)
        found.append((started.ep, Fork(started=started), job_cast))
    found.sort(key=lambda item: item[0])
    return [Job(i, ep=ep, fork=fork, cast=job_cast) for i, (ep, fork, job_cast) in enumerate(found)]


def _recorded(events: list[Event], make_live_user: Callable[[], object] | None) -> Callable[[], RecordedUser]:
    return lambda: RecordedUser(events, make_live_user() if make_live_user is not None else None)


def fork_jobs(source: Source, branches: list[Branch], cast_of: Callable[[Branch], Cast]) -> tuple[list[Job], int]:
    """One job per source episode and branch, in episode-id order, copying the branch's ``at_turn`` turns; and
    the number of source episodes passed over for having fewer turns than a branch copies."""
    found, short = [], 0
    for events in source_episodes(source):
        forks = [(branch, fork_at_turn(events, branch.at_turn, branch.name)) for branch in branches]
        if any(fork is None for _, fork in forks):
            short += 1
            continue
        found.extend((events[0].ep, n, branch, fork) for n, (branch, fork) in enumerate(forks))
    found.sort(key=lambda item: item[:2])
    return [Job(i, ep=branch_id(ep, branch.name), fork=fork, cast=cast_of(branch))
            for i, (ep, _, branch, fork) in enumerate(found)], short
