"""The model-driven user's system prompt, rendered from its scenario: pure functions over the prompt files.

The prompts are files under ``users/prompts/`` (package data, versioned with the code; docs/llm.md shows them),
each a list of ``## name`` sections whose text is a ``string.Template``. ``render`` turns a scenario into the
system prompt: an SGD goal in plain words (its parts in order, what to want, what to say only when asked,
what to take from an earlier part, what to ask for, what to give in on when nothing matches), an evalset
case's conversation plan (its starting prompt is said verbatim as the opening turn), or a task's query, and
a persona when the scenario has one. Every SGD line also names the schema's slot, so ``read_goal`` can read
the goal back from a prompt (the template lines become patterns): the loopback model server that plays a
user in tests does, and a test checks that reading a rendered goal gives the goal back.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..engine.contracts import Scenario

PROMPTS_DIR = Path(__file__).with_name("prompts")
STOP = "###STOP###"  # the default stop marker (tau2-bench's): the user's last message ends with it
DONTCARE = "any (you do not mind)"
UNKNOWN = "ask the assistant"  # a carried value with nothing to fall back on
_BOOLEAN = {"True": "yes", "False": "no"}
# placeholders holding names (a slot, an intent, a service, a number): matched as one word when reading back
_NAMES = {"slot", "source_slot", "intent", "service", "number", "source_part", "count"}


@lru_cache(maxsize=None)
def sections(name: str) -> dict[str, str]:
    """The sections of prompt file ``name`` (``users/prompts/NAME.txt``): section name -> template text."""
    text = (PROMPTS_DIR / f"{name}.txt").read_text(encoding="utf-8")
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith("## "):
            current = out.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return {key: "\n".join(lines).strip("\n") for key, lines in out.items()}


def fill(file: str, section: str, **values: Any) -> str:
    """A section of a prompt file with its placeholders filled."""
    return string.Template(sections(file)[section]).substitute({k: str(v) for k, v in values.items()})


def render(scenario: Scenario, stop: str = STOP, persona: dict[str, Any] | None = None) -> tuple[str, str | None]:
    """The system prompt of a model-driven user playing ``scenario`` (as ``persona`` when given, else as the
    scenario's own persona, if any), and the opening turn it says without asking the model (an evalset case's
    starting prompt), or None; ValueError for a scenario it cannot play."""
    data = scenario.data
    opening = None
    user = data.get("user")
    if isinstance(data.get("goal"), dict) and data["goal"].get("subgoals"):
        task = sgd_task(data["goal"], data.get("schemas") or {})
    elif isinstance(user, dict) and "conversation_plan" in user:
        task = fill("tasks", "plan", plan=user["conversation_plan"])
        opening = str(user.get("starting_prompt") or "") or None
    elif isinstance(data.get("query"), str):
        task = fill("tasks", "query", query=data["query"])
    else:
        raise ValueError(f"the llm user cannot play scenario {scenario.id!r} (kind {scenario.kind!r}): it plays SGD "
                         "goals, evalset cases (a conversation plan) and tasks with a query")
    persona = persona_text(persona or data.get("persona"))
    system = fill("user", "system", task=task, persona=persona + "\n" if persona else "", stop=stop)
    return re.sub(r"\n{3,}", "\n\n", system), opening


def opening_request() -> str:
    """The chat message that asks the model for the user's first turn (chat templates want one)."""
    return sections("user")["opening"]


def persona_text(persona: Any) -> str:
    """A persona in plain words: the trajectory family's profile as a sentence, any other dict as lines."""
    if not isinstance(persona, dict) or not persona:
        return ""
    fields = ("name", "expertise", "patience", "clarity", "time_pressure", "style")
    if all(k in persona for k in fields):
        return fill("tasks", "persona", **{k: persona[k] for k in fields})
    lines = [fill("tasks", "persona_line", key=k, value=v) for k, v in persona.items()]
    return "\n".join([fill("tasks", "persona_other"), *lines])


# -- SGD goals -------------------------------------------------------------------------------------


def spoken_value(value: str) -> str:
    """A goal value as the prompt says it: "dontcare" as not minding, booleans as yes and no."""
    if value == "dontcare":
        return DONTCARE
    return _BOOLEAN.get(value, value)


def _slot_words(schema: dict[str, Any], slot: str) -> str:
    for s in schema.get("slots", ()):
        if s["name"] == slot and s.get("description"):
            return s["description"][0].upper() + s["description"][1:]
    return slot.replace("_", " ").capitalize()


