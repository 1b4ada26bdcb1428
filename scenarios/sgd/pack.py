"""SGD scenario packs: a directory of mined data (entities, surface forms, templates, goal statistics).

On disk a pack is ``pack.json`` (format, version, id, sources, counts, file names), ``schemas.json`` and
gzip'd msgspec-JSON data files, plus a NOTICE with the CC BY-SA 4.0 attribution of the derived data.
This module loads packs; ``build_pack`` (in ``build.py``, re-exported here) writes them.
"""

from __future__ import annotations

import bisect
import gzip
import random
import re
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

import msgspec

from ...engine.errors import UserError
from .nlg import Realizer
from .schema import ServiceSchema, validate_schemas

FORMAT = "dialogsim-sgd-pack"
VERSION = 1
MANIFEST = "pack.json"
DEFAULT_PACK = Path(__file__).resolve().parent.parent / "packs" / "sgd"
_TIMEISH = re.compile(r"^\d{1,2}:\d{2}$|^\d{4}-\d{2}-\d{2}$")


_MISS = object()


T = TypeVar("T")


class Pack:
    """A loaded scenario pack: schemas, entity tables, surface forms, NLG and goal statistics."""

    def __init__(self, manifest: dict[str, Any], schemas: list[dict[str, Any]], entities: dict[str, Any],
                 values: dict[str, Any], templates: dict[str, Any], stats: dict[str, Any], path: Path | None = None):
        self.manifest = manifest
        self.path = path
        self._flat: dict[tuple[str, str, str], Any] = {}  # spoken(): (service, slot, canonical) -> forms | None
        self.id: str = manifest["id"]
        self.schemas: dict[str, dict[str, Any]] = {s["service_name"]: s for s in schemas}
        self._svc = {name: ServiceSchema(raw) for name, raw in self.schemas.items()}
        self.services: list[str] = sorted(self.schemas)
        self.mined_services: set[str] = set(manifest.get("mined_services", []))
        self.stats = stats
        self.tables: dict[str, dict[str, list[dict[str, str]]]] = {}  # service -> search intent -> entity rows
        self.echo: dict[str, dict[str, list[str]]] = {}
        for svc, intents in entities.items():
            for intent, table in intents.items():
                cols = table["columns"]
                self.tables.setdefault(svc, {})[intent] = [dict(zip(cols, row)) for row in table["rows"]]
                self.echo.setdefault(svc, {})[intent] = list(table.get("echo", []))
        self._all_rows = {svc: [r for rows in t.values() for r in rows] for svc, t in self.tables.items()}
        self._spoken: dict[str, dict[str, dict[str, tuple[list[str], list[int]]]]] = {
            svc: {slot: {c: _weighted(vs) for c, vs in cs.items()} for slot, cs in slots.items()}
            for svc, slots in values.get("spoken", {}).items()}
        self._global = {c: _weighted(vs) for c, vs in values.get("global", {}).items()}
        self._pools: dict[str, dict[str, list[str]]] = values.get("pools", {})
        self._reverse: dict[str, dict[str, dict[str, str]]] = {}
        self._derived: dict[Callable[[Pack], Any], Any] = {}  # derive(): builder -> what it built
        self.realizer = Realizer({sp: templates.get(sp, {}) for sp in ("USER", "SYSTEM")},
                                 templates.get("generic", {}), self._svc, templates.get("slot", {}))

    def derive(self, build: Callable[[Pack], T]) -> T:
        """``build(self)``, made on first use and kept: facts derived from this pack alone (a loaded pack never
        changes), shared by everything that uses the pack; ``build`` is the key, so each builder has its own."""
        try:
            return self._derived[build]
        except KeyError:
            got = self._derived[build] = build(self)
            return got

    def service(self, name: str) -> ServiceSchema:
        """The typed schema of a service; UserError for an unknown one."""
        try:
            return self._svc[name]
        except KeyError:
            raise UserError(f"pack {self.id}: unknown service {name!r}") from None

    def entities(self, service: str, intent: str | None = None) -> list[dict[str, str]]:
        """Entity rows of a service (all search intents), or the rows a given search intent returns."""
        if intent is None:
            return self._all_rows.get(service, [])
        return self.tables.get(service, {}).get(intent, [])

    def value_pool(self, service: str, slot: str) -> list[str]:
        """Canonical values seen (or generated) for a slot of a service."""
        return self._pools.get(service, {}).get(slot, [])

    def spoken_forms(self, service: str, slot: str, canonical: str) -> list[str]:
        """Every known surface form of a canonical value (most frequent first), the canonical when none."""
        got = self._spoken.get(service, {}).get(slot, {}).get(canonical) or self._global.get(canonical)
        return list(got[0]) if got else [canonical]

    def spoken(self, service: str, slot: str, canonical: str, rng: random.Random) -> str:
        """A surface form of a canonical value, drawn by mined frequency; the canonical itself when none."""
        key = (service, slot, canonical)
        got = self._flat.get(key, _MISS)
        if got is _MISS:  # resolved once per value: the nested lookups and the time pattern are off the hot path
            got = self._spoken.get(service, {}).get(slot, {}).get(canonical)
            if got is None:
                got = self._global.get(canonical) if _TIMEISH.match(canonical) else None
            if len(self._flat) > 500_000:
                self._flat.clear()
            self._flat[key] = got
        if got is None:
            return canonical
        values, cum = got
        if len(values) == 1:
            return values[0]
        return values[bisect.bisect_right(cum, rng.random() * cum[-1])]

    def canonical(self, service: str, slot: str, text: str) -> str | None:
        """The canonical value a surface form stands for (case-insensitive), or None when unknown."""
        rev = self._reverse.get(service)
        if rev is None:
            rev = self._reverse[service] = self._build_reverse(service)
        key = text.strip().lower()
        got = rev.get(slot, {}).get(key)
        if got is None and slot in self._svc.get(service, _NOSVC).slots:
            got = rev.get("", {}).get(key) if self._is_timeish_slot(service, slot) else None
        return got

    def _is_timeish_slot(self, service: str, slot: str) -> bool:
        pool = self.value_pool(service, slot)
        return bool(pool) and all(_TIMEISH.match(v) for v in pool[:3])

    def _build_reverse(self, service: str) -> dict[str, dict[str, str]]:
        rev: dict[str, dict[str, str]] = {}
        svc = self._svc.get(service)
        for slot in (svc.slots if svc else {}):
            m = rev.setdefault(slot, {})
            for v in list(svc.possible_values(slot)) + self.value_pool(service, slot):
                m.setdefault(v.lower(), v)
            for c, (values, _) in sorted(self._spoken.get(service, {}).get(slot, {}).items()):
                m.setdefault(c.lower(), c)
                for v in values:
                    m.setdefault(v.lower(), c)
        glob = rev.setdefault("", {})
        for c, (values, _) in sorted(self._global.items()):
            for v in values:
                glob.setdefault(v.lower(), c)
        return rev


