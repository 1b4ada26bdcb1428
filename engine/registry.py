"""Spec strings to users, agents and scenario sets: ``name`` or ``name:arg`` (``http:http://host:8080``).

Built-in parts register themselves from the modules in BUILTIN_MODULES; a factory is called once per
run as ``factory(arg, scenarios, options)`` and returns a callable that makes a fresh user or agent
for each episode (it may also have an async ``aclose()``, awaited when the run ends). An agent factory
whose agents call a live service says how many calls it keeps in flight at most as ``concurrency``:
a run then keeps that many busy by default (``session.default_concurrency``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

from .errors import UserError

Factory = Callable[[str | None, Any, dict[str, Any]], Callable[[], Any]]
ScenarioLoader = Callable[[str | None], Any]

BUILTIN_MODULES = [
    "dialogsim.scenarios.builtin",
    "dialogsim.users.scripted",
    "dialogsim.agents.scripted",
    "dialogsim.scenarios.sgd.scenario_set",
    "dialogsim.agents.http_native", "dialogsim.agents.openai_chat",
    "dialogsim.users.agenda", "dialogsim.agents.schema_agent",
]

DEFAULT_SCENARIOS = "sgd"

_users: dict[str, Factory] = {}
_agents: dict[str, Factory] = {}
_scenarios: dict[str, ScenarioLoader] = {}
_loaded = False


def register_user(name: str, factory: Factory) -> None:
    """Make ``--user name[:arg]`` build users with ``factory``."""
    _users[name] = factory


def register_agent(name: str, factory: Factory) -> None:
    """Make ``--agent name[:arg]`` build agents with ``factory``."""
    _agents[name] = factory


def register_scenarios(name: str, loader: ScenarioLoader) -> None:
    """Make ``--scenarios name[:arg]`` load a scenario set with ``loader(arg)``."""
    _scenarios[name] = loader


def load_builtins() -> None:
    """Import the built-in modules once, so that they register their parts."""
    global _loaded
    if not _loaded:
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
        _loaded = True


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``"http:http://x"`` -> ``("http", "http://x")``; ``"agenda"`` -> ``("agenda", None)``."""
    name, sep, arg = spec.partition(":")
    return name, (arg if sep else None)


def _lookup(table: dict[str, Any], kind: str, spec: str) -> tuple[Any, str | None]:
    load_builtins()
    name, arg = parse_spec(spec)
    if name not in table:
        known = ", ".join(sorted(table)) or "none"
        raise UserError(f"unknown {kind} {name!r} (known: {known})")
    return table[name], arg


def user_factory(spec: str, scenarios: Any, options: dict[str, Any] | None = None) -> Callable[[], Any]:
    """The per-episode user maker for ``spec``."""
    factory, arg = _lookup(_users, "user", spec)
    return factory(arg, scenarios, dict(options or {}))


def agent_factory(spec: str, scenarios: Any, options: dict[str, Any] | None = None) -> Callable[[], Any]:
    """The per-episode agent maker for ``spec``."""
    factory, arg = _lookup(_agents, "agent", spec)
    return factory(arg, scenarios, dict(options or {}))


def load_scenarios(spec: str | None = None) -> Any:
    """A scenario set from a registered name (``sgd``, ``builtin``, ``name:arg``) or a pack directory
    (``PACK_DIR[#Svc_1,Svc_2][?key=value]``, the sgd loader's argument)."""
    spec = spec or DEFAULT_SCENARIOS
    load_builtins()
    base = spec.split("?", 1)[0].split("#", 1)[0]
    path = Path(base)
    if spec not in _scenarios and base and path.exists():
        if (path / "pack.json").is_file() and "sgd" in _scenarios:
            return _scenarios["sgd"](spec)
        raise UserError(f"{path}: not a scenario pack (no pack.json inside)")
    loader, arg = _lookup(_scenarios, "scenario set", spec)
    return loader(arg)


def known(kind: str) -> list[str]:
    """Registered names of ``kind`` ("user", "agent" or "scenarios")."""
    load_builtins()
    return sorted({"user": _users, "agent": _agents, "scenarios": _scenarios}[kind])
