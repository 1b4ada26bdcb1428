"""Judging a user's claimed success against what the episode's events show the world did and returned.

A user believes what the agent says; this judge believes only the log. Claims: every transactional
intent the user claims needs a successful call (no error, a result row) of that service and intent
whose arguments agree with the values the user holds at the end; every search the user claims needs
a result row of a successful call of that intent that is the entity the user took and agrees with the
user's values. SGD semantics: a value "dontcare" agrees with anything; an optional slot left out of a
call takes the schema default ("dontcare" or "" = any value, which does not agree with a concrete one).

Informed values: every value the agent tells the user as a fact about the world - each value of an
INFORM or OFFER act in its turns' frames - must be held, for that slot, by a row a successful call of
that frame's service returned earlier in the episode, or be a value the user itself informed for that
slot; an INFORM_COUNT must be the number of rows some earlier call of the service returned (as in real
SGD, where it always is). Values compare as above (case-insensitive; "dontcare" and "" are no claim),
an act's canonical value or its spoken one, or what the pack reads the spoken one as ("half past 11"
-> "11:30"). Not checked: CONFIRM and proposing REQUESTs (questions the user accepts or corrects: its
own values or schema defaults; a booking's values are judged through its claim), NOTIFY_* (no values),
OFFER_INTENT (an intent, not a slot value), and agents that report no acts (text only: their words are
not read here).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from msgspec import UNSET

from ...engine.contracts import Call, Claim, completed_calls
from ...engine.events import Act, AgentTurn, Frame, ToolCalled, ToolReturned, UserTurn
from .normalize import number
from .values import ANY_VALUES


_UNSET = object()

# (service, intent) -> (the schema dict it was read from, arguments, defaults): schemas are a pack's and
# do not change, so the intents' facts are read once; the schema's identity guards against another pack
_INTENTS: dict[tuple[str, str], tuple[Any, frozenset[str], dict[str, str]]] = {}


def _intent(schemas: dict[str, Any], service: str, intent: str) -> tuple[frozenset[str], dict[str, str]]:
    """The intent's arguments (required and optional) and its optional slots' defaults."""
    schema = schemas.get(service)
    got = _INTENTS.get((service, intent))
    if got is not None and got[0] is schema:
        return got[1], got[2]
    args: frozenset[str] = frozenset()
    defaults: dict[str, str] = {}
    for i in (schema or {}).get("intents", ()):
        if i["name"] == intent:
            defaults = dict(i.get("optional_slots") or {})
            args = frozenset(i["required_slots"]) | frozenset(defaults)
            break
    _INTENTS[(service, intent)] = (schema, args, defaults)
    return args, defaults


def _mismatch(wanted: dict[str, str], values: dict[str, Any],
              fallback: dict[str, Any] | None = None) -> tuple[str, str | None, str] | None:
    """The first (slot, value found, value wanted) where ``values`` (over ``fallback`` for the slots it lacks)
    disagree with the user's, else None."""
    for slot, want in wanted.items():
        if want in ANY_VALUES:
            continue
        got = values.get(slot, _UNSET)
        if got is _UNSET:
            got = fallback.get(slot) if fallback is not None else None
        if got.__class__ is not str or got in ANY_VALUES or (got != want and got.lower() != want.lower()):
            return slot, got, want  # type: ignore[return-value]
    return None


def _why(claim: Claim, tried: int, miss: tuple[str, str | None, str] | None) -> str:
    what = claim.intent
    if claim.transactional:
        head = f"{claim.service}.{what}: the agent reported success but no successful {what} call with the user's constraints"
    else:
        head = f"{claim.service}.{what}: the user took an entity no successful {what} call returned with the user's constraints"
    if miss is not None:
        slot, got, want = miss
        return f"{head} ({slot}={got!r} where the user wants {want!r})"
    return f"{head} ({tried} successful {what} call{'s' if tried != 1 else ''})"


def unbacked(claims: list[Claim], calls: list[Call], schemas: dict[str, Any]) -> str | None:
    """Why ``calls`` do not back ``claims`` (the first claim without evidence), or None when they all do.

    ``schemas`` maps service names to SGD schema dicts (for the intents' arguments and defaults).
    """
    for claim in claims:
        args, defaults = _intent(schemas, claim.service, claim.intent)
        wanted = {s: v for s, v in claim.constraints.items() if s in args}
        tried, miss, backed = 0, None, False
        for call in calls:
            if call.service != claim.service or call.method != claim.intent or call.error is not None or not call.results:
                continue
            tried += 1
            if claim.transactional:
                found = _mismatch(wanted, call.parameters, defaults)
                backed = found is None
                miss = miss or found
            elif claim.entity is not None:
                values = {**defaults, **call.parameters}
                for row in call.results:
                    if _mismatch(claim.entity, row) is None:
                        found = _mismatch(wanted, row, values)
                        backed = found is None
                        miss = miss or found
                        if backed:
                            break
            else:
                backed = True  # a search claimed without an entity: that it ran is all there is to check
            if backed:
                break
        if not backed:
            return _why(claim, tried, miss)
    return None


