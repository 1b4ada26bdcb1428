"""Mining a pack's data from real SGD dialogues: entity tables, surface forms, templates, goal statistics."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any, Iterable

from .nlg import act_token, generic_token, signature
from .schema import ServiceSchema, names_intents
from .values import slot_kind

_TIMEISH = re.compile(r"^\d{1,2}:\d{2}$|^\d{4}-\d{2}-\d{2}$")
MAX_TEMPLATES = 40
MAX_VARIANTS = 6


class _A:
    """A light act view (act, slot, values) over a raw SGD action dict."""

    __slots__ = ("act", "slot", "values")

    def __init__(self, raw: dict[str, Any]):
        self.act, self.slot, self.values = raw["act"], raw.get("slot", ""), list(raw.get("values", []))


def _stem(word: str) -> str:
    return word[:-1] if word.endswith("s") else word


_WORD = re.compile(r"[a-z]{3,}")
# Words that carry no slot meaning: a generic template for any slot's value may use only these.
_FUNCTION_WORDS = frozenset("please it is it's its i i'd i'll want would like prefer make let's go with that sounds "
                            "good okay ok yes sure fine great try how about".split())


def _plain(parts: tuple) -> bool:
    return all(w in _FUNCTION_WORDS for p in parts if isinstance(p, str) for w in re.findall(r"[a-z']+", p.lower()))


def _boundary_ok(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    return not before.isalnum() and not after.isalnum()


def _overlaps(start: int, end: int, taken: list[tuple[int, int]]) -> bool:
    return any(start < e and s < end for s, e in taken)


def _find(text: str, value: str, taken: list[tuple[int, int]], spans: list[tuple[int, int]]) -> tuple[int, int] | None:
    for s, e in spans:
        if text[s:e] == value and not _overlaps(s, e, taken):
            return s, e
    for hay, needle in ((text, value), (text.lower(), value.lower())):
        start = hay.find(needle)
        while start >= 0:
            end = start + len(needle)
            if _boundary_ok(text, start, end) and not _overlaps(start, end, taken):
                return start, end
            start = hay.find(needle, start + 1)
    return None


def delexicalise(utterance: str, frame: dict[str, Any]) -> tuple[str, list] | None:
    """(signature, template parts) of a single-frame turn, or None when a value cannot be located."""
    acts = [_A(a) for a in frame.get("actions", [])]
    if not acts:
        return None
    sig, order = signature(acts)
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for sp in frame.get("slots", []):
        spans[sp["slot"]].append((sp["start"], sp["exclusive_end"]))
    holes: list[tuple[str, str]] = []
    for i in order:
        a = acts[i]
        if act_token(a.act, a.slot, a.values)[1]:
            holes.extend((a.slot, v) for v in a.values)
    taken: list[tuple[int, int]] = []
    placed: list[tuple[int, int, int]] = []
    for k in sorted(range(len(holes)), key=lambda k: -len(holes[k][1])):
        slot, value = holes[k]
        if not value.strip():
            return None
        where = _find(utterance, value, taken, spans.get(slot, []))
        if where is None:
            return None
        taken.append(where)
        placed.append((where[0], where[1], k))
    placed.sort()
    parts: list = []
    pos = 0
    for s, e, k in placed:
        if s > pos:
            parts.append(utterance[pos:s])
        parts.append(k)
        pos = e
    if pos < len(utterance):
        parts.append(utterance[pos:])
    return sig, parts


_NONWORD = re.compile(r"[^a-z0-9]+")


def _norm(text: str) -> str:
    """Lower-case words separated and surrounded by single spaces (for whole-word containment tests)."""
    return f" {_NONWORD.sub(' ', text.lower()).strip()} "


def _leaks(parts: list, values: Iterable[str]) -> bool:
    """Whether a template's literal text spells out one of the dialogue's entity values."""
    literal = _norm(" ".join(p for p in parts if isinstance(p, str)))
    return any(v in literal for v in values)


class Miner:
    """Accumulates everything a pack needs from a stream of dialogues of known services."""

    def __init__(self, services: dict[str, ServiceSchema]):
        self.services = services
        self.rows: dict[str, dict[str, set[tuple]]] = defaultdict(lambda: defaultdict(set))
        self.echo_seen: Counter = Counter()  # (svc, intent, slot) -> calls where results echoed the parameter
        self.echo_total: Counter = Counter()
        self.spoken: dict[str, dict[str, dict[str, Counter]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(Counter)))
        self.global_spoken: dict[str, Counter] = defaultdict(Counter)
        self.params: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
        self.outputs: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
        self.templates: dict[str, dict[str, dict[str, Counter]]] = {
            sp: defaultdict(lambda: defaultdict(Counter)) for sp in ("USER", "SYSTEM")}
        self.generic: dict[str, dict[str, dict[tuple, set]]] = {
            sp: defaultdict(lambda: defaultdict(set)) for sp in ("USER", "SYSTEM")}
        self.by_slot: dict[str, dict[str, dict[str, Counter]]] = {
            sp: defaultdict(lambda: defaultdict(Counter)) for sp in ("USER", "SYSTEM")}
        self._vocab: dict[str, frozenset[str]] = {}
        self.words: dict[str, Counter] = defaultdict(Counter)  # stemmed word -> domain -> turns using it
        self.dialogues = 0
        self.turns = 0
        self.delex_ok = 0
        self.stat = _Stats()

    def add(self, dialogue: dict[str, Any], where: str) -> None:
        """Mine one dialogue; frames of services missing from the schemas are skipped (counted as unknown)."""
        self.dialogues += 1
        named = self._named_values(dialogue)
        for turn in dialogue.get("turns", []):
            self.turns += 1
            speaker = turn.get("speaker")
            frames = turn.get("frames", [])
            if frames and frames[0].get("service") in self.services:
                domain = frames[0]["service"].rsplit("_", 1)[0]
                for w in set(_WORD.findall(turn.get("utterance", "").lower())):
                    self.words[_stem(w)][domain] += 1
            for frame in frames:
                svc = frame.get("service")
                if svc not in self.services:
                    continue
                slots = self.services[svc].slots
                for a in frame.get("actions", []):
                    vals, canon = a.get("values", []), a.get("canonical_values", [])
                    if a.get("slot") and not names_intents(a["act"], a["slot"], slots) and len(vals) == len(canon):
                        for v, c in zip(vals, canon):
                            self.spoken[svc][a["slot"]][c][v] += 1
                            if _TIMEISH.match(c):
                                self.global_spoken[c][v] += 1
                if "service_call" in frame:
                    self._call(svc, frame["service_call"], frame.get("service_results", []))
            if len(frames) == 1 and speaker in ("USER", "SYSTEM") and frames[0].get("service") in self.services:
                got = delexicalise(turn.get("utterance", ""), frames[0])
                if (got is not None and any(isinstance(p, int) or any(c.isalpha() for c in p) for p in got[1])
                        and not _leaks(got[1], named.get(frames[0]["service"], ()))):
                    self.delex_ok += 1
                    sig, parts = got
                    svc = frames[0]["service"]
                    self.templates[speaker][svc][sig][tuple(parts)] += 1
                    acts = frames[0]["actions"]
                    if len(acts) == 1:
                        slot = acts[0].get("slot", "")
                        spec = self.services[svc].slots.get(slot)
                        self.generic[speaker][generic_token(_A(acts[0]))][tuple(parts)].add(
                            (svc.rsplit("_", 1)[0], slot_kind(spec) if spec else slot))
                        if slot:
                            self.by_slot[speaker][sig][svc][tuple(parts)] += 1
        self._state_forms(dialogue)
        self.stat.add(dialogue, self.services)

    def _named_values(self, dialogue: dict[str, Any]) -> dict[str, set[str]]:
        """Per service, the non-categorical values a dialogue mentions anywhere (acts, states, results),
        normalised for word matching: a template that still spells one out (a car model the annotators left
        unmarked) would say it in every dialogue that uses it."""
        out: dict[str, set[str]] = defaultdict(set)
        for turn in dialogue.get("turns", []):
            for fr in turn.get("frames", []):
                svc = self.services.get(fr.get("service"))
                if svc is None:
                    continue
                found = out[svc.name]
                values: list[tuple[str, str]] = []
                for a in fr.get("actions", []):
                    values.extend((a.get("slot", ""), v) for v in a.get("values", []) + a.get("canonical_values", []))
                for slot, vals in (fr.get("state") or {}).get("slot_values", {}).items():
                    values.extend((slot, v) for v in vals)
                for row in fr.get("service_results", []):
                    values.extend(row.items())
                for slot, v in values:
                    if slot in svc.slots and not svc.is_categorical(slot) and len(v) >= 3 and any(c.isalpha() for c in v):
                        norm = _norm(v)
                        if norm.strip() and norm.strip() not in ("dontcare", "true", "false"):
                            found.add(norm)
        return out

    def _state_forms(self, dialogue: dict[str, Any]) -> None:
        """Surface forms only seen in dialogue states: a state lists every variant of a value, so a variant
        next to one whose canonical the acts gave (in this dialogue) is a variant of that canonical too."""
        canon: dict[tuple[str, str, str], str] = {}
        for turn in dialogue.get("turns", []):
            for frame in turn.get("frames", []):
                svc = self.services.get(frame.get("service"))
                if svc is None:
                    continue
                for a in frame.get("actions", []):
                    vals, cans = a.get("values", []), a.get("canonical_values", [])
                    if a.get("slot") and not names_intents(a["act"], a["slot"], svc.slots) and len(vals) == len(cans):
                        for v, c in zip(vals, cans):
                            canon[(frame.get("service", ""), a["slot"], v)] = c
        for turn in dialogue.get("turns", []):
            for frame in turn.get("frames", []):
                svc = frame.get("service")
                state = frame.get("state")
                if not state or svc not in self.services:
                    continue
                for slot, variants in state.get("slot_values", {}).items():
                    found = [canon[(svc, slot, v)] for v in variants if (svc, slot, v) in canon]
                    if len(set(found)) != 1:
                        continue  # no canonical, or an ambiguous one
                    forms = self.spoken[svc][slot][found[0]]
                    for v in variants:
                        if v not in forms:
                            forms[v] += 1

    def _transferable(self, svc: str, parts: tuple) -> bool:
        """Whether a template avoids its domain's own words, so it may speak for another service.

        A word belongs to a domain when the schema names it (domain, service description, intents) or
        when most real turns using it are of that domain ("forecast", "food", "cab").
        """
        domain = svc.rsplit("_", 1)[0]
        vocab = self._vocab.get(svc)
        if vocab is None:
            schema = self.services[svc]
            text = " ".join([schema.domain, schema.description] + [re.sub(r"(?<!^)(?=[A-Z])", " ", i) for i in schema.intents])
            vocab = self._vocab[svc] = frozenset(_stem(w) for w in _WORD.findall(text.lower()))
        for p in parts:
            if isinstance(p, str):
                for w in _WORD.findall(p.lower()):
                    w = _stem(w)
                    if w in vocab:
                        return False
                    by = self.words.get(w)
                    if by and by[domain] >= 0.6 * sum(by.values()):
                        return False
        return True

    def by_slot_out(self, speaker: str) -> dict[str, dict[str, list[list]]]:
        """Single-act templates free of domain words: token (slot included) -> source service -> templates."""
        out: dict[str, dict[str, list[list]]] = {}
        for tok, by in sorted(self.by_slot[speaker].items()):
            for svc, c in sorted(by.items()):
                keep = [list(t) for t, _ in c.most_common() if "_INTENT(" in tok or self._transferable(svc, t)]
                if keep:
                    out.setdefault(tok, {})[svc] = keep[: MAX_TEMPLATES // 2]
        return out

    def _call(self, svc: str, call: dict[str, Any], results: list[dict[str, str]]) -> None:
        method = call.get("method", "")
        intent = self.services[svc].intents.get(method)
        params = call.get("parameters", {})
        for k, v in params.items():
            self.params[svc][k][v] += 1
        if intent is not None and intent.is_transactional:
            for row in results:  # what bookings return (a transfer's days, a ride's fare): value pools
                for k, v in row.items():
                    if k in intent.result_slots and k not in params:
                        self.outputs[svc][k][v] += 1
        if intent is None or intent.is_transactional:
            return
        for row in results:
            self.rows[svc][method].add(tuple(sorted(row.items())))
        for k, v in params.items():
            if results and all(k in row for row in results) and v != "dontcare":
                self.echo_total[(svc, method, k)] += 1
                if all(row[k] == v for row in results):
                    self.echo_seen[(svc, method, k)] += 1

    def echo_slots(self, svc: str, method: str) -> list[str]:
        """Input slots a search only echoes back (party sizes, dates): the world copies them, never filters."""
        intent = self.services[svc].intents[method]
        out = []
        rows = [dict(r) for r in self.rows[svc][method]]
        for slot in list(intent.required_slots) + list(intent.optional_slots):
            total = self.echo_total[(svc, method, slot)]
            if not total or slot not in intent.result_slots or self.echo_seen[(svc, method, slot)] < total:
                continue
            # an entity seen with several values of the slot means the slot is a query echo, not an attribute
            variants: dict[tuple, set[str]] = defaultdict(set)
            for r in rows:
                variants[tuple(sorted((k, v) for k, v in r.items() if k != slot))].add(r.get(slot, ""))
            varied = any(len(v) > 1 for v in variants.values())
            kind_echo = any(w in slot for w in ("date", "number", "passengers", "travelers", "seats", "tickets",
                                                "rooms", "riders", "bags", "class"))
            if varied or kind_echo:
                out.append(slot)
        return out

    def templates_out(self, speaker: str) -> dict[str, dict[str, list[list]]]:
        """The template bank of one speaker: service -> signature -> templates, most frequent first."""
        return {svc: {sig: [list(t) for t, _ in c.most_common(MAX_TEMPLATES)] for sig, c in sorted(sigs.items())}
                for svc, sigs in sorted(self.templates[speaker].items())}

    def generic_out(self, speaker: str) -> dict[str, list[list]]:
        """Templates seen in at least two domains (and two slots for slot acts): domain-agnostic phrasing."""
        out: dict[str, list[list]] = {}
        for tok, tpls in sorted(self.generic[speaker].items()):
            if "(*)" in tok or "(*x" in tok:
                continue  # a bare REQUEST names its slot in words: never domain-agnostic
            keep = []
            for t, where in tpls.items():
                domains = {d for d, _ in where}
                kinds = {k for _, k in where}
                if len(domains) >= 2 and ("(*" not in tok or (len(kinds) >= 2 and _plain(t))):
                    keep.append((-len(where), t))
            if keep:
                out[tok] = [list(t) for _, t in sorted(keep, key=lambda x: (x[0], repr(x[1])))[:MAX_TEMPLATES]]
        return out

    def spoken_out(self) -> tuple[dict, dict]:
        """(per service slot canonical -> [[variant, count]...], global time/date canonical -> variants)."""
        per = {svc: {slot: {c: [[v, n] for v, n in cnt.most_common(MAX_VARIANTS)] for c, cnt in sorted(cs.items())}
                     for slot, cs in sorted(slots.items())} for svc, slots in sorted(self.spoken.items())}
        glob = {c: [[v, n] for v, n in cnt.most_common(MAX_VARIANTS)] for c, cnt in sorted(self.global_spoken.items())}
        return per, glob


def _linkable(value: str) -> bool:
    """Whether a value is specific enough that equality across services means it was carried over."""
    return len(value) > 2 and not value.isdigit() and value not in ("True", "False", "dontcare")


class _Stats:
    """Goal statistics: intents, intent chains, constraint and request counts, turns, service sequences."""

    def __init__(self):
        self.svc: dict[str, dict[str, Any]] = {}
        self.pairs: Counter = Counter()
        self.transfers: Counter = Counter()
        self.multi = 0
        self.n = 0
        self.turns_total = 0

    def _s(self, svc: str) -> dict[str, Any]:
        return self.svc.setdefault(svc, {"dialogues": 0, "intents": Counter(), "chains": Counter(),
                                         "constraints": defaultdict(Counter), "requested": defaultdict(Counter),
                                         "turns": Counter(), "results": {}})

    def add(self, dialogue: dict[str, Any], services: dict[str, ServiceSchema]) -> None:
        turns = dialogue.get("turns", [])
        self.n += 1
        self.turns_total += len(turns)
        order: list[str] = []
        intents: dict[str, list[str]] = defaultdict(list)
        last_state: dict[tuple[str, str], int] = {}
        known: dict[str, dict[str, str]] = defaultdict(dict)  # service -> canonical value -> slot
        for turn in turns:
            for fr in turn.get("frames", []):
                svc = fr.get("service")
                if svc not in services:
                    continue
                if svc not in order:
                    order.append(svc)
                st = fr.get("state")
                if turn.get("speaker") == "USER" and st:
                    ai = st.get("active_intent", "NONE")
                    if ai != "NONE":
                        if not intents[svc] or intents[svc][-1] != ai:
                            intents[svc].append(ai)
                        last_state[(svc, ai)] = len(st.get("slot_values", {}))
                        for a in fr.get("actions", []):
                            if a["act"] == "REQUEST":
                                self._s(svc)["requested"][ai][a["slot"]] += 1
                for a in fr.get("actions", []):
                    for c in a.get("canonical_values", []):
                        slot = a.get("slot", "")
                        if slot in services[svc].slots and not services[svc].is_categorical(slot):
                            known[svc].setdefault(c, slot)
                call = fr.get("service_call")
                if call:
                    got = self._s(svc)["results"]
                    method = call.get("method", "")
                    got[method] = max(got.get(method, 0), len(fr.get("service_results", [])))
                    pos = order.index(svc)
                    for slot, v in call.get("parameters", {}).items():
                        for p in order[pos - 1:pos] if pos else ():
                            if v in known[p] and _linkable(v) and not services[svc].is_categorical(slot):
                                self.transfers[f"{p.rsplit('_', 1)[0]}.{known[p][v]}>{svc.rsplit('_', 1)[0]}.{slot}"] += 1
                    for r in fr.get("service_results", [])[:1]:
                        for k, v in r.items():
                            if not services[svc].is_categorical(k):
                                known[svc].setdefault(v, k)
        for svc in order:
            s = self._s(svc)
            s["dialogues"] += 1
            if len(order) == 1:
                s["turns"][len(turns)] += 1
            for ai in dict.fromkeys(intents[svc]):
                s["intents"][ai] += 1
                s["constraints"][ai][last_state.get((svc, ai), 0)] += 1
            s["chains"][">".join(intents[svc])] += 1
        if len(order) > 1:
            self.multi += 1
            self.pairs["|".join(order)] += 1

    def out(self) -> dict[str, Any]:
        """The statistics as a JSON-able dict (see the contract notes)."""
        svcs = {}
        for name, s in sorted(self.svc.items()):
            turns = s["turns"]
            n = sum(turns.values())
            svcs[name] = {"dialogues": s["dialogues"], "intents": dict(s["intents"]), "chains": dict(s["chains"]),
                          "constraints": {i: {str(k): v for k, v in c.items()} for i, c in s["constraints"].items()},
                          "requested": {i: dict(c) for i, c in s["requested"].items()},
                          "turns": {str(k): v for k, v in sorted(turns.items())},
                          "results": dict(sorted(s["results"].items())),
                          "mean_turns": (sum(k * v for k, v in turns.items()) / n) if n else None}
        return {"services": svcs, "pairs": dict(self.pairs.most_common()), "transfers": dict(self.transfers.most_common()),
                "multi_service_share": self.multi / self.n if self.n else 0.0,
                "mean_turns": self.turns_total / self.n if self.n else 0.0, "dialogues": self.n}
