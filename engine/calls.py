"""Recorded model calls and per-role usage: what a log holds of the model calls of users, agents and judges.

A participant that calls a model reports each call on its reply (``contracts.ModelCall``); the runner logs it
as a ``model_called`` event before the step it produced. ``recorded_calls`` reads them back from a logged
prefix, so that a resumed, verified or forked episode answers those requests from the log instead of the model
(``RecordedCalls``, lazily; ``reused``, a replay's user answered from its source episode).
``UsageMeter`` sums an episode's usage and cost per role; ``add_usage`` sums episodes into a run's totals.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import msgspec

from .contracts import FaultReport, ModelCall
from .events import AgentTurn, Fault, ModelCalled, RoleUsage, Usage, UserTurn


def model_call(event: ModelCalled, faults: list[FaultReport]) -> ModelCall:
    """The call a ``model_called`` event records, with the failed attempts logged before it."""
    return ModelCall(model=event.model, digest=event.digest, content=event.content, tool_calls=event.tool_calls,
                     finish_reason=event.finish_reason, usage=event.usage, cost=event.cost, attempt=event.attempt,
                     cached=event.cached, faults=faults)


def recorded_calls(events: Iterable[Any], role: str) -> dict[str, ModelCall]:
    """The model calls of ``role`` among an episode's logged events, by request digest (the first of each)."""
    lines = getattr(events, "lines", None)
    if lines is not None:  # a tape of raw lines (engine/tape.py's RawEpisode): decode only what may be a call
        raw = events
        events = (raw[seq] if b'"model_called"' in line or b'"fault"' in line else None
                  for seq, line in enumerate(lines))
    out: dict[str, ModelCall] = {}
    faults: list[FaultReport] = []
    for event in events:
        kind = type(event)
        if kind is Fault and event.who == role:
            faults.append(FaultReport(kind=event.kind, detail=event.detail, attempt=event.attempt))
            continue
        if kind is ModelCalled and event.role == role:
            out.setdefault(event.digest, model_call(event, faults))
        faults = []
    return out


class RecordedCalls(Mapping[str, ModelCall]):
    """``recorded_calls(events, role)`` read when first asked for (most participants never ask), on top of
    ``offered`` calls (a replay's: see ``reused``)."""

    __slots__ = ("events", "role", "offered", "calls")

    def __init__(self, events: Iterable[Any], role: str, offered: Mapping[str, ModelCall] | None = None) -> None:
        self.events, self.role, self.offered = events, role, offered
        self.calls: dict[str, ModelCall] | None = None

    def _read(self) -> dict[str, ModelCall]:
        calls = self.calls
        if calls is None:
            calls = dict(self.offered or {})
            calls.update(recorded_calls(self.events, self.role))
            self.calls, self.events = calls, ()
        return calls

    def get(self, digest: str, default: Any = None) -> Any:
        return self._read().get(digest, default)

    def __getitem__(self, digest: str) -> ModelCall:
        return self._read()[digest]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def reused(calls: Mapping[str, ModelCall]) -> dict[str, ModelCall]:
    """Another episode's calls offered to a new one (a replay's user): the same request gets the logged answer,
    marked ``cached`` as nothing was spent on it now (cost 0, or None without a price; no failed attempts)."""
    return {digest: msgspec.structs.replace(call, cached=True, cost=None if call.cost is None else 0.0, faults=[],
                                            attempt=1)
            for digest, call in calls.items()}


def _add(totals: dict[str, RoleUsage], role: str, calls: int, cached: int, input_tokens: int, output_tokens: int,
         cost: float | None) -> None:
    got = totals.get(role)
    if got is None:
        got = totals[role] = RoleUsage()
    got.calls += calls
    got.cached += cached
    got.input_tokens += input_tokens
    got.output_tokens += output_tokens
    if cost is not None:
        got.cost = round((got.cost or 0.0) + cost, 10)


class UsageMeter:
    """One episode's model usage and cost per role, from its model calls and, for a role that logged none,
    from the usage its turns report (an HTTP agent that counts its own tokens)."""

    __slots__ = ("totals",)

    def __init__(self) -> None:
        self.totals: dict[str, RoleUsage] = {}

    def call(self, role: str, call: ModelCall) -> None:
        """Count one model call of ``role``."""
        usage = call.usage
        _add(self.totals, role, 1, int(call.cached), usage.input_tokens if usage else 0,
             usage.output_tokens if usage else 0, call.cost)

    def turns(self, events: Iterable[Any]) -> dict[str, RoleUsage] | None:
        """The totals with the usage of the turns among ``events`` of the roles that logged no model calls;
        None when no one reported any usage."""
        totals = self.totals
        called = set(totals)
        for event in events:
            kind = type(event)
            if kind is AgentTurn:
                role = "agent"
            elif kind is UserTurn:
                role = "user"
            else:
                continue
            usage = event.usage
            if type(usage) is not Usage or role in called:  # None, or unset on a user turn
                continue
            cost = event.cost if type(event.cost) is float else None
            _add(totals, role, 0, 0, usage.input_tokens, usage.output_tokens, cost)
        return totals or None


def add_usage(totals: dict[str, RoleUsage], more: Mapping[str, RoleUsage]) -> None:
    """Add an episode's (or another run part's) usage per role to ``totals``."""
    for role, u in more.items():
        _add(totals, role, u.calls, u.cached, u.input_tokens, u.output_tokens, u.cost)


def total_cost(totals: Mapping[str, RoleUsage]) -> float:
    """The cost of every role together (roles without a price count nothing)."""
    return sum(u.cost or 0.0 for u in totals.values())
