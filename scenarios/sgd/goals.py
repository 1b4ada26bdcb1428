"""Sampling user goals over a pack: single intents, search-then-transaction chains, multi-service dialogues.

A goal is JSON-able::

    {"services": [service, ...],            # in dialogue order
     "subgoals": [{
        "service": str, "intent": str,
        "constraints": {slot: canonical},   # what the user states (required slots and optional ones they care about)
        "optional": {slot: canonical},      # values the user gives only when asked: optional slots (else the default),
                                            # and a transaction's carried-over required slots (should carrying fail)
        "requested": [slot, ...],           # result slots the user asks about once offered/booked
        "relax": [[slot, canonical_or_"dontcare"], ...],  # changes applied in order after nothing matches / a failure
        "feasible": bool,                   # can the constraints as first stated be met (transactions: modulo random failure)
        "from_previous": {slot: prev_slot}, # slot <- value of prev_slot in the result row of the previous subgoal
        "entity": {slot: value} | None,     # the search entity the constraints were drawn from (searches only)
     }, ...]}

Constraint values come from a real entity of the pack so a search can succeed; a share of searches is
made infeasible by changing one constraint to a value no entity matches together with the others (its
relax entry changes it back). Chains and service sequences follow the pack's mined statistics.
"""

from __future__ import annotations

import bisect
import random
from typing import Any

from .pack import Pack
from .pairs import is_date, order_dates, slot_pairs
from .schema import IntentSchema, ServiceSchema
from .values import ANY_VALUES, value_kind
from .world import indexed_tables


class _IntentFacts:
    """What a draw needs of one intent, derived from the pack once: its table and rows, echo slots, required
    and sorted optional (slot, default) slots, mined request rates, the entities a booking can name, and
    the links and look-aheads computed so far."""

    __slots__ = ("intent", "table", "rows", "echo", "required", "optional_items", "rates", "fitting", "txn_echo",
                 "links", "ahead")

    def __init__(self, pack: Pack, svc: ServiceSchema, intent: IntentSchema) -> None:
        tables = pack.derive(indexed_tables)
        self.intent = intent
        self.table = table = tables.get((svc.name, intent.name))
        self.rows = pack.entities(svc.name, intent.name) if not intent.is_transactional else []
        self.echo = table.echo if table is not None else frozenset()
        self.required = tuple(intent.required_slots)
        self.optional_items = tuple(sorted(intent.optional_slots.items()))
        st = pack.stats.get("services", {}).get(svc.name, {})
        n_intent = st.get("intents", {}).get(intent.name, 0)
        counts = st.get("requested", {}).get(intent.name, {})
        # (slot, request rate) of result slots; None for an intent real dialogues never had
        self.rates = [(s, min(0.9, counts.get(s, 0) / n_intent)) for s in intent.result_slots
                      if counts.get(s)] if n_intent else None
        self.fitting: list[dict[str, str]] = []  # transactions: the entities that have one of its inputs
        self.txn_echo: frozenset[str] = frozenset()  # transactions: the slots any search of the service echoes
        if intent.is_transactional:
            inputs = set(intent.required_slots) | set(intent.optional_slots)
            own = [t for (s, _), t in tables.items() if s == svc.name]
            self.fitting = [r for r in pack.entities(svc.name) if inputs & set(r)]
            self.txn_echo = frozenset().union(*(t.echo for t in own)) if own else frozenset()
        self.links: dict[tuple[str, str], dict[str, str]] = {}  # (previous service, intent) -> from_previous
        self.ahead: dict[tuple, list[int]] = {}  # (next service, intent, link items) -> rows (see _ahead)


class _ServiceFacts:
    """What a draw needs of one service, derived from the pack once: intent chains, slot pairs, value pools
    and the facts of its intents (one attribute read instead of a memo key per lookup on the hot path)."""

    __slots__ = ("pack", "svc", "name", "chains", "places", "dates", "pools", "intents")

    def __init__(self, pack: Pack, svc: ServiceSchema) -> None:
        self.pack, self.svc, self.name = pack, svc, svc.name
        self.chains = _weights({k: float(n) for k, n in pack.stats.get("services", {}).get(svc.name, {}).get(
            "chains", {}).items() if k and all(i in svc.intents for i in k.split(">")) and len(k.split(">")) <= 2
            and len(set(k.split(">"))) == len(k.split(">"))})
        self.places, self.dates = slot_pairs(svc.slots)
        self.pools: dict[str, list[str]] = {}  # slot -> its value pool without "dontcare" and "" (see pool)
        self.intents = {name: _IntentFacts(pack, svc, intent) for name, intent in svc.intents.items()}

    def pool(self, slot: str) -> list[str]:
        pool = self.pools.get(slot)
        if pool is None:
            pool = self.pools[slot] = [v for v in self.pack.value_pool(self.name, slot) if v not in ANY_VALUES]
        return pool


