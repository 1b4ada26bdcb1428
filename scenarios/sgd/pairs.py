"""Paired slots of a service: where a trip starts and ends, when a stay starts and ends.

A pair is found from slot names alone: replacing a start word by its end word ("from" -> "to",
"pickup" -> "dropoff", "check_in" -> "check_out", "departure" -> "return", ...) in one slot's name gives
another slot of the same service. Place pairs must differ (nobody takes a bus from Fresno to Fresno);
date pairs must be strictly ordered (no real SGD rental or round trip ends on or before its first day).
"""

from __future__ import annotations

import datetime
import random
from typing import Iterable

_SWAPS = (("from", "to"), ("origin", "destination"), ("pickup", "dropoff"), ("check_in", "check_out"),
          ("departure", "return"), ("start", "end"), ("outbound", "inbound"), ("leaving", "return"))


def slot_pairs(slots: Iterable[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(place pairs, date pairs) among ``slots``: (start slot, end slot), each slot in one pair at most."""
    names = set(slots)
    places: list[tuple[str, str]] = []
    dates: list[tuple[str, str]] = []
    used: set[str] = set()
    for a in sorted(names):
        for s, e in _SWAPS:
            tokens = a.split("_")
            if s not in a:
                continue
            b = "_".join(e if t == s else t for t in tokens) if s in tokens else a.replace(s, e, 1)
            if b == a or b not in names or a in used or b in used:
                continue
            if "date" in a and "date" in b:
                dates.append((a, b))
            elif not any(w in a for w in ("time", "date", "price", "fare", "number")):
                places.append((a, b))
            else:
                continue
            used.update((a, b))
    return places, dates


def is_date(value: str | None) -> bool:
    """Whether ``value`` is a canonical SGD date (YYYY-MM-DD)."""
    return bool(value) and len(value) == 10 and value[4] == "-" and value[7] == "-" and value[:4].isdigit()


def shift(value: str, days: int) -> str:
    """A canonical date ``days`` after ``value``."""
    return (datetime.date.fromisoformat(value) + datetime.timedelta(days=days)).isoformat()


def order_dates(values: dict[str, str], start: str, end: str, rng: random.Random, fixed: Iterable[str] = ()) -> None:
    """Make ``values[end]`` strictly after ``values[start]`` (both dates), moving a slot not in ``fixed``.

    Distinct dates in the wrong order are swapped when neither is fixed; otherwise the free one moves
    one to five days away from the other.
    """
    a, b = values.get(start), values.get(end)
    if not (is_date(a) and is_date(b)) or a < b:
        return
    fixed = set(fixed)
    if a != b and start not in fixed and end not in fixed:
        values[start], values[end] = b, a
    elif end not in fixed:
        values[end] = shift(a, rng.randint(1, 5))
    elif start not in fixed:
        values[start] = shift(b, -rng.randint(1, 5))
