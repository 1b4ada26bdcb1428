"""Slot-aware value generators for services without dialogues to mine (e.g. the test split's unseen ones).

A value for a non-categorical slot comes, in order, from the schema's sample ``possible_values``, from
values mined for a slot of the same name and kind in any service, from mined slots of the same kind whose
names carry a content word of this slot's name or description ("track", the name of a "song" ->
song_name), from mined slots of the same kind sharing the last word of the name ("..._time"), and finally
from a generator chosen by keywords of the slot's name and description (times, dates, phone numbers,
prices, counts, ratings, addresses, names).
"""

from __future__ import annotations

import random
import re

from .schema import SlotSchema

ANY_VALUES = ("dontcare", "")  # SGD's values that stand for any value

_STREETS = ["Main Street", "Oak Avenue", "Park Road", "Market Street", "El Camino Real", "Broadway",
            "Mission Street", "Castro Street", "University Avenue", "Lincoln Way"]
_WORDS = ["Blue", "Golden", "Silver", "Royal", "Green", "Sunset", "Harbor", "Maple", "Cedar", "Lakeside",
          "Grand", "Little", "Old Town", "Riverside", "Summit"]
_NOUNS = {"venue": "Hall", "event": "Festival", "stadium": "Stadium", "hotel": "Inn", "restaurant": "Kitchen",
          "movie": "Story", "song": "Song", "album": "Album", "theater": "Theater", "doctor": "Clinic",
          "salon": "Salon", "apartment": "Apartments", "property": "Residences", "station": "Station",
          "airport": "Airport", "car": "Sedan"}
_PEOPLE = ["Alex Morgan", "Jamie Lee", "Sam Carter", "Taylor Reed", "Jordan Blake", "Casey Nguyen",
           "Riley Patel", "Morgan Diaz", "Avery Chen", "Quinn Foster"]


_PERSON = ("artist", "director", "starring", "cast", "actor", "therapist", "stylist", "dentist", "doctor",
           "contact", "receiver", "recipient", "performer", "celeb", "singer")


def slot_kind(slot: SlotSchema) -> str:
    """A coarse kind of a slot from its name and description (time, date, city, station, person, name...)."""
    name = slot.name.lower()
    desc = slot.description.lower()
    dwords = set(re.findall(r"[a-z]+", desc))
    tokens = {t[:-1] if t.endswith("s") else t for t in name.split("_")}  # "account" is not a "count"
    if "time" in tokens and (dwords & {"days", "minutes", "hours", "waiting", "duration"} or "number of" in desc):
        return "count"  # a transfer's "time" in days, a cab's waiting "time" in minutes
    for kind, words in (("time", ("time",)), ("date", ("date",)), ("phone", ("phone",)),
                        ("address", ("address", "street")),
                        ("money", ("price", "fare", "cost", "amount", "balance", "rent", "fee")),
                        ("rating", ("rating",)), ("count", ("number", "num", "count", "passenger", "seat",
                                                              "ticket", "room", "rider", "traveler")),
                        ("station", ("station", "airport", "terminu"))):
        if tokens.intersection(words):
            return kind
    if "address" in dwords:
        return "address"
    if dwords & {"station", "airport", "terminus"}:
        return "station"
    if "venue" in name or "venue" in dwords:
        return "place"
    if any(w in name for w in ("city", "location", "area", "destination", "origin")):
        return "city"
    if any(w in name for w in _PERSON) or (("name" in name or "title" in name or desc.startswith("name of"))
                                           and any(w in desc for w in _PERSON)):
        return "person"
    if "name" in name or "title" in name or desc.startswith("name of"):
        return "name"
    for kind, words in (("money", ("price", "cost", "fare", "amount")), ("city", ("city", "location")),
                        ("date", ("date",)), ("time", ("time",)), ("rating", ("rating",)),
                        ("count", ("number", "days", "length", "percentage", "speed", "temperature", "minutes"))):
        if dwords & set(words):
            return kind
    if any(w in desc for w in _PERSON):
        return "person"
    if "minutes" in desc or "duration" in desc:
        return "count"
    return "other"


_VENUE_WORDS = frozenset("stadium theater theatre church center centre hall auditorium arena club airport station "
                         "terminal street avenue road park museum gallery field stage restaurant hotel".split())