class _Facts(dict):
    """Service name -> _ServiceFacts, built on first use (an unknown service is a UserError); with the slot
    kinds and service pools judged so far. One per pack: ``pack.derive(_Facts)``."""

    def __init__(self, pack: Pack) -> None:
        super().__init__()
        self.pack = pack
        self.kinds: dict[tuple[str, str], str] = {}  # (service, slot) -> _vkind
        self.pools: dict[tuple[str, ...] | None, tuple[list[str], Any]] = {}  # services asked -> pool, weights

    def __missing__(self, name: str) -> _ServiceFacts:
        got = self[name] = _ServiceFacts(self.pack, self.pack.service(name))
        return got


def _weights(items: dict[str, float]) -> tuple[list[str], list[float]] | None:
    keys = sorted(k for k, n in items.items() if n > 0)
    if not keys:
        return None
    cum, total = [], 0.0
    for k in keys:
        total += items[k]
        cum.append(total)
    return keys, cum


def _pick(rng: random.Random, weighted: tuple[list[str], list[float]]) -> str:
    keys, cum = weighted
    return keys[min(bisect.bisect_right(cum, rng.random() * cum[-1]), len(keys) - 1)]


def _service_weights(pack: Pack, pool: list[str]) -> tuple[Any, Any, dict[str, list[str]], Any]:
    """(service pair weights, domain pair weights, pool services by domain, single service weights)."""
    stats = pack.stats
    pairs = _weights({k: float(n) for k, n in stats.get("pairs", {}).items()
                      if all(s in pool for s in k.split("|"))})
    by_domain: dict[str, list[str]] = {}
    for s in pool:
        by_domain.setdefault(s.rsplit("_", 1)[0], []).append(s)
    dpairs: dict[str, float] = {}
    for k, n in stats.get("pairs", {}).items():
        doms = [s.rsplit("_", 1)[0] for s in k.split("|")]
        if all(d in by_domain for d in doms) and len(set(doms)) == len(doms):
            dpairs["|".join(doms)] = dpairs.get("|".join(doms), 0.0) + n
    single = _weights({s: float(stats.get("services", {}).get(s, {}).get("dialogues", 0)) or 50.0 for s in pool})
    return pairs, _weights(dpairs), by_domain, single


def _services_for(rng: random.Random, pool: list[str], weights: tuple, multi_share: float) -> list[str]:
    pairs, dpairs, by_domain, single = weights
    if rng.random() < multi_share and len(pool) > 1:
        if pairs:
            return _pick(rng, pairs).split("|")
        if dpairs:
            return [rng.choice(by_domain[d]) for d in _pick(rng, dpairs).split("|")]
        return rng.sample(sorted(pool), 2)
    return [_pick(rng, single)]


def _chain(sf: _ServiceFacts, rng: random.Random) -> list[_IntentFacts]:
    if sf.chains:
        return [sf.intents[i] for i in _pick(rng, sf.chains).split(">")]
    svc = sf.svc
    search, txn = svc.search_intents, svc.transactional_intents
    r = rng.random()
    if search and txn and r < 0.5:
        s = rng.choice(search)
        linked = [t for t in txn if set(t.required_slots) & set(s.result_slots)] or txn
        chain = [s, rng.choice(linked)]
    elif search and (r < 0.8 or not txn):
        chain = [rng.choice(search)]
    else:
        chain = [rng.choice(txn or search)]
    return [sf.intents[i.name] for i in chain]


def _link(prev_sf: _ServiceFacts, prev_it: _IntentFacts, sf: _ServiceFacts, it: _IntentFacts) -> dict[str, str]:
    """from_previous across subgoals (a fresh dict; computed once per pair of intents)."""
    key = (prev_sf.name, prev_it.intent.name)
    link = it.links.get(key)
    if link is None:
        link = it.links[key] = _compute_link(sf.pack, prev_sf.svc, prev_it.intent, sf.svc, it.intent)
    return dict(link)


