"""The simulated SGD backend: searches filter a pack's entity tables, transactions succeed or fail.

Search semantics follow SGD: every required slot must be given; optional slots not given take the schema
default ("dontcare" or "" = any value); a value "dontcare" matches anything; values are canonical and
compared case-insensitively. Slots a search only echoes (party sizes, dates; mined per intent) never
filter: the result rows carry the requested value. A transaction is impossible when its parameters name
an entity that no row of the service's tables matches on the columns they share; a possible one still
fails with probability ``failure_rate``, drawn from the world's own random stream.
"""

from __future__ import annotations

import random
from typing import Any

from .pack import Pack

_ANY = ("dontcare", "")


class _Table:
    """One intent's rows with an index from (slot, lower-cased value) to row numbers."""

    __slots__ = ("rows", "index", "columns", "echo")

    def __init__(self, rows: list[dict[str, str]], echo: list[str]):
        self.rows = rows
        self.echo = frozenset(echo)
        self.columns = frozenset(k for r in rows for k in r)
        self.index: dict[str, dict[str, list[int]]] = {}
        for n, row in enumerate(rows):
            for k, v in row.items():
                self.index.setdefault(k, {}).setdefault(v.lower(), []).append(n)

    def match(self, filters: dict[str, str]) -> list[int]:
        """Row numbers matching every filter on a column of the table (others are ignored)."""
        best: set[int] | None = None
        for k, v in filters.items():
            if v in _ANY or k in self.echo or k not in self.columns:
                continue
            hit = self.index[k].get(v.lower())
            if not hit:
                return []
            best = set(hit) if best is None else best.intersection(hit)
            if not best:
                return []
        return sorted(best) if best is not None else list(range(len(self.rows)))


class SgdWorld:
    """Executes service calls against a pack's entity tables, deterministically per ``rng``."""

    def __init__(self, pack: Pack, rng: random.Random, failure_rate: float = 0.1, max_results: int = 10):
        self.pack = pack
        self.rng = rng
        self.failure_rate = failure_rate
        self.max_results = max_results
        self._tables = _tables_of(pack)

    def call(self, service: str, method: str, parameters: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None]:
        """Run one call: (rows, None), ([], None) when nothing matches or a booking fails, (None, error)."""
        svc = self.pack._svc.get(service)
        if svc is None:
            return None, f"unknown service {service!r}"
        intent = svc.intents.get(method)
        if intent is None:
            return None, f"service {service!r} has no intent {method!r}"
        if not isinstance(parameters, dict):
            return None, "parameters must be an object"
        for slot in intent.required_slots:
            if slot not in parameters or parameters[slot] in (None, ""):
                return None, f"{service}.{method}: missing required slot {slot!r}"
        allowed = set(intent.required_slots) | set(intent.optional_slots)
        for slot, value in parameters.items():
            if slot not in allowed:
                return None, f"{service}.{method}: {slot!r} is not a parameter of this intent"
            if not isinstance(value, str):
                return None, f"{service}.{method}: value of {slot!r} must be a string"
            if svc.is_categorical(slot) and value != "dontcare" and value not in svc.slots[slot].possible_values:
                return None, f"{service}.{method}: {value!r} is not a possible value of {slot!r}"
        params = dict(intent.optional_slots)
        params.update(parameters)
        if not intent.is_transactional:
            return self._search(service, method, params, intent.result_slots), None
        return self._transact(service, params, intent.result_slots), None

    def _search(self, service: str, method: str, params: dict[str, str], result_slots: tuple[str, ...]) -> list[dict[str, Any]]:
        table = self._tables.get((service, method))
        if table is None:
            return []
        hits = table.match(params)
        if len(hits) > 1:
            self.rng.shuffle(hits)
        out = []
        for n in hits[: self.max_results]:
            row = dict(table.rows[n])
            for slot in table.echo:
                v = params.get(slot)
                if v not in (None, "", "dontcare") and slot in result_slots:
                    row[slot] = v
            out.append(row)
        return out

    def _transact(self, service: str, params: dict[str, str], result_slots: tuple[str, ...]) -> list[dict[str, Any]]:
        match: dict[str, str] | None = None
        shared_any = False
        for (svc, _), table in self._tables.items():
            if svc != service:
                continue
            keys = {k: v for k, v in params.items() if k in table.columns and k not in table.echo and v not in _ANY}
            if not keys:
                continue
            shared_any = True
            hits = table.match(keys)
            if hits:
                match = table.rows[hits[0]]
                break
        if shared_any and match is None:
            return []
        if self.rng.random() < self.failure_rate:
            return []
        row = {k: v for k, v in params.items() if k in result_slots}
        for slot in result_slots:
            if slot not in row:
                if match is not None and slot in match:
                    row[slot] = match[slot]
                else:
                    pool = self.pack.value_pool(service, slot)
                    row[slot] = pool[self.rng.randrange(len(pool))] if pool else ""
        return [row]


def _tables_of(pack: Pack) -> dict[tuple[str, str], _Table]:
    """The indexed tables of a pack, built once per pack object and shared (read-only) by its worlds."""
    got = pack.__dict__.get("_world_tables")
    if got is None:
        got = {(svc, intent): _Table(rows, pack.echo.get(svc, {}).get(intent, []))
               for svc, intents in pack._tables.items() for intent, rows in intents.items()}
        pack.__dict__["_world_tables"] = got
    return got
