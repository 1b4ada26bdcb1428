"""Runs made from another run's log: the jobs of a replay (the same users against another agent) and of a
fork (episodes that copy a logged prefix, then go on live). See docs/prefix.md.

A derived run records its ``Source`` in its config, so that ``--resume`` (and ``verify``) rebuild the
same jobs from the same source log.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec

from . import rawlog
from .calls import recorded_calls, reused
from .errors import UserError
from .events import EpisodeStarted, Event
from .log import RunDir
from .recorded import RecordedUser
from .runner import Branch, Cast, Job, branch_id
from .tape import Fork, RawEpisode, fork_at_turn


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


def open_recorded(source: Source) -> RunDir:
    """The source run of a derived run, checked to be the one it was made from."""
    run = RunDir.open(source.run)
    if run.manifest.get("run_id") != source.run_id:
        raise UserError(f"{run.path}: run id {run.manifest.get('run_id')!r} is not the {source.run_id!r} this run was "
                        "made from (the source run was replaced)")
    return run


def _found(source: Source, seen: set[str]) -> None:
    """Refuse a source that does not hold every episode it names (ended)."""
    missing = sorted(set(source.episodes) - seen)
    if missing:
        raise UserError(f"{source.run}: no ended episode {missing[0]!r}")


def replay_jobs(source: Source, cast: Cast, user_is_recorded: bool,
                make_live_user: Callable[[], object] | None, calls_model: bool = False) -> list[Job]:
    """One job per source episode (forks aside), in episode-id order: its scenario and seeds, nothing copied; a
    recorded user plays its logged turns back (``RecordedUser``), handing over to ``make_live_user()`` when it
    can warm up; a user that ``calls_model`` is offered its logged model calls (the same request, the same
    answer: ``calls.reused``)."""
    run, wanted = open_recorded(source), frozenset(source.episodes) or None
    found: list[tuple[str, Fork, Cast]] = []
    if user_is_recorded:  # the cases that read more than the start of each episode
        for ep, lines in rawlog.episodes(run, wanted):
            events = RawEpisode(lines)
            started = events[0]
            if type(started) is EpisodeStarted and started.branch is None:
                found.append((ep, Fork(started=started),
                              Cast(_recorded(list(events), make_live_user), cast.make_agent, started.user, cast.agent)))
    elif calls_model:
        for ep, lines in rawlog.episodes(run, wanted):
            events = RawEpisode(lines)
            started = events[0]
            if type(started) is EpisodeStarted and started.branch is None:
                found.append((ep, Fork(started=started, calls=reused(recorded_calls(events, "user"))), cast))
    else:
        for started in rawlog.starts(run, wanted):
            if started.branch is None:
                found.append((started.ep, Fork(started=started), cast))
    _found(source, {ep for ep, _, _ in found})
    found.sort(key=lambda item: item[0])
    return [Job(i, ep=ep, fork=fork, cast=job_cast) for i, (ep, fork, job_cast) in enumerate(found)]


def _recorded(events: list[Event], make_live_user: Callable[[], object] | None) -> Callable[[], RecordedUser]:
    return lambda: RecordedUser(events, make_live_user() if make_live_user is not None else None)


def fork_jobs(source: Source, branches: list[Branch], cast_of: Callable[[Branch], Cast]) -> tuple[list[Job], int]:
    """One job per source episode and branch, in episode-id order, copying the branch's ``at_turn`` turns; and
    the number of source episodes passed over for having fewer turns than a branch copies."""
    run, wanted = open_recorded(source), frozenset(source.episodes) or None
    found, short, seen = [], 0, set()
    turns = max(branch.at_turn for branch in branches)
    for ep, lines in rawlog.episodes(run, wanted):
        seen.add(ep)
        events = RawEpisode(lines)
        # decoded no further than needed: the copied turns, and the next one (a fork needs a turn after them)
        prefix = [events[seq] for seq in range(_prefix_end(lines, turns + 1))]
        forks = [(branch, fork_at_turn(prefix, branch.at_turn, branch.name)) for branch in branches]
        if any(fork is None for _, fork in forks):
            short += 1
            continue
        found.extend((ep, n, branch, fork) for n, (branch, fork) in enumerate(forks))
    _found(source, seen)
    found.sort(key=lambda item: item[:2])
    return [Job(i, ep=branch_id(ep, branch.name), fork=fork, cast=cast_of(branch))
            for i, (ep, _, branch, fork) in enumerate(found)], short


def _prefix_end(lines: list[bytes], turns: int) -> int:
    """The number of an episode's lines up to its ``turns``-th turn (all of them if it has fewer)."""
    seen, end = 0, 1  # its episode_started, at least
    while seen < turns and end < len(lines):
        if lines[end].startswith(_USER_TURN) or lines[end].startswith(_AGENT_TURN):
            seen += 1
        end += 1
    return end


_USER_TURN, _AGENT_TURN = b'{"type":"user_turn"', b'{"type":"agent_turn"'