class _NoSvc:
    slots: dict = {}


_NOSVC = _NoSvc()


def _weighted(pairs: list[list[Any]]) -> tuple[list[str], list[int]]:
    values, cum, total = [], [], 0
    for v, n in pairs:
        total += int(n)
        values.append(v)
        cum.append(total)
    return values, cum


# -- loading ----------------------------------------------------------------------------------------

_CACHE: dict[tuple[str, int], Pack] = {}


def _read(path: Path) -> Any:
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        return msgspec.json.decode(raw)
    except FileNotFoundError:
        raise UserError(f"{path}: pack file missing") from None
    except (OSError, EOFError, msgspec.DecodeError) as exc:
        raise UserError(f"{path}: unreadable pack file ({exc})") from None


def is_pack_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory holding an SGD pack manifest."""
    p = Path(path) / MANIFEST
    if not p.is_file():
        return False
    try:
        return msgspec.json.decode(p.read_bytes()).get("format") == FORMAT
    except (OSError, msgspec.DecodeError, AttributeError):
        return False


def load_pack(path: str | Path | None = None) -> Pack:
    """Load a pack directory (None: the bundled default); any problem is a UserError naming file and element."""
    root = Path(path) if path is not None else DEFAULT_PACK
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise UserError(f"{mpath}: not a pack (no {MANIFEST})")
    key = (str(mpath.resolve()), mpath.stat().st_mtime_ns)
    if key in _CACHE:
        return _CACHE[key]
    manifest = _read(mpath)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{mpath}: 'format' must be {FORMAT!r}")
    if manifest.get("version") != VERSION:
        raise UserError(f"{mpath}: unsupported pack version {manifest.get('version')!r} (this code reads {VERSION})")
    files = manifest.get("files")
    if not isinstance(manifest.get("id"), str) or not isinstance(files, dict):
        raise UserError(f"{mpath}: missing 'id' or 'files'")
    data = {}
    for name in ("schemas", "entities", "values", "templates", "stats"):
        if not isinstance(files.get(name), str):
            raise UserError(f"{mpath}: 'files' lacks {name!r}")
        data[name] = _read(root / files[name])
    spath = root / files["schemas"]
    schemas = validate_schemas(data["schemas"], spath)
    names = {s["service_name"]: ServiceSchema(s) for s in schemas}
    _check(root / files["entities"], data["entities"], names)
    for part in ("values", "templates", "stats"):
        if not isinstance(data[part], dict):
            raise UserError(f"{root / files[part]}: expected a JSON object")
    for sp in ("USER", "SYSTEM"):
        for svc in data["templates"].get(sp, {}):
            if svc not in names:
                raise UserError(f"{root / files['templates']}: {sp} templates name unknown service {svc!r}")
    pack = Pack(manifest, schemas, data["entities"], data["values"], data["templates"], data["stats"], root)
    _CACHE[key] = pack
    return pack


def _check(path: Path, entities: Any, services: dict[str, ServiceSchema]) -> None:
    if not isinstance(entities, dict):
        raise UserError(f"{path}: expected a JSON object")
    for svc, intents in entities.items():
        if svc not in services:
            raise UserError(f"{path}: service {svc!r} is not in the pack's schemas")
        for intent, table in intents.items():
            if intent not in services[svc].intents:
                raise UserError(f"{path}: service {svc!r}: unknown intent {intent!r}")
            cols = table.get("columns") if isinstance(table, dict) else None
            if not isinstance(cols, list) or not isinstance(table.get("rows"), list):
                raise UserError(f"{path}: service {svc!r} intent {intent!r}: expected 'columns' and 'rows'")
            for c in cols:
                if c not in services[svc].slots:
                    raise UserError(f"{path}: service {svc!r} intent {intent!r}: unknown slot {c!r}")
            for k, row in enumerate(table["rows"]):
                if not isinstance(row, list) or len(row) != len(cols):
                    raise UserError(f"{path}: service {svc!r} intent {intent!r}: row #{k} does not match the columns")




def build_pack(dialogue_dirs: Iterable[str | Path], schema_paths: Iterable[str | Path], out_dir: str | Path,
               progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None) -> dict[str, Any]:
    """Mine dialogues under the given schemas and write a pack to ``out_dir``; returns its manifest."""
    from .build import build_pack as build

    return build(dialogue_dirs, schema_paths, out_dir, progress)