def _compute_link(pack: Pack, prev_svc: ServiceSchema, prev_intent: IntentSchema, svc: ServiceSchema,
                  intent: IntentSchema) -> dict[str, str]:
    """Same-service chains share slot names; across services use mined transfers, else same names or cities.

    Across services a source slot feeds one target at most (a bus does not go from the rental station to
    the same station) and only between slots whose values are of one kind (a station is not a city).
    """
    inputs = list(intent.required_slots) + list(intent.optional_slots)
    results = set(prev_intent.result_slots) | set(prev_intent.required_slots) | set(prev_intent.optional_slots)
    if prev_svc.name == svc.name:
        # a booking takes everything over; a second search (one-way, then round trip) only what it needs
        keep = inputs if intent.is_transactional else intent.required_slots
        return {s: s for s in keep if s in results}
    starts = {a for a, _ in _pairs(pack, svc)[0] + _pairs(pack, svc)[1]}
    cands: list[tuple[int, int, str, str]] = []  # (-count, end side, target, source)
    da, db = prev_svc.domain, svc.domain
    for key, n in pack.stats.get("transfers", {}).items():
        left, right = key.split(">")
        (dom_a, slot_a), (dom_b, slot_b) = left.split(".", 1), right.split(".", 1)
        if (dom_a == da and dom_b == db and slot_b in inputs and slot_a in results and n >= 2
                and not svc.is_categorical(slot_b)
                and _compatible(_vkind(pack, prev_svc.name, slot_a), _vkind(pack, svc.name, slot_b))):
            cands.append((-n, slot_b not in starts, slot_b, slot_a))
    if not cands:
        # no mined transfer: same names, else one city-like input takes the previous city (where one goes)
        for s in inputs:
            if s in results and not svc.is_categorical(s) and _vkind(pack, svc.name, s) == _vkind(pack, prev_svc.name, s):
                cands.append((0, 0, s, s))
        cities = [r for r in sorted(results) if _vkind(pack, prev_svc.name, r) == "city"]
        targets = sorted((not any(w in s for w in _TOWARDS), s) for s in inputs
                         if _vkind(pack, svc.name, s) == "city" and s not in results)
        if cities and targets:
            cands.append((1, 1, targets[0][1], cities[0]))
    link: dict[str, str] = {}
    for _, _, target, source in sorted(cands):
        if target not in link and source not in link.values():
            link[target] = source
    return link


_TOWARDS = ("to", "destination", "where")
_SPOTS = frozenset(("address", "place"))


def _compatible(source: str, target: str) -> bool:
    """Whether a value of one kind can fill a slot of another (a cab goes to a venue or to an address)."""
    return source == target or (source in _SPOTS and target in _SPOTS)


def _vkind(pack: Pack, service: str, slot: str) -> str:
    """The kind of a slot, judged by its values too (a "location" of stations is a place)."""
    kinds = pack.derive(_Facts).kinds
    kind = kinds.get((service, slot))
    if kind is None:
        kind = kinds[(service, slot)] = value_kind(pack.service(service).slots[slot], pack.value_pool(service, slot))
    return kind


def _pairs(pack: Pack, svc: ServiceSchema) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    sf = pack.derive(_Facts)[svc.name]
    return sf.places, sf.dates


# The functions of a draw keep comprehensions that read their locals off the common path: such a local
# becomes a cell, made on every call whether or not the comprehension runs (see _other, _requested, _fix_pairs).

def _value(sf: _ServiceFacts, slot: str, rng: random.Random, avoid: str | None = None,
           fold: bool = False) -> str | None:
    """A random value of the slot's pool, other than ``avoid`` (compared case-insensitively with ``fold``)."""
    pool = sf.pool(slot)
    if not pool:
        return None
    if avoid is None:
        return rng.choice(pool)  # the draw randrange(len(pool)) makes
    avoid_key = avoid.lower() if fold else avoid
    for _ in range(8):
        v = rng.choice(pool)
        if (v.lower() if fold else v) != avoid_key:
            return v
    return _other(pool, avoid_key, fold, rng)