def plausible(kind: str, value: str) -> bool:
    """Whether a mined value can stand for a slot of this kind (a venue is not a city)."""
    if kind == "city":
        words = value.lower().replace("/", " ").split()
        return not any(c.isdigit() for c in value) and len(words) <= 4 and not _VENUE_WORDS.intersection(words)
    if kind == "time":
        return bool(re.fullmatch(r"\d{1,2}:\d{2}", value))
    if kind == "date":
        return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", value))
    if kind in ("money", "count", "rating"):
        return bool(re.fullmatch(r"[\d.]+", value))
    if kind == "address":
        return value[:1].isdigit()
    return True


def value_kind(slot: SlotSchema, values: list[str]) -> str:
    """The kind of a slot by name and description, corrected by values seen for it: a "location" whose
    values are stations or venues is a place, one whose values are street addresses an address."""
    kind = slot_kind(slot)
    values = [v for v in values if v not in ANY_VALUES]
    if kind == "city" and values:
        if sum(v[:1].isdigit() for v in values) > len(values) / 2:
            return "address"
        if sum(plausible("city", v) for v in values) < 0.8 * len(values):
            return "place"
    return kind


_GENERIC = frozenset("name names number the and for with from that this where which what whether".split())


def _cues(slot: SlotSchema) -> set[str]:
    """Content words of a slot's name and description ("track", "song" for a song's track name)."""
    words = re.findall(r"[a-z]{4,}", f"{slot.name.replace('_', ' ')} {slot.description}".lower())
    return {w[:-1] if w.endswith("s") else w for w in words} - _GENERIC


def similar_values(slot: SlotSchema, mined: dict[tuple[str, str], list[str]]) -> list[str]:
    """Values of mined slots of the same kind whose names carry a content word of this slot."""
    kind, cues = slot_kind(slot), _cues(slot)
    out: list[str] = []
    for name, k in sorted(mined):
        if k == kind and "/" not in name and {w[:-1] if w.endswith("s") else w for w in name.split("_")} & cues:
            out.extend(mined[(name, k)])
    return out


def generate(slot: SlotSchema, rng: random.Random, mined: dict[tuple[str, str], list[str]], domain: str = "") -> str:
    """One canonical value for ``slot``; ``mined`` maps (slot name, kind) seen in real data to values, and
    ("Domain/slot name", kind) to those of one domain (preferred: a movie genre is not a music genre)."""
    if slot.possible_values:
        return rng.choice(slot.possible_values)
    kind = slot_kind(slot)
    pool = mined.get((f"{domain}/{slot.name}", kind)) or mined.get((slot.name, kind))
    if not pool and kind == "city":
        # a "location" that the same domain fills with stations or venues (a rental car's pickup location)
        for other in ("place", "address"):
            pool = mined.get((f"{domain}/{slot.name}", other))
            if pool:
                kind = other
                break
    pool = pool or similar_values(slot, mined)
    if not pool and kind not in ("count", "other", "name", "person"):
        last = slot.name.rsplit("_", 1)[-1]
        pool = [v for (name, k), vals in sorted(mined.items()) if k == kind and "/" not in name
                and name.rsplit("_", 1)[-1] == last for v in vals]
    pool = [v for v in pool if plausible(kind, v)]
    if pool:
        return rng.choice(pool)
    if kind == "time":
        return f"{rng.randint(8, 21):02d}:{rng.choice((0, 15, 30, 45)):02d}"
    if kind == "date":
        return f"2019-03-{rng.randint(1, 28):02d}"
    if kind == "phone":
        return f"{rng.randint(200, 989)}-{rng.randint(200, 989)}-{rng.randint(1000, 9999)}"
    if kind == "address":
        return f"{rng.randint(10, 2999)} {rng.choice(_STREETS)}"
    if kind == "money":
        return str(rng.randint(2, 60) * 5)
    if kind == "rating":
        return f"{rng.randint(30, 50) / 10:.1f}"
    if kind == "count":
        return str(rng.randint(1, 4))
    if kind == "city":
        cities = [v for v in mined.get(("city", "city"), []) if plausible("city", v)] or [
            "San Francisco", "San Jose", "Oakland", "Los Angeles", "Seattle"]
        return rng.choice(cities)
    if kind == "person":
        return rng.choice(_PEOPLE)
    if kind in ("name", "place"):
        text = f"{slot.name} {slot.description}".lower()
        noun = next((n for k, n in _NOUNS.items() if k in text), "Place")
        return f"{rng.choice(_WORDS)} {noun}"
    words = re.findall(r"[a-z]+", slot.description.lower()) or [slot.name]
    return f"{rng.choice(_WORDS)} {words[-1]}"
