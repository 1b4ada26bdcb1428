"""A small built-in scenario set: scripted users and agents over tiny tables, needing no data files.

It exercises every part of the engine (turns with acts, tool calls, a transactional call) and is what
engine tests and the engine benchmark run on.
"""

from __future__ import annotations

import random
from typing import Any

from ..engine.contracts import Scenario, ToolSpec


def _act(act: str, slot: str = "", *values: str) -> dict[str, Any]:
    return {"act": act, "slot": slot, "values": list(values), "canonical_values": list(values)}


def _user(service: str, utterance: str, *acts: dict[str, Any], end: bool = False) -> dict[str, Any]:
    return {"utterance": utterance, "frames": [{"service": service, "actions": list(acts)}], "end": end}


TABLES: dict[str, dict[str, list[dict[str, str]]]] = {
    "Weather_1": {"GetWeather": [
        {"city": "Paris", "date": "2019-03-01", "temperature": "12", "precipitation": "20"},
        {"city": "Lima", "date": "2019-03-01", "temperature": "24", "precipitation": "5"},
    ]},
    "Restaurants_1": {
        "FindRestaurants": [
            {"city": "San Jose", "cuisine": "Thai", "restaurant_name": "Sino", "phone_number": "408-555-0101"},
            {"city": "San Jose", "cuisine": "Italian", "restaurant_name": "Pasta Bar", "phone_number": "408-555-0199"},
        ],
        "ReserveRestaurant": [
            {"restaurant_name": "Sino", "time": "19:00", "party_size": "2"},
        ],
    },
}

SCENARIOS: list[Scenario] = [
    Scenario(id="weather-paris", kind="scripted", data={
        "user": [
            _user("Weather_1", "What's the weather in Paris on March 1st?",
                  _act("INFORM_INTENT", "intent", "GetWeather"), _act("INFORM", "city", "Paris")),
            _user("Weather_1", "Thanks, that's all.", _act("THANK_YOU"), _act("GOODBYE"), end=True),
        ],
        "agent": [
            {"utterance": "It will be {temperature} degrees with a {precipitation} percent chance of rain.",
             "tool_calls": [{"service": "Weather_1", "method": "GetWeather",
                             "parameters": {"city": "Paris", "date": "2019-03-01"}}]},
            {"utterance": "Have a nice day!", "end": True},
        ],
    }),
    Scenario(id="restaurant-booking", kind="scripted", data={
        "user": [
            _user("Restaurants_1", "Find me a Thai place in San Jose.",
                  _act("INFORM_INTENT", "intent", "FindRestaurants"), _act("INFORM", "cuisine", "Thai"),
                  _act("INFORM", "city", "San Jose")),
            _user("Restaurants_1", "Sounds good, book it for 2 at 7 pm.",
                  _act("INFORM_INTENT", "intent", "ReserveRestaurant"), _act("INFORM", "party_size", "2"),
                  _act("INFORM", "time", "7 pm")),
            _user("Restaurants_1", "Yes please.", _act("AFFIRM")),
            _user("Restaurants_1", "What's their phone number?", _act("REQUEST", "phone_number")),
            _user("Restaurants_1", "Great, thank you!", _act("THANK_YOU"), end=True),
        ],
        "agent": [
            {"utterance": "How about {restaurant_name}? It is a Thai restaurant in San Jose.",
             "tool_calls": [{"service": "Restaurants_1", "method": "FindRestaurants",
                             "parameters": {"city": "San Jose", "cuisine": "Thai"}}]},
            {"utterance": "Please confirm: a table for 2 at Sino at 7 pm."},
            {"utterance": "Your table is booked.",
             "tool_calls": [{"service": "Restaurants_1", "method": "ReserveRestaurant",
                             "parameters": {"restaurant_name": "Sino", "time": "19:00", "party_size": "2"}}]},
            {"utterance": "Their number is {phone_number}.",
             "tool_calls": [{"service": "Restaurants_1", "method": "FindRestaurants",
                             "parameters": {"city": "San Jose", "cuisine": "Thai"}}]},
            {"utterance": "Enjoy your meal!", "end": True},
        ],
    }),
    Scenario(id="small-talk", kind="scripted", data={
        "user": ["Hi there.", "Can you hear me?", "Okay, bye."],
        "agent": [{"utterance": "Hello! How can I help?"}, {"utterance": "Loud and clear."},
                  {"utterance": "Bye!", "end": True}],
    }),
]


class TableWorld:
    """Answers a call with the rows of its table whose values match every given parameter."""

    def __init__(self, tables: dict[str, dict[str, list[dict[str, str]]]]) -> None:
        self.tables = tables

    def call(self, service: str, method: str, parameters: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None]:
        rows = self.tables.get(service, {}).get(method)
        if rows is None:
            return None, f"unknown method {service}.{method}"
        return [r for r in rows if all(str(v) in ("dontcare", r.get(k, str(v))) for k, v in parameters.items())], None


class BuiltinScenarios:
    """The built-in scripted scenarios, cycled: episode i plays scenario i mod 3, trial i div 3."""

    name = "builtin"
    default_user = "scripted"
    default_agent = "scripted"

    def __init__(self, scenarios: list[Scenario] | None = None, tables: dict[str, Any] | None = None) -> None:
        self.scenarios = scenarios if scenarios is not None else SCENARIOS
        self.tables = tables if tables is not None else TABLES
        # Every scenario may call every table: one list, built once, that no user or agent changes.
        self._tools = [ToolSpec(service=s, method=m, parameters={"type": "object", "properties": {
                           k: {"type": "string"} for k in rows[0]} if rows else {}})
                       for s, methods in self.tables.items() for m, rows in methods.items()]

    def draw(self, index: int, seed: int) -> tuple[Scenario, int]:
        return self.scenarios[index % len(self.scenarios)], index // len(self.scenarios)

    def world(self, scenario: Scenario, rng: random.Random) -> TableWorld:
        return TableWorld(self.tables)

    def tools(self, scenario: Scenario) -> list[ToolSpec]:
        return self._tools


def load(arg: str | None) -> BuiltinScenarios:
    """The ``builtin`` scenario-set plug-in (it takes no argument)."""
    return BuiltinScenarios()
