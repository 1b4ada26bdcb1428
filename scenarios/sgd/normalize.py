"""Canonical SGD values of spoken numbers, times, dates and prices ("6:30 pm" -> "18:30", "March 7th" ->
"2019-03-07", "four" -> "4", "$45" -> "45"), for understanding steps that meet forms the pack never mined.

SGD's dialogues all happen in March 2019 (its "today" is 2019-03-01), so a month and day without a year
are read in 2019, as the dataset's canonical values are.
"""

from __future__ import annotations

import re

_NUMBERS = {w: str(k) for k, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_NUMBERS.update({"a single": "1", "single": "1", "a couple": "2", "couple": "2", "a pair": "2", "twenty-one": "21",
                 "thirty": "30", "forty": "40", "fifty": "50"})
_MONTHS = {m: k + 1 for k, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTHS.update({m[:3]: k for m, k in list(_MONTHS.items())})
_ORDINALS = {w: k + 1 for k, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth twentieth".split())}
_YEAR = 2019

_TIME = re.compile(r"^(?:at |around |about )?(\d{1,2})(?:[:.](\d{2}))?\s*(a\.?m\.?|p\.?m\.?|o'?clock)?"
                   r"(?:\s+in\s+the\s+(morning|afternoon|evening|night)|\s+(?:at\s+)?(night|tonight))?$")
_PAST = re.compile(r"^(half|quarter)\s+(past|to)\s+(\w+)(?:\s+in\s+the\s+(morning|afternoon|evening|night))?$")
_DATE_MD = re.compile(r"^(?:on\s+)?(?:the\s+)?([a-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(\d{4}))?$")
_DATE_DM = re.compile(r"^(?:on\s+)?(?:the\s+)?(\d{1,2}|[a-z]+)(?:st|nd|rd|th)?\s+of\s+([a-z]+)(?:,?\s+(\d{4}))?$")
_MONEY = re.compile(r"^(?:\$\s*)?(\d+(?:,\d{3})*(?:\.\d+)?)(?:\s*(?:dollars|usd|bucks))?$")


def number(text: str) -> str | None:
    """A count as digits ("four" -> "4", "4" -> "4"), or None."""
    t = text.strip().lower()
    if t.isdigit():
        return str(int(t))
    return _NUMBERS.get(t)


def time_of_day(text: str) -> str | None:
    """A time as SGD's "HH:MM" ("6:30 pm", "half past 6 in the evening", "noon"), or None."""
    t = " ".join(text.strip().lower().rstrip(".").split())
    if t in ("noon", "midday", "12 noon"):
        return "12:00"
    if t == "midnight":
        return "00:00"
    m = _TIME.match(t)
    if m:
        hour, minute = int(m.group(1)), int(m.group(2) or 0)
        suffix = (m.group(3) or "").replace(".", "")
        part = m.group(4) or m.group(5) or ""
        if not suffix and not part and m.group(2) is None:
            return None  # a bare number is no time
        return _clock(hour, minute, suffix, part)
    m = _PAST.match(t)
    if m:
        base = number(m.group(3))
        if base is None:
            return None
        hour = int(base)
        minute = 30 if m.group(1) == "half" else 15
        if m.group(2) == "to":
            hour, minute = hour - 1, 60 - minute
        return _clock(hour, minute, "", m.group(4) or "")
    return None


def _clock(hour: int, minute: int, suffix: str, part: str) -> str | None:
    if minute > 59 or hour > 23:
        return None
    if suffix == "pm" or part in ("afternoon", "evening", "night", "tonight"):
        if hour < 12 and not (part == "night" and hour < 4):
            hour += 12
    elif suffix == "am" and hour == 12:
        hour = 0
    return f"{hour:02d}:{minute:02d}"


def date(text: str) -> str | None:
    """A calendar date as SGD's "YYYY-MM-DD" ("March 7th", "the 7th of March", "2019-03-07"), or None."""
    t = " ".join(text.strip().lower().rstrip(".").split())
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", t):
        return t
    m = _DATE_MD.match(t)
    if m and m.group(1) in _MONTHS:
        return _ymd(m.group(3), _MONTHS[m.group(1)], int(m.group(2)))
    m = _DATE_DM.match(t)
    if m and m.group(2) in _MONTHS:
        day = int(m.group(1)) if m.group(1).isdigit() else _ORDINALS.get(m.group(1))
        if day is not None:
            return _ymd(m.group(3), _MONTHS[m.group(2)], day)
    return None


def _ymd(year: str | None, month: int, day: int) -> str | None:
    if not 1 <= day <= 31:
        return None
    return f"{int(year) if year else _YEAR:04d}-{month:02d}-{day:02d}"


def money(text: str) -> str | None:
    """An amount as SGD writes it ("$45" -> "45", "$1,250" -> "1250", "$11.08" -> "11.08"), or None."""
    m = _MONEY.match(text.strip().lower())
    if not m:
        return None
    return m.group(1).replace(",", "")


def by_kind(kind: str, text: str) -> str | None:
    """The canonical value of ``text`` for a slot of this kind (scenarios/sgd/values.py ``value_kind``), or None."""
    if kind == "time":
        return time_of_day(text)
    if kind == "date":
        return date(text)
    if kind == "count":
        return number(text)
    if kind == "money":
        return money(text)
    if kind == "rating":
        t = text.strip()
        return t if re.fullmatch(r"\d(?:\.\d{1,2})?", t) else None
    return None