def goal_claims(goal: dict[str, Any], schemas: dict[str, Any]) -> list[Claim]:
    """Claims for a user that states none: each transactional goal intent was carried out, values unchecked."""
    out = []
    for sg in goal.get("subgoals", ()):
        intents = (schemas.get(sg["service"]) or {}).get("intents", ())
        if any(i["name"] == sg["intent"] and i.get("is_transactional") for i in intents):
            out.append(Claim(service=sg["service"], intent=sg["intent"], transactional=True))
    return out


_TOLD = {"INFORM": "informed", "OFFER": "offered"}  # the acts whose values state facts about the world
_CHECKED = frozenset((*_TOLD, "INFORM_COUNT"))


def invented(events: Iterable[Any], canonical: Callable[[str, str, str], str | None] | None = None) -> str | None:
    """Why a value the agent told the user is made up (the first one: service, act, slot and value), or None.

    ``events`` are an episode's in order; ``canonical(service, slot, spoken)`` reads a spoken form as a
    canonical value (the pack's), or None.
    """
    services: dict[str, str] = {}  # call id -> service
    rows: dict[str, list[list[dict[str, Any]]]] = {}  # service -> the rows of each of its successful calls so far
    counts: dict[str, set[int]] = {}  # service -> how many rows each of its successful calls returned
    heard: list[list[Frame]] = []  # the user's turns' frames so far, read only when a value is in no row
    checked = _CHECKED
    for event in events:
        kind = type(event)
        if kind is AgentTurn:
            for frame in event.frames:
                for act in frame.actions:
                    if act.act in checked and act.values and act.slot:
                        calls = rows.get(frame.service)
                        if calls is not None and act.act != "INFORM_COUNT" and len(act.values) == 1:
                            # the common case without a call: a row of the service's last call holds the value
                            value, slot = (act.canonical_values or act.values)[0], act.slot
                            for row in calls[-1]:
                                if row.get(slot) == value:
                                    break
                            else:
                                row = None
                            if row is not None:
                                continue
                        why = _unfounded(frame.service, act, rows, counts, heard, canonical)
                        if why is not None:
                            return why
        elif kind is UserTurn:
            if event.frames:
                heard.append(event.frames)
        elif kind is ToolCalled and event.executed_by is UNSET:  # what the agent ran itself is not the world's
            services[event.call_id] = event.service
        elif kind is ToolReturned:
            service = services.get(event.call_id)
            if service is not None and event.error is None and event.results is not None:
                got = rows.get(service)
                if got is None:
                    rows[service], counts[service] = [event.results], {len(event.results)}
                else:
                    got.append(event.results)
                    counts[service].add(len(event.results))
    return None


def _unfounded(service: str, act: Act, rows: dict[str, list[list[dict[str, Any]]]], counts: dict[str, set[int]],
               heard: list[list[Frame]], canonical: Callable[[str, str, str], str | None] | None) -> str | None:
    """Why one INFORM / OFFER / INFORM_COUNT act of the agent is not backed, or None when each value is."""
    canon, slot = act.canonical_values, act.slot
    for n, spoken in enumerate(act.values):
        value = canon[n] if n < len(canon) else spoken
        if act.act == "INFORM_COUNT":
            said = value if value.isdigit() else number(value) or number(spoken)
            if said is None or int(said) not in counts.get(service, ()):
                return (f"{service}: the agent informed count={value!r}, but no {service} call in this episode "
                        "returned that many rows")
            continue
        if value in ANY_VALUES or spoken in ANY_VALUES:
            continue
        calls = rows.get(service, ())
        read = canonical(service, slot, spoken) if canonical is not None else None
        if any(_held(calls, slot, v) for v in (value, spoken, read) if v) or _users(heard, slot, (value, spoken)):
            continue
        return (f"{service}: the agent {_TOLD[act.act]} {slot}={value!r}, a value no {service} row the world "
                "returned before holds (nor did the user say it)")
    return None


def _held(calls: list[list[dict[str, Any]]], slot: str, value: str) -> bool:
    """Whether a row of the calls holds ``value`` for ``slot`` (case-insensitive)."""
    low = value.lower()
    return any(got == value or (got.__class__ is str and got.lower() == low)
               for results in calls for row in results if (got := row.get(slot)) is not None)


def _users(heard: list[list[Frame]], slot: str, values: tuple[str, str]) -> bool:
    """Whether the user informed one of ``values`` for ``slot`` in any of its turns (case-insensitive)."""
    wanted = {v.lower() for v in values}
    for frames in heard:
        for frame in frames:
            for act in frame.actions:
                if act.act == "INFORM" and act.slot == slot and any(
                        v.lower() in wanted for v in (*act.values, *act.canonical_values)):
                    return True
    return False
