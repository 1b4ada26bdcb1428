"""Sampling user goals over a pack: single intents, search-then-transaction chains, multi-service dialogues.

A goal is JSON-able::

    {"services": [service, ...],            # in dialogue order
     "subgoals": [{
        "service": str, "intent": str,
        "constraints": {slot: canonical},   # what the user states (required slots and optional ones they care about)
        "optional": {slot: canonical},      # optional-slot values the user gives only when asked (else the default)
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
from .schema import IntentSchema, ServiceSchema
from .values import _kind
from .world import _tables_of

_ANY = ("dontcare", "")


def _memo(pack: Pack) -> dict[Any, Any]:
    """Per-pack cache of everything a draw derives from the pack alone (weights, links, pools)."""
    memo = pack.__dict__.get("_goal_memo")
    if memo is None:
        memo = pack.__dict__["_goal_memo"] = {}
    return memo


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
    key = ("services", tuple(pool))
    memo = _memo(pack)
    if key not in memo:
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
        memo[key] = (pairs, _weights(dpairs), by_domain, single)
    return memo[key]


def _services_for(pack: Pack, rng: random.Random, pool: list[str], multi_share: float) -> list[str]:
    pairs, dpairs, by_domain, single = _service_weights(pack, pool)
    if rng.random() < multi_share and len(pool) > 1:
        if pairs:
            return _pick(rng, pairs).split("|")
        if dpairs:
            return [rng.choice(by_domain[d]) for d in _pick(rng, dpairs).split("|")]
        return rng.sample(sorted(pool), 2)
    return [_pick(rng, single)]


def _chain(pack: Pack, svc: ServiceSchema, rng: random.Random) -> list[IntentSchema]:
    key = ("chain", svc.name)
    memo = _memo(pack)
    if key not in memo:
        memo[key] = _weights({k: float(n) for k, n in pack.stats.get("services", {}).get(svc.name, {}).get(
            "chains", {}).items() if k and all(i in svc.intents for i in k.split(">")) and len(k.split(">")) <= 2
            and len(set(k.split(">"))) == len(k.split(">"))})
    chains = memo[key]
    if chains:
        return [svc.intents[i] for i in _pick(rng, chains).split(">")]
    search, txn = svc.search_intents, svc.transactional_intents
    r = rng.random()
    if search and txn and r < 0.5:
        s = rng.choice(search)
        linked = [t for t in txn if set(t.required_slots) & set(s.result_slots)] or txn
        return [s, rng.choice(linked)]
    if search and (r < 0.8 or not txn):
        return [rng.choice(search)]
    return [rng.choice(txn or search)]


def _link(pack: Pack, prev_svc: ServiceSchema, prev_intent: IntentSchema, svc: ServiceSchema,
          intent: IntentSchema) -> dict[str, str]:
    """from_previous across subgoals (a fresh dict; computed once per pair of intents)."""
    key = ("link", prev_svc.name, prev_intent.name, svc.name, intent.name)
    memo = _memo(pack)
    if key not in memo:
        memo[key] = _compute_link(pack, prev_svc, prev_intent, svc, intent)
    return dict(memo[key])


def _compute_link(pack: Pack, prev_svc: ServiceSchema, prev_intent: IntentSchema, svc: ServiceSchema,
                  intent: IntentSchema) -> dict[str, str]:
    """Same-service chains share slot names; across services use mined transfers, else same names or cities."""
    inputs = list(intent.required_slots) + list(intent.optional_slots)
    results = set(prev_intent.result_slots) | set(prev_intent.required_slots) | set(prev_intent.optional_slots)
    if prev_svc.name == svc.name:
        # a booking takes everything over; a second search (one-way, then round trip) only what it needs
        keep = inputs if intent.is_transactional else intent.required_slots
        return {s: s for s in keep if s in results}
    link: dict[str, str] = {}
    best: dict[str, int] = {}
    da, db = prev_svc.domain, svc.domain
    for key, n in pack.stats.get("transfers", {}).items():
        left, right = key.split(">")
        (dom_a, slot_a), (dom_b, slot_b) = left.split(".", 1), right.split(".", 1)
        if (dom_a == da and dom_b == db and slot_b in inputs and slot_a in results and n >= 2
                and n > best.get(slot_b, 0) and not svc.is_categorical(slot_b)):
            best[slot_b] = n
            link[slot_b] = slot_a
    if link:
        return link
    for s in inputs:
        if s in results and not svc.is_categorical(s):
            link[s] = s
        elif _kind(svc.slots[s]) == "city":
            cand = [r for r in sorted(results) if _kind(prev_svc.slots[r]) == "city"]
            if cand:
                link[s] = cand[0]
    return link


def _value(pack: Pack, service: str, slot: str, rng: random.Random, avoid: str | None = None) -> str | None:
    key = ("pool", service, slot)
    memo = _memo(pack)
    pool = memo.get(key)
    if pool is None:
        pool = memo[key] = [v for v in pack.value_pool(service, slot) if v not in _ANY]
    if not pool or (avoid is not None and pool == [avoid]):
        return None
    while True:
        v = pool[rng.randrange(len(pool))]
        if v != avoid:
            return v


def _requested(pack: Pack, svc: ServiceSchema, intent: IntentSchema, rng: random.Random, taken: set[str]) -> list[str]:
    """Result slots to ask about: each with its mined request rate (unmined intents: zero to two at random)."""
    key = ("requested", svc.name, intent.name)
    memo = _memo(pack)
    rates = memo.get(key)
    if rates is None:
        st = pack.stats.get("services", {}).get(svc.name, {})
        n_intent = st.get("intents", {}).get(intent.name, 0)
        counts = st.get("requested", {}).get(intent.name, {})
        rates = memo[key] = [(s, min(0.9, counts.get(s, 0) / n_intent)) for s in intent.result_slots
                             if counts.get(s)] if n_intent else None
    if rates is not None:
        return [s for s, p in rates if s not in taken and rng.random() < p][:3]
    options = [s for s in intent.result_slots if s not in taken]
    rng.shuffle(options)
    return sorted(options[: rng.choice((0, 1, 1, 2))])


def _search_subgoal(pack: Pack, svc: ServiceSchema, intent: IntentSchema, rng: random.Random,
                    link: dict[str, str], infeasible_share: float, known: dict[str, str]) -> dict[str, Any]:
    table = _tables_of(pack).get((svc.name, intent.name))
    rows = pack.entities(svc.name, intent.name)
    echo = table.echo if table is not None else frozenset()
    entity = rng.choice(rows) if rows else {}
    if table is not None and link:
        # keep the carried-over values (the previous city...) that some entity has, and pick such an entity;
        # a value no entity here has is not carried over: the user states one of this table instead
        carried: dict[str, str] = {}
        for slot in sorted(link):
            value = known.get(link[slot])
            if slot in echo or slot not in table.columns or value is None:
                continue
            if table.match({**carried, slot: value}):
                carried[slot] = value
            else:
                link = {k: v for k, v in link.items() if k != slot}
        if carried:
            hits = table.match(carried)
            entity = rows[hits[rng.randrange(len(hits))]]
    constraints: dict[str, str] = {}
    optional: dict[str, str] = {}
    for slot in intent.required_slots:
        if slot in link:
            continue
        v = entity.get(slot) if slot not in echo else None
        v = v or _value(pack, svc.name, slot, rng)
        if v:
            constraints[slot] = v
    for slot, default in sorted(intent.optional_slots.items()):
        if slot in link:
            continue
        v = entity.get(slot) if slot not in echo else _value(pack, svc.name, slot, rng)
        if not v:
            continue
        if slot not in echo and default not in _ANY and v != default:
            constraints[slot] = v  # the default would exclude the entity, so the user must say it
        elif rng.random() < 0.3:
            constraints[slot] = v
        elif rng.random() < 0.25:
            optional[slot] = v
    feasible, relax = True, []
    if table is not None and rows and rng.random() < infeasible_share:
        cands = [s for s in sorted(constraints) if s not in echo and s in table.columns]
        rng.shuffle(cands)
        for slot in cands:
            alts = [v for v in pack.value_pool(svc.name, slot) if v not in _ANY and v != constraints[slot]]
            rng.shuffle(alts)
            for alt in alts[:12]:
                # nothing may match whether or not the user is asked for their optional values
                bare = dict(intent.optional_slots, **constraints)
                bare[slot] = alt
                if not table.match(bare) and not table.match(dict(bare, **optional)):
                    relax.append([slot, constraints[slot]])
                    constraints[slot] = alt
                    feasible = False
                    break
            if not feasible:
                break
    # a value carried over from the previous subgoal may not exist here: fall back to this entity's value
    for slot in sorted(link):
        if table is not None and slot in table.columns and slot not in echo and entity.get(slot):
            relax.append([slot, entity[slot]])
    taken = set(constraints) | set(optional) | set(link)
    return {"service": svc.name, "intent": intent.name, "constraints": constraints, "optional": optional,
            "requested": _requested(pack, svc, intent, rng, taken), "relax": relax, "feasible": feasible,
            "from_previous": link, "entity": entity or None}


def _txn_subgoal(pack: Pack, svc: ServiceSchema, intent: IntentSchema, rng: random.Random,
                 link: dict[str, str]) -> dict[str, Any]:
    # a stand-alone booking names a real entity, so its identity columns come from one row
    entity: dict[str, str] = {}
    memo = _memo(pack)
    key = ("txn", svc.name, intent.name)
    if key not in memo:
        inputs = set(intent.required_slots) | set(intent.optional_slots)
        tables = [t for (s, _), t in _tables_of(pack).items() if s == svc.name]
        memo[key] = ([r for r in pack.entities(svc.name) if inputs & set(r)],
                     frozenset().union(*(t.echo for t in tables)) if tables else frozenset())
    fitting, echo = memo[key]
    if fitting and not any(s.endswith("name") or s.endswith("title") for s in link):
        entity = rng.choice(fitting)  # the entity to book, unless the previous subgoal names it
    constraints: dict[str, str] = {}
    optional: dict[str, str] = {}
    for slot in intent.required_slots:
        if slot in link:
            continue
        v = entity.get(slot) if slot not in echo else None
        v = v or _value(pack, svc.name, slot, rng)
        if v:
            constraints[slot] = v
    for slot, default in sorted(intent.optional_slots.items()):
        if slot in link:
            continue
        v = (entity.get(slot) if slot not in echo else None) or _value(pack, svc.name, slot, rng)
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
        alt = _value(pack, svc.name, slot, rng, avoid=constraints[slot])
        if alt:
            relax.append([slot, alt])
    taken = set(constraints) | set(optional) | set(link)
    return {"service": svc.name, "intent": intent.name, "constraints": constraints, "optional": optional,
            "requested": _requested(pack, svc, intent, rng, taken), "relax": relax, "feasible": True,
            "from_previous": link, "entity": None}


_STARTS = ("start", "pickup", "departure", "check_in", "leaving", "outbound", "from")
_ENDS = ("end", "dropoff", "return", "check_out", "inbound", "to")


def _order_dates(constraints: dict[str, str]) -> None:
    """A start date after its end date (drawn apart) is swapped: nobody returns before leaving."""
    if len(constraints) < 2:
        return
    dates = [s for s, v in constraints.items() if "date" in s and len(v) == 10 and v[4] == "-"]
    if len(dates) < 2:
        return
    starts = [s for s in dates if any(w in s for w in _STARTS)]
    ends = [s for s in dates if any(w in s for w in _ENDS) and s not in starts]
    if len(starts) == 1 and len(ends) == 1 and constraints[starts[0]] > constraints[ends[0]]:
        a, b = starts[0], ends[0]
        constraints[a], constraints[b] = constraints[b], constraints[a]


def sample_goal(pack: Pack, rng: random.Random, services: list[str] | None = None, *,
                sequence: list[str] | None = None, infeasible_share: float = 0.2,
                multi_share: float | None = None) -> dict[str, Any]:
    """A goal (see the module docstring) drawn from ``services`` (default: the pack's mined services).

    ``sequence`` fixes the services and their order instead of drawing them.
    """
    if sequence:
        order = [pack.service(s).name for s in sequence]
    else:
        memo = _memo(pack)
        key = ("pool", tuple(services) if services else None)
        pool = memo.get(key)
        if pool is None:
            pool = sorted(services) if services else sorted(pack.mined_services) or pack.services
            for s in pool:
                pack.service(s)  # an unknown service is a UserError
            memo[key] = pool
        share = pack.stats.get("multi_service_share", 0.3) if multi_share is None else multi_share
        order = _services_for(pack, rng, pool, share)
    subgoals: list[dict[str, Any]] = []
    prev: tuple[ServiceSchema, IntentSchema] | None = None
    known: dict[str, str] = {}  # the previous subgoal's likely result values, for carried-over slots
    for name in order:
        svc = pack.service(name)
        for intent in _chain(pack, svc, rng):
            link = _link(pack, prev[0], prev[1], svc, intent) if prev else {}
            if intent.is_transactional:
                subgoals.append(_txn_subgoal(pack, svc, intent, rng, link))
            else:
                subgoals.append(_search_subgoal(pack, svc, intent, rng, link, infeasible_share, known))
            prev = (svc, intent)
            last = subgoals[-1]
            _order_dates(last["constraints"])
            known = {**(last["entity"] or {}), **last["constraints"],
                     **{s: known[ps] for s, ps in last["from_previous"].items() if ps in known}}
    return {"services": order, "subgoals": subgoals}