def _other(pool: list[str], avoid_key: str, fold: bool, rng: random.Random) -> str | None:
    rest = [v for v in pool if (v.lower() if fold else v) != avoid_key]
    return rng.choice(rest) if rest else None


def _requested(it: _IntentFacts, rng: random.Random, taken: set[str]) -> list[str]:
    """Result slots to ask about: each with its mined request rate (unmined intents: zero to two at random)."""
    if it.rates is not None:
        out = []
        for s, p in it.rates:
            if s not in taken and rng.random() < p:
                out.append(s)
        return out[:3]
    options = [s for s in it.intent.result_slots if s not in taken]
    rng.shuffle(options)
    return sorted(options[: rng.choice((0, 1, 1, 2))])


class _Draw:
    """One goal being drawn: its random stream, its share of infeasible searches, and what the subgoals drawn
    so far pass on to the next one."""

    __slots__ = ("rng", "infeasible_share", "known", "sure", "state")

    def __init__(self, rng: random.Random, infeasible_share: float) -> None:
        self.rng = rng
        self.infeasible_share = infeasible_share
        self.known: dict[str, str] = {}  # the previous subgoal's likely result values, for carried-over slots
        # those of them the user stated (the others come from a row the world may not offer)
        self.sure: set[str] = set()
        self.state: dict[str, str] = {}  # what the user has said to the current service so far

    def pass_on(self, last: dict[str, Any]) -> None:
        """Take in the subgoal just drawn: what the next one may carry over, and what the user has now said."""
        known, link = self.known, last["from_previous"]
        linked = {s: known[ps] for s, ps in link.items() if ps in known}
        self.sure = set(last["constraints"]) | {s for s, ps in link.items() if ps in self.sure}
        # a booking's likely values include those of the entity the search before it found
        self.known = {**(last["entity"] or (known if link else {})), **last["constraints"], **linked}
        self.state.update(linked)
        self.state.update(last["constraints"])


def _search_subgoal(draw: _Draw, sf: _ServiceFacts, it: _IntentFacts, link: dict[str, str],
                    ahead: list[int]) -> dict[str, Any]:
    """A search subgoal: the constraints of one entity that fits what is carried over and what was said to the
    service before, made infeasible now and then, with the relaxations to fall back on."""
    inherited = _inherited(it, link, draw.state) if draw.state else {}
    entity, link = _search_entity(draw, it, link, inherited, ahead)
    constraints, optional = _search_constraints(draw.rng, sf, it, entity, link, inherited)
    undo = _make_infeasible(draw, sf, it, link, constraints, optional)
    relax = [undo] if undo is not None else []
    table = it.table
    # a value carried over from the previous subgoal may not exist here: fall back to this entity's value
    for slot in sorted(link):
        if table is not None and slot in table.columns and slot not in it.echo and entity.get(slot):
            relax.append([slot, entity[slot]])
    taken = {*constraints, *optional, *link}
    if draw.state and table is not None:
        relax[:0] = _loose_filters(sf, it, entity, taken)
    return {"service": sf.name, "intent": it.intent.name, "constraints": constraints, "optional": optional,
            "requested": _requested(it, draw.rng, taken), "relax": relax, "feasible": undo is None,
            "from_previous": link, "entity": entity or None}


def _inherited(it: _IntentFacts, link: dict[str, str], state: dict[str, str]) -> dict[str, str]:
    """The values said earlier to this service that stay in the dialogue state and filter this search too."""
    table, echo, intent = it.table, it.echo, it.intent
    if table is None:
        return {}
    return {s: v for s, v in state.items() if s not in link and v not in ANY_VALUES and s in table.columns
            and s not in echo and (s in intent.optional_slots or s in intent.required_slots)}


def _search_entity(draw: _Draw, it: _IntentFacts, link: dict[str, str], inherited: dict[str, str],
                   ahead: list[int]) -> tuple[dict[str, str], dict[str, str]]:
    """The entity the constraints come from ({} for a table without rows), and the link without the slots it
    cannot carry over: a row with the carried-over and inherited values when one has them, one the next
    search can find (``ahead``) when possible."""
    rng, table, rows = draw.rng, it.table, it.rows
    entity = (rows[rng.choice(ahead)] if ahead else rng.choice(rows)) if rows else {}
    if table is None or not (link or inherited):
        return entity, link
    carried, link = _carried(draw, it, link)
    hits = table.match({**carried, **inherited}) if inherited else []
    if not hits and carried:
        hits = table.match(carried)
    if hits and ahead:
        # also fit the next search when possible (a bus to the event's city, then a hotel there)
        fits = ahead if len(ahead) < 64 else set(ahead)
        hits = [h for h in hits if h in fits] or hits
    if hits:
        entity = rows[rng.choice(hits)]
    return entity, link


