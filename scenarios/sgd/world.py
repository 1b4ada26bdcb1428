"""The simulated SGD backend: searches filter a pack's entity tables, transactions succeed or fail.

Search semantics follow SGD: every required slot must be given (a transaction's with a value, never
"dontcare": nobody books a table at any restaurant); optional slots not given take the schema
default ("dontcare" or "" = any value); a value "dontcare" matches anything; values are canonical and
compared case-insensitively. Slots a search only echoes (party sizes, dates; mined per intent) never
filter: the result rows carry the requested value. A transaction is impossible when it names an entity
(a ``*_name``/``*_title`` parameter) that no row of the service's tables matches on the columns they
share (the restaurant does not exist in that city); a possible one still
fails with probability ``failure_rate``, drawn from the world's own random stream.
"""

from __future__ import annotations

import random
from typing import Any

from .pack import Pack
from .values import ANY_VALUES, slot_kind



def _is_name(slot: str) -> bool:
    """Whether a slot names an entity (restaurant_name, movie_title): bookings of unknown ones are impossible."""
    return slot.endswith("name") or slot.endswith("title")


class _Table:
    """One intent's rows with an index from (slot, lower-cased value) to row numbers."""

    __slots__ = ("rows", "index", "columns", "echo", "echo_results", "cap", "ident", "names", "all", "name_columns",
                 "filters")

    def __init__(self, rows: list[dict[str, str]], echo: list[str], result_slots: tuple[str, ...] = (),
                 cap: int = 10, ident: str | None = None):
        self.rows = rows
        self.cap = cap  # most results a call returns (real SGD: one weather report, one balance, 5 flights)
        self.ident = ident  # the column naming the entity: one result per entity (one "Long Shot", not three)
        self.echo = frozenset(echo)
        self.echo_results = tuple(s for s in echo if s in result_slots)  # echoed back into result rows
        self.columns = frozenset(k for r in rows for k in r)
        self.filters = self.columns - self.echo  # the columns a search filters on
        self.name_columns = frozenset(k for k in self.columns if _is_name(k))  # columns that name an entity
        index: dict[str, dict[str, list[int]]] = {}
        for n, row in enumerate(rows):
            for k, v in row.items():
                index.setdefault(k, {}).setdefault(v.lower(), []).append(n)
        # per value: the row numbers in order (to walk) and as a set (to test): no sort at call time
        self.index: dict[str, dict[str, tuple[tuple[int, ...], frozenset[int]]]] = {
            k: {v: (tuple(ns), frozenset(ns)) for v, ns in by.items()} for k, by in index.items()}
        self.all = tuple(range(len(rows)))
        self.names = [row.get(ident, "").lower() for row in rows] if ident else []

    def match(self, filters: dict[str, str]) -> tuple[int, ...] | list[int]:
        """Row numbers, ascending, matching every filter on a column of the table (others are ignored)."""
        hits = None
        columns, index = self.filters, self.index
        for k, v in filters.items():
            if k not in columns or v in ANY_VALUES:
                continue
            hit = index[k].get(v.lower())
            if hit is None:
                return ()
            if hits is None:
                hits = [hit]
            else:
                hits.append(hit)
        if hits is None:
            return self.all
        if len(hits) == 1:
            return hits[0][0]
        # intersect the row sets in C (the smallest is walked), then put the few common rows in order
        return sorted(frozenset.intersection(*[h[1] for h in hits]))