def _intent_words(schema: dict[str, Any], intent: str) -> str:
    for i in schema.get("intents", ()):
        if i["name"] == intent and i.get("description"):
            return i["description"][0].lower() + i["description"][1:]
    return intent


def sgd_task(goal: dict[str, Any], schemas: dict[str, Any]) -> str:
    """An SGD goal (scenarios/sgd/goals.py) in plain words: one numbered part per subgoal."""
    parts = []
    subgoals = goal["subgoals"]
    for n, sg in enumerate(subgoals, 1):
        schema = schemas.get(sg["service"]) or {}
        previous = schemas.get(subgoals[n - 2]["service"]) or {} if n > 1 else {}
        carried = sg.get("from_previous") or {}
        lines = [fill("sgd", "part", number=n, service=sg["service"], intent=sg["intent"],
                      intent_description=_intent_words(schema, sg["intent"]))]

        def block(section: str, items: list[dict[str, Any]], **head: Any) -> None:
            if items:
                lines.append(fill("sgd", section, **head))
                lines.extend(fill("sgd", section + "_line", **item) for item in items)

        def line(slot: str, value: str | None = None) -> dict[str, Any]:
            out = {"description": _slot_words(schema, slot), "slot": slot}
            if value is not None:
                out["value"] = spoken_value(value)
            return out

        block("want", [line(s, v) for s, v in (sg.get("constraints") or {}).items()])
        block("optional", [line(s, v) for s, v in (sg.get("optional") or {}).items() if s not in carried])
        block("carried", [{**line(s, (sg.get("optional") or {}).get(s, UNKNOWN)),
                           "source_description": _slot_words(previous, src).lower(), "source_slot": src}
                          for s, src in carried.items()], source_part=n - 1)
        block("requested", [line(s) for s in sg.get("requested") or ()])
        block("relax", [line(s, v) for s, v in sg.get("relax") or ()])
        parts.append("\n".join(lines))
    return fill("sgd", "goal", count=len(subgoals), parts="\n".join(parts))


@lru_cache(maxsize=None)
def _pattern(file: str, section: str) -> re.Pattern[str]:
    """A section's template (one line) as a pattern whose groups are its placeholders."""
    template = sections(file)[section]
    out, pos = [], 0
    for m in string.Template.pattern.finditer(template):
        out.append(re.escape(template[pos:m.start()]))
        name = m.group("named") or m.group("braced")
        if name is None:  # "$$", an escaped dollar
            out.append(re.escape("$"))
        else:
            out.append(f"(?P<{name}>\\w+)" if name in _NAMES else f"(?P<{name}>.+?)")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out) + r"\s*$")


def _value(text: str, slot: str, schema: dict[str, Any]) -> str:
    if text == DONTCARE:
        return "dontcare"
    for s in schema.get("slots", ()):
        if s["name"] == slot and set(s.get("possible_values") or ()) == set(_BOOLEAN):
            return {v: k for k, v in _BOOLEAN.items()}.get(text, text)
    return text


def read_goal(prompt: str, schemas: dict[str, Any]) -> dict[str, Any]:
    """The SGD goal a prompt made by ``render`` states (services, and each part's service, intent, constraints,
    optional values, carried slots, requested slots and relaxations); ValueError when it states none."""
    heads = ("want", "optional", "carried", "requested", "relax")
    subgoals: list[dict[str, Any]] = []
    section = ""
    for text in prompt.split("\n"):
        m = _pattern("sgd", "part").match(text)
        if m:
            subgoals.append({"service": m["service"], "intent": m["intent"], "constraints": {}, "optional": {},
                             "requested": [], "relax": [], "from_previous": {}})
            section = ""
            continue
        if not subgoals:
            continue
        head = next((h for h in heads if _pattern("sgd", h).match(text)), None)
        if head is not None:
            section = head
            continue
        m = _pattern("sgd", section + "_line").match(text) if section else None
        if m is None:
            continue
        sg = subgoals[-1]
        schema = schemas.get(sg["service"]) or {}
        slot = m["slot"]
        if section == "requested":
            sg["requested"].append(slot)
        elif section == "relax":
            sg["relax"].append([slot, _value(m["value"], slot, schema)])
        elif section == "carried":
            sg["from_previous"][slot] = m["source_slot"]
            if m["value"] != UNKNOWN:
                sg["optional"][slot] = _value(m["value"], slot, schema)
        else:
            sg["constraints" if section == "want" else "optional"][slot] = _value(m["value"], slot, schema)
    if not subgoals:
        raise ValueError("the prompt states no SGD goal")
    services = list(dict.fromkeys(sg["service"] for sg in subgoals))
    return {"services": services, "subgoals": subgoals}