def _carried(draw: _Draw, it: _IntentFacts, link: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The carried-over values (the previous city...) that some entity of this table has together, and the link
    without the others: a value no entity here has, or one only predicted that filters this table (the
    previous search may offer another entity), is not carried over; the user states one of this table."""
    table, echo, known, sure = it.table, it.echo, draw.known, draw.sure
    carried: dict[str, str] = {}
    for slot in sorted(link):
        value = known.get(link[slot])
        if slot in echo or slot not in table.columns:
            continue
        if value is not None and link[slot] in sure and table.match({**carried, slot: value}):
            carried[slot] = value
        else:
            link = {k: v for k, v in link.items() if k != slot}
    return carried, link


def _search_constraints(rng: random.Random, sf: _ServiceFacts, it: _IntentFacts, entity: dict[str, str],
                        link: dict[str, str], inherited: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The values the user states (constraints) and those it gives only when asked (optional), from the entity:
    changed inherited values, the required slots and some optional ones (a value the default would exclude
    is always stated)."""
    echo = it.echo
    constraints: dict[str, str] = {}
    for slot, value in inherited.items():
        if entity.get(slot) and entity[slot].lower() != value.lower():
            constraints[slot] = entity[slot]  # the user changes what no longer fits
    optional: dict[str, str] = {}
    for slot in it.required:
        if slot in link:
            continue
        v = entity.get(slot) if slot not in echo else None
        v = v or _value(sf, slot, rng)
        if v:
            constraints[slot] = v
    for slot, default in it.optional_items:
        if slot in link:
            continue
        v = entity.get(slot) if slot not in echo else _value(sf, slot, rng)
        if not v:
            continue
        if slot not in echo and default not in ANY_VALUES and v != default:
            constraints[slot] = v  # the default would exclude the entity, so the user must say it
        elif rng.random() < 0.3:
            constraints[slot] = v
        elif rng.random() < 0.25:
            optional[slot] = v
    return constraints, optional


def _make_infeasible(draw: _Draw, sf: _ServiceFacts, it: _IntentFacts, link: dict[str, str],
                     constraints: dict[str, str], optional: dict[str, str]) -> list[str] | None:
    """Now and then (``infeasible_share``), change one constraint to a value no entity has together with the
    others; returns the relaxation that changes it back, None when the search stays feasible."""
    rng, table = draw.rng, it.table
    if table is None or not it.rows or rng.random() >= draw.infeasible_share:
        return None
    known, optional_slots = draw.known, it.intent.optional_slots
    linked = {s: known[p] for s, p in link.items() if p in known}
    cands = [s for s in sorted(constraints) if s not in it.echo and s in table.columns]
    rng.shuffle(cands)
    for slot in cands:
        stated = constraints[slot]
        alts = [v for v in sf.pack.value_pool(sf.name, slot) if v not in ANY_VALUES and v != stated]
        rng.shuffle(alts)
        for alt in alts[:12]:
            # nothing may match whether or not the user is asked for their optional values
            bare = dict(optional_slots, **constraints)
            bare[slot] = alt
            if not _pairs_ok(sf, {**linked, **optional, **bare}):
                continue  # not a trip from Los Angeles to Los Angeles
            if not table.match(bare) and not table.match(dict(bare, **optional)):
                constraints[slot] = alt
                return [slot, stated]
    return None


def _loose_filters(sf: _ServiceFacts, it: _IntentFacts, entity: dict[str, str], taken: set[str]) -> list[list[str]]:
    """After an earlier search of this service the state may hold what the user took from an offer (the one-way
    flight's airline): the relaxations that drop such filters first when a round trip finds nothing."""
    svc, table, echo = sf.svc, it.table, it.echo
    return [[s, entity[s] if svc.is_categorical(s) else "dontcare"]
            for s, d in sorted(it.intent.optional_slots.items())
            if d in ANY_VALUES and s in table.columns and s not in echo and s not in taken
            and (entity.get(s) or not svc.is_categorical(s))]


def _ahead(sf: _ServiceFacts, it: _IntentFacts, nxt: tuple[_ServiceFacts, _IntentFacts] | None,
           link: dict[str, str]) -> list[int]:
    """Rows of a search whose values the next search can find: the next search of the same service filters
    on what was said (one way, then round trip), another service's on the values carried over (an event's
    city, then a hotel there). Empty when no row or nothing to look ahead for."""
    if nxt is None or nxt[1].intent.is_transactional:
        return []
    key = (nxt[0].name, nxt[1].intent.name, *sorted(link.items()))
    got = it.ahead.get(key)
    if got is None:
        first, second = it.table, nxt[1].table
        out: list[int] = []
        if first is not None and second is not None:
            then = nxt[1].intent
            if nxt[0].name == sf.name:
                pairs = [(s, s) for s in list(then.required_slots) + list(then.optional_slots)]
            else:
                pairs = [(src, dst) for dst, src in sorted(link.items())]
            pairs = [(a, b) for a, b in pairs if a in first.columns and b in second.columns
                     and a not in first.echo and b not in second.echo]
            if pairs:
                out = [n for n, row in enumerate(first.rows) if second.match({b: row[a] for a, b in pairs if a in row})]
        got = it.ahead[key] = out
    return got


def _txn_subgoal(draw: _Draw, sf: _ServiceFacts, it: _IntentFacts, link: dict[str, str]) -> dict[str, Any]:
    """A transaction subgoal: the values to book (a stand-alone booking's identity from one real entity), with
    one relaxation to fall back on should the booking fail."""
    rng = draw.rng
    entity: dict[str, str] = {}
    fitting, echo = it.fitting, it.txn_echo
    if fitting and not any(s.endswith(("name", "title")) for s in link):
        entity = rng.choice(fitting)  # the entity to book, unless the previous subgoal names it
    constraints: dict[str, str] = {}
    optional: dict[str, str] = {}
    for slot in it.required:
        if slot in link:
            # carried over; a concrete value of its own (the likely one) for when the user cannot carry it
            v = draw.known.get(link[slot]) or _value(sf, slot, rng)
            if v:
                optional[slot] = v
            continue
        v = entity.get(slot) if slot not in echo else None
        v = v or _value(sf, slot, rng)
        if v:
            constraints[slot] = v
    for slot, default in it.optional_items:
        if slot in link:
            continue
        v = (entity.get(slot) if slot not in echo else None) or _value(sf, slot, rng)
        if not v:
            continue
        if rng.random() < 0.3:
            constraints[slot] = v
        elif rng.random() < 0.2:
            optional[slot] = v
    relax = []
    changeable = [s for s in sorted(constraints) if s not in entity or s in echo]
    if changeable:
        slot = rng.choice(changeable)
        alt = _value(sf, slot, rng, avoid=constraints[slot])
        if alt:
            relax.append([slot, alt])
    taken = {*constraints, *optional, *link}
    return {"service": sf.name, "intent": it.intent.name, "constraints": constraints, "optional": optional,
            "requested": _requested(it, rng, taken), "relax": relax, "feasible": True,
            "from_previous": link, "entity": None}


def _pairs_ok(sf: _ServiceFacts, values: dict[str, str]) -> bool:
    """Whether the paired slots among ``values`` are sensible (distinct ends, ordered dates)."""
    places, dates = sf.places, sf.dates
    for a, b in places:
        va, vb = values.get(a), values.get(b)
        if va and vb and va not in ANY_VALUES and va.lower() == vb.lower():
            return False
    for a, b in dates:
        va, vb = values.get(a), values.get(b)
        if is_date(va) and is_date(vb) and va >= vb:
            return False
    return True


def _fix_pairs(sf: _ServiceFacts, it: _IntentFacts, sg: dict[str, Any], known: dict[str, str],
               rng: random.Random) -> None:
    """Paired slots stay sensible as first stated and after every relaxation: a trip's two ends differ,
    an end date follows its start date (values carried over from the previous subgoal count as stated).

    Only values the user states freely move: a filtering column of a search keeps its entity's value.
    """
    places, dates = sf.places, sf.dates
    c, opt, link = sg["constraints"], sg["optional"], sg["from_previous"]
    table = None if it.intent.is_transactional else it.table
    eff = {s: known[ps] for s, ps in link.items() if ps in known}
    eff.update(opt)
    eff.update(c)

    def free(slot: str) -> bool:
        return slot not in link and (table is None or slot in table.echo or slot not in table.columns)

    def settle(values: dict[str, str], movable: Any) -> dict[str, str]:
        changed: dict[str, str] = {}
        for a, b in places:
            va, vb = values.get(a), values.get(b)
            if va and vb and va.lower() == vb.lower() and va not in ANY_VALUES:
                for slot, other in ((b, va), (a, vb)):
                    alt = _value(sf, slot, rng, avoid=other, fold=True) if movable(slot) else None
                    if alt:
                        values[slot] = changed[slot] = alt
                        break
        for a, b in dates:
            before = (values.get(a), values.get(b))
            order_dates(values, a, b, rng, fixed=[s for s in (a, b) if not movable(s)])
            for slot, old in zip((a, b), before):
                if values.get(slot) != old:
                    changed[slot] = values[slot]
        return changed

    for slot, value in settle(eff, free).items():
        (opt if slot in opt and slot not in c else c)[slot] = value
    for entry in sg["relax"]:
        slot = entry[0]
        eff[slot] = entry[1]
        if entry[1] not in ANY_VALUES:
            # a relaxation that would break a pair changes the relaxed value, never what was stated
            settle(eff, lambda s, slot=slot: s == slot)
            entry[1] = eff[slot]


def sample_goal(pack: Pack, rng: random.Random, services: list[str] | None = None, *,
                sequence: list[str] | None = None, infeasible_share: float = 0.03,
                multi_share: float | None = None) -> dict[str, Any]:
    """A goal (see the module docstring) drawn from ``services`` (default: the pack's mined services).

    ``sequence`` fixes the services and their order instead of drawing them.
    """
    facts = pack.derive(_Facts)
    if sequence:
        order = [pack.service(s).name for s in sequence]
    else:
        key = tuple(services) if services else None
        drawn = facts.pools.get(key)
        if drawn is None:
            pool = sorted(services) if services else sorted(pack.mined_services) or pack.services
            for s in pool:
                pack.service(s)  # an unknown service is a UserError
            drawn = facts.pools[key] = (pool, _service_weights(pack, pool))
        share = pack.stats.get("multi_service_share", 0.3) if multi_share is None else multi_share
        order = _services_for(rng, *drawn, share)
    steps = [(facts[name], it) for name in order for it in _chain(facts[name], rng)]
    links = [_link(*steps[k - 1], *steps[k]) if k else {} for k in range(len(steps))]
    subgoals: list[dict[str, Any]] = []
    draw = _Draw(rng, infeasible_share)
    for k, (sf, it) in enumerate(steps):
        if k and steps[k - 1][0] is not sf:
            draw.state = {}
        if it.intent.is_transactional:
            subgoals.append(_txn_subgoal(draw, sf, it, links[k]))
        else:
            subgoals.append(_search_subgoal(draw, sf, it, links[k], _look_ahead(steps, links, k)))
        last = subgoals[-1]
        if sf.places or sf.dates:  # most services pair no slots
            _fix_pairs(sf, it, last, draw.known, rng)
        if k + 1 == len(steps):
            break  # the last subgoal passes nothing on
        draw.pass_on(last)
    return {"services": order, "subgoals": subgoals}


def _look_ahead(steps: list[tuple[_ServiceFacts, _IntentFacts]], links: list[dict[str, str]], k: int) -> list[int]:
    """The rows of search ``k`` that the next search can find (see _ahead), or failing that, the search after a
    booking of the same service."""
    sf, it = steps[k]
    nxt = steps[k + 1] if k + 1 < len(steps) else None
    ahead = _ahead(sf, it, nxt, links[k + 1] if nxt else {})
    if not ahead and nxt is not None and nxt[0] is sf and k + 2 < len(steps) and steps[k + 2][0] is not sf:
        # search, book, then another service: the booking passes this entity's values on (a hotel
        # found and booked in a city, then a restaurant there)
        via = {dst: links[k + 1][src] for dst, src in links[k + 2].items() if src in links[k + 1]}
        if via:
            ahead = _ahead(sf, it, steps[k + 2], via)
    return ahead
