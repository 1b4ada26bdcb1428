"""Judging a user's claimed success against the tool calls an episode actually made.

A user believes what the agent says; this judge believes only the logged calls. Every transactional
intent the user claims needs a successful call (no error, a result row) of that service and intent
whose arguments agree with the values the user holds at the end; every search the user claims needs
a result row of a successful call of that intent that is the entity the user took and agrees with the
user's values. SGD semantics: a value "dontcare" agrees with anything; an optional slot left out of a
call takes the schema default ("dontcare" or "" = any value, which does not agree with a concrete one).
"""

from __future__ import annotations

from typing import Any

from ...engine.contracts import Call, Claim
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
