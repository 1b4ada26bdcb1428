"""One registry for every kind of plug-in: users, agents, scenario sets, projections, commands, corpora.

A plug-in has a kind, a name and a target: the object itself, or a ``"module:attribute"`` path (a module
path alone for commands) imported the first time the plug-in is used, so that a run imports only what it
uses. The built-ins are listed in ``engine/plugins.py``; a plug-in of your own registers with ``register``.

What a target is, by kind:

- ``user`` and ``agent``: a factory, called once per run as ``factory(arg, scenarios, options)``, that
  returns a callable making a fresh user or agent for each episode (it may also have an async
  ``aclose()``, awaited when the run ends); ``--user name[:arg]``, ``--agent name[:arg]``. An agent
  factory whose agents call a live service says how many calls it keeps in flight at most as
  ``concurrency``: a run then keeps that many busy by default (``session.default_concurrency``). An agent
  factory with ``branches(events)`` forks each of a run's episodes when it ends (as a scenario set's does,
  which comes first: docs/prefix.md).
- ``scenarios``: a loader, ``loader(arg) -> ScenarioSet``; ``--scenarios name[:arg]``.
- ``projection``: a factory, ``factory(options) -> Projection``; ``dialogsim project RUN --to name``.
- ``command``: a module with ``configure(parser)``, which adds its arguments and sets ``handler``; a name of
  two words (``"import sgd"``) is a subcommand of the first, whose own entry's target is None.
- ``corpus``: a reader of an external dialogue corpus, ``read(path) -> Iterator[list[Event]]``, one
  episode's events per dialogue (``dialogsim stats --compare``).
- ``metric``: a per-episode metric, ``fold(events) -> (sum, count) | None`` (the run's figure is the sum of
  sums over the sum of counts; None: the episode has no such figure), compared by ``dialogsim diff``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

from .errors import UserError

KINDS = ("user", "agent", "scenarios", "projection", "command", "corpus", "metric")
_LABELS = {"user": "user", "agent": "agent", "scenarios": "scenario set", "projection": "projection",
           "command": "command", "corpus": "corpus", "metric": "metric"}


class Entry:
    """A registered plug-in: its target (an object, or a path imported on first use) and a line of help."""

    __slots__ = ("target", "help", "loaded")

    def __init__(self, target: Any, help: str) -> None:
        self.target, self.help, self.loaded = target, help, not isinstance(target, str)

    def load(self) -> Any:
        """The plug-in's object, imported now if it has not been."""
        if not self.loaded:
            module, _, attribute = self.target.partition(":")
            value = importlib.import_module(module)
            self.target = getattr(value, attribute) if attribute else value
            self.loaded = True
        return self.target


_entries: dict[str, dict[str, Entry]] = {kind: {} for kind in KINDS}
_builtins_listed = False


def register(kind: str, name: str, target: Any, help: str = "") -> None:
    """Make ``name`` a plug-in of ``kind``; ``target`` is the object or a ``"module:attribute"`` path."""
    if kind not in _entries:
        raise ValueError(f"unknown plug-in kind {kind!r} (kinds: {', '.join(KINDS)})")
    _entries[kind][name] = Entry(target, help)


def _table(kind: str) -> dict[str, Entry]:
    global _builtins_listed
    if not _builtins_listed:
        _builtins_listed = True
        from .plugins import BUILTINS  # the composition root: names and paths only, nothing imported

        for b_kind, name, target, help in BUILTINS:
            _entries[b_kind].setdefault(name, Entry(target, help))
    return _entries[kind]


def names(kind: str) -> list[str]:
    """The registered names of ``kind``, sorted."""
    return sorted(_table(kind))


def help_of(kind: str, name: str) -> str:
    """The line of help registered with a plug-in ("" when it has none)."""
    return _table(kind)[name].help


def is_group(name: str) -> bool:
    """Whether the command ``name`` only groups subcommands (``import`` of ``import sgd``)."""
    entry = _table("command").get(name)
    return entry is not None and entry.loaded and entry.target is None


def lookup(kind: str, name: str) -> Any:
    """The plug-in ``name`` of ``kind``, imported on first use; a UserError naming the known ones if absent."""
    entry = _table(kind).get(name)
    if entry is None:
        known = ", ".join(n for n in sorted(_table(kind)) if " " not in n) or "none"
        raise UserError(f"unknown {_LABELS[kind]} {name!r} (known: {known})")
    return entry.load()


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``"http:http://x"`` -> ``("http", "http://x")``; ``"agenda"`` -> ``("agenda", None)``."""
    name, sep, arg = spec.partition(":")
    return name, (arg if sep else None)


def parse_options(pairs: list[str], flag: str) -> dict[str, str]:
    """``["k=v", ...]`` given as ``flag KEY=VALUE`` -> ``{"k": "v"}``; a UserError naming the flag for a bad pair."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"{flag} {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


def user_factory(spec: str, scenarios: Any, options: dict[str, Any] | None = None) -> Callable[[], Any]:
    """The per-episode user maker for ``spec``; a scenario set with ``check_user(spec)`` may refuse the user."""
    check = getattr(scenarios, "check_user", None)
    if check is not None:
        check(spec)
    name, arg = parse_spec(spec)
    return lookup("user", name)(arg, scenarios, dict(options or {}))


def agent_factory(spec: str, scenarios: Any, options: dict[str, Any] | None = None) -> Callable[[], Any]:
    """The per-episode agent maker for ``spec``."""
    name, arg = parse_spec(spec)
    return lookup("agent", name)(arg, scenarios, dict(options or {}))


def load_scenarios(spec: str | None = None) -> Any:
    """A scenario set from a registered name (``sgd``, ``builtin``, ``name:arg``) or a pack directory
    (``PACK_DIR[#Svc_1,Svc_2][?key=value]``, the default set's argument)."""
    from .plugins import DEFAULT_SCENARIOS

    spec = spec or DEFAULT_SCENARIOS
    base = spec.split("?", 1)[0].split("#", 1)[0]
    path = Path(base)
    if spec not in _table("scenarios") and base and path.exists():
        if (path / "pack.json").is_file():
            return lookup("scenarios", DEFAULT_SCENARIOS)(spec)
        raise UserError(f"{path}: not a scenario pack (no pack.json inside)")
    name, arg = parse_spec(spec)
    return lookup("scenarios", name)(arg)


def projection(name: str, options: dict[str, Any] | None = None) -> Any:
    """The projection registered under ``name``, built with ``options``."""
    return lookup("projection", name)(dict(options or {}))