class SgdWorld:
    """Executes service calls against a pack's entity tables, deterministically per ``rng``.

    A search returns at most ``max_results`` rows, by default as many as real SGD calls of that intent
    returned at most (one weather report, five flights, ten restaurants), one row per named entity.
    """

    def __init__(self, pack: Pack, rng: random.Random, failure_rate: float = 0.04, max_results: int | None = None):
        self.pack = pack
        self.rng = rng
        self.failure_rate = failure_rate
        self.max_results = max_results
        self._specs = pack.derive(_specs)
        self._by_service = pack.derive(_by_service)

    def call(self, service: str, method: str, parameters: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None]:
        """Run one call: (rows, None), ([], None) when nothing matches or a booking fails, (None, error)."""
        spec = self._specs.get((service, method))
        if spec is None:
            return None, self._unknown(service, method)
        if not isinstance(parameters, dict):
            return None, "parameters must be an object"
        required, allowed, categorical, defaults, transactional, result_slots, table = spec
        for slot in required:
            if not parameters.get(slot):
                return None, f"{service}.{method}: missing required slot {slot!r}"
            if transactional and parameters[slot] == "dontcare":
                return None, f"{service}.{method}: required slot {slot!r} needs a value, not 'dontcare', to be booked"
        for slot, value in parameters.items():
            if slot not in allowed:
                return None, f"{service}.{method}: {slot!r} is not a parameter of this intent"
            if value.__class__ is not str:
                return None, f"{service}.{method}: value of {slot!r} must be a string"
            values = categorical.get(slot)
            if values is not None and value not in values:
                return None, f"{service}.{method}: {value!r} is not a possible value of {slot!r}"
        params = dict(defaults)
        params.update(parameters)
        if not transactional:
            return self._search(table, params), None
        return self._transact(service, params, result_slots), None

    def _unknown(self, service: str, method: str) -> str:
        if service not in self.pack.schemas:
            return f"unknown service {service!r}"
        return f"service {service!r} has no intent {method!r}"

    def _search(self, table: _Table | None, params: dict[str, str]) -> list[dict[str, Any]]:
        if table is None:
            return []
        hits = table.match(params)
        n_hits = len(hits)
        if n_hits > 1:
            # from a random start, wrapping round: results vary per call at the cost of one draw
            start = self.rng.randrange(n_hits)
            cap = table.cap if self.max_results is None else self.max_results
            names = table.names
            rotated = [*hits[start:], *hits[:start]]
            if names:
                kept = []
                seen: set[str] = set()
                for n in rotated:
                    name = names[n]
                    if name not in seen:
                        seen.add(name)
                        kept.append(n)
                        if len(kept) == cap:
                            break
                hits = kept
            else:
                hits = rotated[:cap]
        rows = table.rows
        echoed = table.echo_results and {slot: v for slot in table.echo_results
                                         if (v := params.get(slot)) and v != "dontcare"}
        if echoed:
            return [{**rows[n], **echoed} for n in hits]
        return [dict(rows[n]) for n in hits]

    def _transact(self, service: str, params: dict[str, str], result_slots: tuple[str, ...]) -> list[dict[str, Any]]:
        match: dict[str, str] | None = None
        named = False
        for table in self._by_service.get(service, ()):
            filters = table.filters
            keys = {k: v for k, v in params.items() if k in filters and v not in ANY_VALUES}
            if not keys:
                continue
            named = named or not table.name_columns.isdisjoint(keys)
            hits = table.match(keys)
            if hits:
                match = table.rows[hits[0]]
                break
        if named and match is None:
            return []  # it names an entity (a restaurant, a hotel) that does not exist as asked
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


def indexed_tables(pack: Pack) -> dict[tuple[str, str], _Table]:
    """The indexed tables of a pack, per (service, intent); use ``pack.derive(indexed_tables)``, built once per pack."""
    caps = _caps(pack)
    got = {}
    for svc, intents in pack.tables.items():
        schema = pack.service(svc)
        for intent, rows in intents.items():
            names = [c for c in schema.intents[intent].result_slots if _is_name(c) and rows and c in rows[0]
                     and slot_kind(schema.slots[c]) != "station"]
            got[(svc, intent)] = _Table(rows, pack.echo.get(svc, {}).get(intent, []),
                                        schema.intents[intent].result_slots,
                                        caps.get((svc, intent)) or caps.get(intent) or 10,
                                        names[0] if names else None)
    return got


def _by_service(pack: Pack) -> dict[str, list[_Table]]:
    """Per service, the tables of its search intents (in intent order): where a booking looks its entity up."""
    got: dict[str, list[_Table]] = {}
    for (svc, _), table in sorted(pack.derive(indexed_tables).items()):
        got.setdefault(svc, []).append(table)
    return got


def _caps(pack: Pack) -> dict[Any, int]:
    """Most results per search, mined per (service, intent); an unseen service takes its intent name's."""
    caps: dict[Any, int] = {}
    for svc, st in pack.stats.get("services", {}).items():
        for intent, n in st.get("results", {}).items():
            if n > 0:
                caps[(svc, intent)] = n
                caps[intent] = max(caps.get(intent, 0), n)
    return caps


def _specs(pack: Pack) -> dict[tuple[str, str], tuple]:
    """Per (service, intent): required slots, allowed slots, categorical value sets, defaults, kind, results and
    the intent's table (None when the pack has no rows for it)."""
    got = {}
    indexed = pack.derive(indexed_tables)
    for name in pack.services:
        svc = pack.service(name)
        for intent in svc.intents.values():
            allowed = frozenset(intent.required_slots) | frozenset(intent.optional_slots)
            categorical = {s: frozenset(svc.slots[s].possible_values) | {"dontcare"}
                           for s in allowed if svc.is_categorical(s)}
            got[(name, intent.name)] = (intent.required_slots, allowed, categorical, dict(intent.optional_slots),
                                        intent.is_transactional, intent.result_slots,
                                        indexed.get((name, intent.name)))
    return got
