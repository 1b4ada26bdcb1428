"""Personas: the user profiles of the preference-trajectory family, the built-in three, persona files, the
reproducible per-episode draw, and the rule that picks the mainline action from a persona."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import msgspec

from ...engine.errors import UserError
from ...engine.seeding import stable_hash
from .jsonfile import json_lines, read_text


class Persona(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Who the user is: expertise, patience and clarity (0..1), time pressure and style."""

    name: str
    domain: Literal["coding", "planning"]
    expertise: Literal["low", "mid", "high"]
    patience: float
    clarity: float
    time_pressure: Literal["low", "high"]
    style: Literal["direct", "polite", "concise", "verbose"]

    def __post_init__(self) -> None:
        for field in ("patience", "clarity"):
            value = getattr(self, field)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{field} {value} is not within 0..1")

    def as_record(self) -> dict[str, Any]:
        """The persona as a trajectory record holds it (keys in the format's order)."""
        return {"name": self.name, "domain": self.domain, "expertise": self.expertise, "patience": self.patience,
                "clarity": self.clarity, "time_pressure": self.time_pressure, "style": self.style}


BUILTIN_PERSONAS: tuple[Persona, ...] = (
    Persona(name="Impatient-Novice", domain="coding", expertise="low", patience=0.25, clarity=0.5,
            time_pressure="high", style="direct"),
    Persona(name="Neutral-Intermediate", domain="coding", expertise="mid", patience=0.6, clarity=0.6,
            time_pressure="low", style="polite"),
    Persona(name="Busy-Manager", domain="planning", expertise="high", patience=0.35, clarity=0.7,
            time_pressure="high", style="direct"),
)


def load_personas(path: str | Path) -> tuple[Persona, ...]:
    """Personas from a JSON file (a list of personas, or one) or a JSONL file (one persona per line)."""
    path = Path(path)
    text = read_text(path, "personas")
    try:
        whole = json.loads(text)
        items = [(f"persona {i}", item) for i, item in enumerate(whole if isinstance(whole, list) else [whole])]
    except ValueError:  # not one JSON document: JSON lines
        items = json_lines(path, text)
    personas = []
    for where, item in items:
        try:
            personas.append(msgspec.convert(item, Persona))
        except (msgspec.ValidationError, ValueError) as exc:
            raise UserError(f"{path}: {where}: not a persona ({exc})") from None
    if not personas:
        raise UserError(f"{path}: no personas in the file")
    names = [p.name for p in personas]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise UserError(f"{path}: persona name {duplicate!r} appears twice")
    return tuple(personas)


def persona_named(personas: tuple[Persona, ...], name: str) -> Persona:
    """The persona called ``name`` (a user error naming the known ones if there is none)."""
    for persona in personas:
        if persona.name == name:
            return persona
    raise UserError(f"unknown persona {name!r} (known: {', '.join(p.name for p in personas)})")


def draw_persona(personas: tuple[Persona, ...], episode_seed: int) -> Persona:
    """The persona of an episode: a stable function of its seed, so the user and the agent draw the same one."""
    return personas[stable_hash("persona", episode_seed) % len(personas)]


def mainline_action(persona: Persona) -> str:
    """The mainline action for a persona: hurried and impatient -> LOW; patient but unclear -> HIGH; else MID."""
    if persona.patience < 0.4 and persona.time_pressure == "high":
        return "LOW"
    if persona.patience > 0.7 and persona.clarity < 0.5:
        return "HIGH"
    return "MID"
