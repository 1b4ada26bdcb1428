"""``dialogsim events``: print a run's events, optionally one episode or some event types."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from msgspec import UNSET

from ..codec import encode, to_builtins
from ..errors import UserError
from ..events import AgentTurn, EVENT_TYPES, OpaqueEvent, UserTurn, event_type
from ..log import RunDir, read_events


def configure(p: argparse.ArgumentParser) -> None:
    """The ``events`` command's arguments."""
    p.add_argument("run_dir")
    p.add_argument("--episode", action="append", help="only this episode (repeatable)")
    p.add_argument("--type", action="append", dest="types", help="only this event type (repeatable)")
    p.add_argument("--json", action="store_true", help="one JSON object per line, as stored")
    p.add_argument("--skip-corrupt", action="store_true", help="skip corrupt lines and count them")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    run = RunDir.open(args.run_dir)
    for name in args.types or ():
        if name not in EVENT_TYPES:
            raise UserError(f"--type {name}: unknown event type; known: {', '.join(sorted(EVENT_TYPES))}")
    wanted = set(args.episode) if args.episode else None
    types = set(args.types) if args.types else None
    seen: set[str] = set()  # episodes met, before the type filter, to tell an unknown --episode
    stats: dict[str, int] = {}
    out = sys.stdout
    for event in read_events(run, episodes=wanted, skip_corrupt=args.skip_corrupt, stats=stats):
        seen.add(event.ep)
        if types is not None and event_type(event) not in types:
            continue
        out.write((encode(event).decode() if not isinstance(event, OpaqueEvent) else
                   _json(to_builtins(event))) if args.json else describe(event))
        out.write("\n")
    if stats.get("corrupt"):
        print(f"skipped {stats['corrupt']} corrupt line(s)", file=sys.stderr)
    if wanted is not None and wanted - seen:
        missing = sorted(wanted - seen)
        raise UserError(f"--episode {', '.join(missing)}: no such episode in {run.path}")
    return 0


def _json(obj: Any) -> str:
    import json
    return json.dumps(obj, ensure_ascii=False)


def describe(event: Any) -> str:
    """One readable line for an event."""
    head = f"{event.ep or '-':>8} {event.seq:>4} t={event.t:9.2f} {event_type(event):<15}"
    if isinstance(event, (UserTurn, AgentTurn)):
        acts = " ".join(f"{a.act}({a.slot}{'=' + '|'.join(a.values) if a.values else ''})"
                        for f in event.frames for a in f.actions)
        if event.raw_act is not UNSET:  # an imported act that is not SGD-shaped (TC-Bot): shown as recorded
            acts = _json(event.raw_act)
        return f"{head} {event.utterance!r}" + (f"  [{acts}]" if acts else "")
    payload = {k: v for k, v in to_builtins(event).items() if k not in ("type", "run", "ep", "seq", "t", "wall", "v")}
    payload.pop("scenario", None)
    return f"{head} {_json(payload)}"
