"""Slot-aware value generators for services without dialogues to mine (e.g. the test split's unseen ones).

A value for a non-categorical slot comes, in order, from the schema's sample ``possible_values``, from
values mined for a slot of the same name in any service, from values of mined slots sharing the slot's
last word ("..._city", "..._time"), and finally from a generator chosen by keywords of the slot's name and
description (times, dates, phone numbers, prices, counts, ratings, addresses, names).
"""

from __future__ import annotations

import random
import re

from .schema import SlotSchema

_STREETS = ["Main Street", "Oak Avenue", "Park Road", "Market Street", "El Camino Real", "Broadway",
            "Mission Street", "Castro Street", "University Avenue", "Lincoln Way"]
_WORDS = ["Blue", "Golden", "Silver", "Royal", "Green", "Sunset", "Harbor", "Maple", "Cedar", "Lakeside",
          "Grand", "Little", "Old Town", "Riverside", "Summit"]
_NOUNS = {"hotel": "Inn", "restaurant": "Kitchen", "movie": "Story", "song": "Song", "album": "Album",
          "event": "Festival", "theater": "Theater", "doctor": "Clinic", "salon": "Salon", "apartment": "Apartments",
          "property": "Residences", "station": "Station", "airport": "Airport", "car": "Sedan"}
_PEOPLE = ["Alex Morgan", "Jamie Lee", "Sam Carter", "Taylor Reed", "Jordan Blake", "Casey Nguyen",
           "Riley Patel", "Morgan Diaz", "Avery Chen", "Quinn Foster"]


def _kind(slot: SlotSchema) -> str:
    """A coarse kind of a slot from its name and description."""
    text = f"{slot.name} {slot.description}".lower()
    name = slot.name.lower()
    for kind, words in (("time", ("time",)), ("date", ("date",)), ("phone", ("phone",)),
                        ("address", ("address", "street")),
                        ("money", ("price", "fare", "cost", "amount", "balance", "rent", "fee")),
                        ("rating", ("rating",)), ("count", ("number", "num_", "count", "passenger", "seats",
                                                              "tickets", "rooms", "riders", "travelers")),
                        ("city", ("city", "location", "area", "destination", "origin")),
                        ("person", ("artist", "director", "starring", "cast", "actor", "therapist", "stylist",
                                    "dentist", "doctor", "contact", "receiver", "recipient"))):
        if any(w in name for w in words):
            return kind
    if "name" in name or "title" in name:
        return "name"
    desc = slot.description.lower()
    for kind, words in (("money", ("price", "cost", "fare", "amount")), ("city", ("city",)), ("date", ("date",)),
                        ("time", ("time",)), ("address", ("address",)), ("rating", ("rating",)),
                        ("count", ("number",))):
        if any(w in desc.split() for w in words):
            return kind
    if "minutes" in text or "duration" in text:
        return "count"
    return "other"


def generate(slot: SlotSchema, rng: random.Random, mined: dict[str, list[str]]) -> str:
    """One canonical value for ``slot``; ``mined`` maps slot names seen in real data to their values."""
    if slot.possible_values:
        return rng.choice(slot.possible_values)
    pool = mined.get(slot.name)
    if pool:
        return rng.choice(pool)
    last = slot.name.rsplit("_", 1)[-1]
    similar = [v for name, vals in mined.items() if name.rsplit("_", 1)[-1] == last for v in vals]
    kind = _kind(slot)
    if similar and kind not in ("count", "other"):
        return rng.choice(similar)
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
        cities = mined.get("city") or ["San Francisco", "San Jose", "Oakland", "Los Angeles", "Seattle"]
        return rng.choice(cities)
    if kind == "person":
        return rng.choice(_PEOPLE)
    if kind == "name":
        text = f"{slot.name} {slot.description}".lower()
        noun = next((n for k, n in _NOUNS.items() if k in text), "Place")
        return f"{rng.choice(_WORDS)} {noun}"
    words = re.findall(r"[a-z]+", slot.description.lower()) or [slot.name]
    return f"{rng.choice(_WORDS)} {words[-1]}"
