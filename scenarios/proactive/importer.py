"""``dialogsim import trajectories FILE --out RUN``: a JSONL file of trajectory records as a run.

One episode per record, in file order. A record with ``is_mainline: false`` becomes a branch episode
(``branch`` = its action); it is linked to the mainline just before it (``parent`` = that mainline's
decision point) when it belongs there as the original generator writes it: same state id, its
``mainline_action`` is that mainline's action, and its action comes after the mainline's other branches
in LOW, MID, HIGH order. Anything else is kept as it is (see records.py), so that ``project --to
trajectories`` writes the file back unchanged and ``--to preference_pairs`` sees the same records.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from ...engine.errors import UserError
from ...engine.events import EpisodeRef, Event
from ...engine.log import write_events
from ...engine.runner import episode_id
from .records import DECISION_SEQ, branch_rank, record_events

_MISSING = object()


class TrajectoryImport:
    """Counts of one import."""

    def __init__(self) -> None:
        self.records = 0
        self.mainlines = 0
        self.branches = 0  # linked to their mainline
        self.unlinked = 0  # branches without a mainline before them (kept as they are)
        self.kept_as_is = 0  # records whose shape the events alone do not give back


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for every non-blank line, each checked to be a record the reward step can read."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc})") from None
    with f:
        try:
            for lineno, line in enumerate(f, 1):  # iterating the file splits lines as the original does
                if line.strip():
                    yield lineno, check_record(path, lineno, line)
        except UnicodeDecodeError as exc:
            raise UserError(f"{path}: not UTF-8 text ({exc})") from None


def check_record(path: Path, lineno: int, line: str) -> dict[str, Any]:
    """The record on one line, or a UserError naming the line and what is wrong with it."""
    def fail(problem: str) -> UserError:
        return UserError(f"{path}: line {lineno}: {problem}")

    try:
        record = json.loads(line, parse_constant=_no_constants, parse_float=_finite)
    except ValueError as exc:
        raise fail(f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise fail("not a JSON object")
    state = record.get("state")
    if not isinstance(state, dict) or "domain" not in state:
        raise fail("no state (an object with a domain)")
    if isinstance(state.get("id"), (dict, list)):
        raise fail("the state's id is not a string or a number")
    if not isinstance(record.get("action"), str):
        raise fail("no action (a string)")
    if not isinstance(record.get("assistant_msg"), str):
        raise fail("no assistant_msg (a string)")
    reaction = record.get("user_reaction")
    if not isinstance(reaction, dict) or not isinstance(reaction.get("meta"), dict):
        raise fail("no user_reaction with a meta object")
    try:
        msgspec.json.encode(record)
    except (msgspec.EncodeError, OverflowError, UnicodeEncodeError) as exc:
        raise fail(f"cannot be stored as an event ({exc})") from None
    return record


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is too large for a float")
    return value


class Linker:
    """Which mainline a branch record belongs to: the one just before it, if it fits there (see the module)."""

    def __init__(self) -> None:
        self.mainline: tuple[str, Any, str] | None = None  # (episode, state id, action)
        self.last_rank = 0

    def parent(self, ep: str, record: dict[str, Any]) -> EpisodeRef | None:
        """The parent of ``record`` (episode ``ep``) if it is a linked branch; remembers mainlines."""
        if record.get("is_mainline") is True:
            self.mainline = (ep, record["state"].get("id", _MISSING), record["action"])
            self.last_rank = branch_rank(None)
            return None
        rank = branch_rank(record["action"])
        fits = (record.get("is_mainline") is False and self.mainline is not None
                and record["state"].get("id", _MISSING) == self.mainline[1]
                and record.get("mainline_action") == self.mainline[2] and type(record["mainline_action"]) is str
                and record["action"] != self.mainline[2] and rank > self.last_rank)
        if not fits:
            self.mainline = None  # a record out of place ends the group: later ones may not jump over it
            return None
        self.last_rank = rank
        return EpisodeRef(self.mainline[0], DECISION_SEQ)


def trajectory_events(path: Path, run_id: str, counts: TrajectoryImport) -> Iterator[Event]:
    """The events of every record of the file, in file order."""
    linker = Linker()
    for index, (_, record) in enumerate(read_records(path)):
        ep = episode_id(index)
        parent = linker.parent(ep, record)
        events = record_events(record, run_id, ep, parent)
        counts.records += 1
        if events[0].branch is None:
            counts.mainlines += 1
        elif parent is not None:
            counts.branches += 1
        else:
            counts.unlinked += 1
        counts.kept_as_is += "layout" in events[0].scenario
        yield from events
    if counts.records == 0:
        raise UserError(f"{path}: no trajectory records")


def import_trajectories(src: str | Path, out: str | Path, *, run_id: str | None = None) -> TrajectoryImport:
    """Import a trajectories JSONL file into a new run directory; nothing is left behind on error."""
    src = Path(src)
    if not src.is_file():
        raise UserError(f"{src}: no such file")
    counts = TrajectoryImport()
    run_id = run_id or f"trajectories-{src.stem}"
    config = {"command": "import trajectories", "source": str(src.resolve())}
    write_events(out, trajectory_events(src, run_id, counts), run_id=run_id, config=config)
    return counts
