"""The user's understanding step: SGD system acts from an agent utterance, for agents that send only text.

Two readers, the second only for what the first leaves unread:

1. Templates. The pack's mined system templates (the service's bank, its domain's translated bank, the
   borrowed and generic banks) and the schema-phrased fallbacks of scenarios/sgd/nlg.py become
   case-insensitive patterns with a capture per value. The utterance is split into a sequence of such
   template sentences (dynamic programming over word boundaries); every captured value must be one the
   slot can hold (the user's own or recently heard values, the pack's values and surface forms, or a time,
   date, count or price that normalises) and the split with the most text explained, then the most
   recognised values, then the fewest pieces, wins.
2. Cues. Text no template explains is read with a few precise rules: "what time...?" style questions
   request a slot of the current intent, a known value of the service with a confirm / offer / inform cue
   gives that act, fixed phrases give NOTIFY_SUCCESS, NOTIFY_FAILURE, REQ_MORE and GOODBYE.

Precision matters more than recall: an act the user wrongly believes (a made-up offer, a wrong confirm)
misleads it more than an act it missed, after which it simply asks again. So an unrecognisable value
rejects the template that captured it, and the cue rules only fire on known values and unambiguous words.
Everything here is a pure function of the pack, the text and the context.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from ..engine.events import Act
from ..scenarios.sgd import normalize
from ..scenarios.sgd.nlg import builtin_template, counted_forms, nameish, parse_token
from ..scenarios.sgd.schema import names_intents
from ..scenarios.sgd.values import plausible, value_kind

_WS = re.compile(r"\s+")
_STRIP = " ,.;:!?\"'()"
_OPEN = frozenset(("name", "person", "place", "address", "city", "other"))  # kinds of open value sets
_SHAPED = frozenset(("time", "date", "count", "money", "rating", "phone"))  # kinds whose values have a form
_NO_SLOT_ACTS = ("NOTIFY_SUCCESS", "NOTIFY_FAILURE", "REQ_MORE", "GOODBYE")
_VALUE_ACTS = ("INFORM", "CONFIRM", "OFFER")
_PIECE = 3.0  # the cost of one more template piece: one reading of a sentence beats two
_UNKNOWN = 0.4  # how much of a value's length an unknown (but plausible) value explains
_MISS = object()


class Context:
    """What the user brings to reading a system turn: the service and intent it is talking about, canonical
    values per slot it holds or recently heard (its goal, what it said, the offer on the table) and the slots
    it asked the system for."""

    __slots__ = ("service", "intent", "known", "requested")

    def __init__(self, service: str, intent: str | None = None, known: dict[str, Iterable[str]] | None = None,
                 requested: Iterable[str] = ()) -> None:
        self.service = service
        self.intent = intent
        self.known = {s: [v for v in vs if v] for s, vs in (known or {}).items()}
        self.requested = set(requested)  # slots the user asked for: their values come as INFORM


class _Template:
    """One compiled template: literal pieces (each a tuple of alternative spellings) and holes (the index of
    the act a value fills), in order, plus the acts of its signature."""

    __slots__ = ("parts", "first", "last", "acts", "literal", "bare")

    def __init__(self, parts: list, first: str, last: str, acts: list[tuple[str, str, list[str] | None]],
                 literal: int, bare: bool) -> None:
        self.parts, self.first, self.last, self.acts, self.literal = parts, first, last, acts, literal
        self.bare = bare  # no words of its own ("<name> <category>"): only known values may fill it


def parse_signature(sig: str) -> list[tuple[str, str, list[str] | None, int]] | None:
    """The acts of a signature string: (act, slot, bound values or None, placeholder count) per token."""
    out = []
    for tok in sig.split("+"):
        parsed = parse_token(tok)
        if parsed is None:
            return None
        act, slot, bound, n = parsed
        out.append((act, slot, None if bound is None else bound.split("|"), n))
    return out


def _spellings(text: str, after_value: bool) -> tuple[str, ...]:
    """A literal's spellings: a counted noun right after a value has both numbers ("1 person", "2 people")."""
    forms = counted_forms(text) if after_value else None
    return tuple(dict.fromkeys((*forms, text))) if forms else (text,)


_LETTERS = re.compile(r"[a-z]{2,}")


def compile_template(sig: str, template: list) -> _Template | None:
    """A template (literals and placeholder indices) of signature ``sig`` ready to match, or None when it
    cannot be matched reliably (no words of its own, a placeholder the signature lacks). Two values side
    by side are allowed: the matcher then accepts only values it knows for both."""
    acts = parse_signature(sig)
    if acts is None:
        return None
    owner: list[int] = []  # placeholder index -> act index
    for k, (_, _, _, n) in enumerate(acts):
        owner += [k] * n
    raw: list[str | int] = []
    for p in template:
        if isinstance(p, int):
            if p >= len(owner):
                return None
            raw.append(p)
        else:
            lit = _WS.sub(" ", str(p)).lower()
            if raw and isinstance(raw[-1], str):
                raw[-1] += lit
            elif lit:
                raw.append(lit)
    if raw and isinstance(raw[0], str):
        raw[0] = raw[0].lstrip()
    if raw and isinstance(raw[-1], str):
        raw[-1] = raw[-1].rstrip()
    raw = [p for p in raw if p != ""]
    bare = not _LETTERS.search(" ".join(p for p in raw if isinstance(p, str)))
    if not raw or (bare and sum(isinstance(p, int) for p in raw) < 2):
        return None  # "<value>." alone would read any sentence as a value
    parts: list = []
    literal, prev_value = 0, False
    for p in raw:
        if isinstance(p, int):
            parts.append(owner[p])
            prev_value = True
        else:
            parts.append(_spellings(p, prev_value))
            literal += len(p.strip())
            prev_value = False
    first = raw[0] if isinstance(raw[0], str) else ""
    last = parts[-1] if isinstance(parts[-1], tuple) else ()
    tail = min((s[-2:] for s in last), key=len) if last else ""
    return _Template(parts, first[:4], tail, [(a, s, b) for a, s, b, _ in acts], literal, bare)


class _Bank:
    """The compiled system templates of one service, indexed by how they start."""

    def __init__(self, templates: list[_Template]) -> None:
        self.by_start: dict[int, dict[str, list[_Template]]] = {}
        for t in templates:
            self.by_start.setdefault(len(t.first), {}).setdefault(t.first, []).append(t)

    def candidates(self, low: str, pos: int) -> list[_Template]:
        """Templates whose first literal can start at ``pos``."""
        out: list[_Template] = []
        for k, bucket in self.by_start.items():
            got = bucket.get(low[pos:pos + k])
            if got:
                out.extend(got)
        return out


# -- value recognition ---------------------------------------------------------------------------------

_NAMEWORD = re.compile(r"[a-z]{2,}")
_JUNK = re.compile(r"[?!]|\.\s|^(?:a|an|at|in|on|for|to|from|with|by) |\b(you|your|i|would|could|please|which|that|who|is|"
                   r"are|was|were|called|named|have|has|can|might|there|another|located|going|will|be|it|they|this|"
                   r"these|we|me|my|one|some|any|happen|taking|place)\b| (?:at|in|on|from|to)(?: |$)")


class Understanding:
    """System acts from agent text for the services of a pack; build one per run (it caches per service)."""

    def __init__(self, pack: Any) -> None:
        self.pack = pack
        self._banks: dict[str, _Bank] = {}
        self._kinds: dict[tuple[str, str], str] = {}
        self._cues: dict[str, Any] = {}

    # -- banks ----------------------------------------------------------------------------------------

    def bank(self, service: str) -> _Bank:
        """The compiled templates of a service (built on first use)."""
        bank = self._banks.get(service)
        if bank is None:
            bank = self._banks[service] = _Bank(list(self._templates(service)))
        return bank

    def _templates(self, service: str) -> Iterable[_Template]:
        realizer = self.pack.realizer
        svc = self.pack.service(service)
        seen: set[tuple[str, str]] = set()

        def add(sig: str, tpls: Iterable[list]) -> Iterable[_Template]:
            for t in tpls:
                key = (sig, repr(t))
                if key in seen:
                    continue
                seen.add(key)
                got = compile_template(sig, t)
                if got is not None and all(s in svc.slots or s in ("", "intent", "count")
                                           for _, s, _ in got.acts):
                    yield got

        own = realizer.banks.get("SYSTEM", {}).get(service, {})
        for sig, tpls in own.items():
            yield from add(sig, tpls)
        # the domain's other services' templates in this service's slot names (what the realizer borrows)
        for sig, tpls in realizer.domain_bank("SYSTEM", service).items():
            yield from add(sig, tpls)
        for tok in realizer.by_slot.get("SYSTEM", {}):
            acts = parse_signature(tok)
            # slots only: this service's intent offers come from its own intents below (Homes_2 has a slot
            # "intent", yet other services' OFFER_INTENT templates do not speak of it)
            if (acts and len(acts) == 1 and acts[0][1] in svc.slots
                    and not names_intents(acts[0][0], acts[0][1], svc.slots)):
                yield from add(tok, realizer.borrowed("SYSTEM", service, acts[0][1], tok))
        for tok, tpls in realizer.generic.get("SYSTEM", {}).items():
            if "(" not in tok:  # GOODBYE, REQ_MORE...: INFORM(*v) names no slot, the cue reader covers it
                yield from add(tok, tpls)
        # the schema-phrased fallbacks the realizer says when no mined template fits
        for act in _NO_SLOT_ACTS:
            yield from add(act, [builtin_template("SYSTEM", svc, Act(act=act))])
        for intent in svc.intents:
            tok = f"OFFER_INTENT(intent={intent})"
            yield from add(tok, [builtin_template("SYSTEM", svc, Act(act="OFFER_INTENT", slot="intent",
                                                                     values=[intent]))])
        yield from add("INFORM_COUNT(count)", [builtin_template("SYSTEM", svc, Act(act="INFORM_COUNT", slot="count",
                                                                                   values=["1"]))])
        for slot, spec in svc.slots.items():
            yield from add(f"REQUEST({slot})", [builtin_template("SYSTEM", svc, Act(act="REQUEST", slot=slot))])
            for act in _VALUE_ACTS:
                yield from add(f"{act}({slot})", [builtin_template("SYSTEM", svc, Act(act=act, slot=slot, values=["x"]))])
                for bound in ("True", "False", "dontcare"):
                    if bound == "dontcare" or set(spec.possible_values) == {"True", "False"}:
                        yield from add(f"{act}({slot}={bound})",
                                       [builtin_template("SYSTEM", svc, Act(act=act, slot=slot, values=[bound]))])

    # -- values ---------------------------------------------------------------------------------------

    def kind(self, service: str, slot: str) -> str:
        """The kind of a slot (time, date, count, money, name...), "count" for INFORM_COUNT's."""
        key = (service, slot)
        got = self._kinds.get(key)
        if got is None:
            svc = self.pack.service(service)
            if slot == "count":
                got = "count"
            elif slot not in svc.slots:
                got = "other"
            else:
                got = value_kind(svc.slots[slot], self.pack.value_pool(service, slot)[:50])
            self._kinds[key] = got
        return got

    def recognise(self, service: str, slot: str, text: str, ctx: Context,
                  lowercase_names: bool = True) -> tuple[str, int] | None:
        """The canonical value ``text`` stands for in ``slot`` and how sure (3: a value of the context, 2: known
        to the pack or normalised, 0: a plausible unknown name), or None when the slot cannot hold it."""
        t = text.strip(_STRIP)
        if not t:
            return None
        low = t.lower()
        kind = self.kind(service, slot)
        normal = normalize.by_kind(kind, t)
        for c in ctx.known.get(slot, ()):
            if low == c.lower() or (normal is not None and normal == c):
                return c, 3
            if any(low == f.lower() for f in self.pack.spoken_forms(service, slot, c)):
                return c, 3
        if slot == "count":
            return (normal, 2) if normal is not None else None
        got = self.pack.canonical(service, slot, t)
        if got is not None:
            return got, 2
        if normal is not None:
            return normal, 2
        svc = self.pack.service(service)
        spec = svc.slots.get(slot)
        if spec is None or spec.is_categorical or kind in _SHAPED:
            return None
        if len(t.split()) > 6 or _JUNK.search(low) or not plausible(kind, t) or kind not in _OPEN:
            return None
        if normalize.time_of_day(t) or normalize.date(t) or normalize.money(t) or not _NAMEWORD.search(low):
            return None  # a time, date or price is no name or address
        if t == low and not lowercase_names and not any(c.isdigit() for c in t):
            return None  # in a text that capitalises, an unknown name in lower case is likely plain words
        return t, 0

    # -- reading ----------------------------------------------------------------------------------------

    def understand(self, text: str, ctx: Context) -> list[Act]:
        """The system acts of ``text`` about ``ctx.service`` (empty when nothing is understood)."""
        norm = _WS.sub(" ", text).strip()
        if not norm:
            return []
        low = norm.lower()
        src = norm if len(low) == len(norm) else low
        segments, gaps = self._split(src, low, ctx)
        acts: list[Act] = []
        for seg in segments:
            acts.extend(seg)
        for gap in gaps:
            acts.extend(self._cues_in(gap, ctx, acts))
        return _dedupe(acts)

    def _split(self, src: str, low: str, ctx: Context) -> tuple[list[list[Act]], list[str]]:
        """The best split of the text into template sentences and unread gaps (see the module docstring)."""
        bank = self.bank(ctx.service)
        n = len(low)
        starts = [0] + [i + 1 for i, ch in enumerate(low) if ch == " "]
        ends = [i for i, ch in enumerate(low) if ch == " "] + [n]
        memo: dict[tuple[str, int, int], tuple[str, str, float, int] | None] = {}
        # best[pos] = (score, previous pos, acts; None for an unread word)
        best: dict[int, tuple[float, int, list[Act] | None]] = {0: (0.0, -1, None)}
        for p in starts:
            here = best.get(p)
            if here is None:
                continue
            score = here[0]
            nxt = low.find(" ", p)
            self._relax(best, n if nxt < 0 else nxt + 1, score, p, None)
            for tpl in bank.candidates(low, p):
                for q in ends:
                    if q <= p or (tpl.last and not low.endswith(tpl.last, p, q)):
                        continue
                    got = self._match(tpl, low, src, p, q, ctx, memo)
                    if got is not None:
                        self._relax(best, q + 1 if q < n else n, score + got[0] - _PIECE, p, got[1])
        segments: list[list[Act]] = []
        gaps: list[str] = []
        chain = []
        pos = n
        while pos > 0:
            _, prev, acts = best[pos]
            chain.append((prev, pos, acts))
            pos = prev
        joined = False  # the last piece was an unread word: the next one extends its gap
        for prev, pos, acts in reversed(chain):
            if acts is None:
                if joined:
                    gaps[-1] = gaps[-1] + " " + src[prev:pos].strip()
                else:
                    gaps.append(src[prev:pos].strip())
                joined = True
            else:
                segments.append(acts)
                joined = False
        return segments, gaps

    @staticmethod
    def _relax(best: dict, pos: int, score: float, prev: int, acts: list[Act] | None) -> None:
        cur = best.get(pos)
        if cur is None or score > cur[0]:
            best[pos] = (score, prev, acts)

    def _match(self, tpl: _Template, low: str, src: str, p: int, q: int, ctx: Context,
               memo: dict) -> tuple[float, list[Act]] | None:
        """The best reading of ``low[p:q]`` as ``tpl``: (score, acts), or None when it does not fit. Each
        value runs up to an occurrence of the next literal; every split is tried, the values must fit."""
        parts, acts = tpl.parts, tpl.acts
        last = len(parts)
        lowercase = src == low  # a text all in lower case may write names in lower case too
        found: list[tuple[float, list]] = []

        def walk(i: int, pos: int, score: float, assigned: list) -> None:
            if i == last:
                if pos == q:
                    found.append((score, assigned))
                return
            part = parts[i]
            if type(part) is tuple:
                for s in part:
                    if low.startswith(s, pos) and pos + len(s) <= q:
                        walk(i + 1, pos + len(s), score + len(s), assigned)
                return
            adjacent = tpl.bare or (i + 1 < last and type(parts[i + 1]) is int) or (i > 0 and type(parts[i - 1]) is int)
            if i + 1 == last:
                cuts = [q] if q > pos else []
            elif type(parts[i + 1]) is int:  # two values side by side ("Sino Asian"): split at any space
                cuts = [o for o in range(pos + 1, q) if low[o] == " "]
            else:
                cuts = []
                for s in parts[i + 1]:
                    o = low.find(s, pos + 1, q)
                    while o >= 0:
                        cuts.append(o)
                        o = low.find(s, o + 1, q)
            slot = acts[part][1]
            for e in cuts:
                key = (slot, pos, e)
                r = memo.get(key, _MISS)
                if r is _MISS:
                    r = memo[key] = self._value(slot, src[pos:e], ctx, lowercase)
                if r is not None and not (adjacent and r[3] < 2):  # side by side, both must be known values
                    walk(i + 1, e, score + r[2], assigned + [(part, r[0], r[1])])

        walk(0, p, 0.0, [])
        if not found:
            return None
        score, assigned = max(found, key=lambda f: f[0])
        values: dict[int, list[tuple[str, str]]] = {}
        for k, spoken, canon in assigned:
            values.setdefault(k, []).append((spoken, canon))
        out = []
        for k, (act, slot, bound) in enumerate(acts):
            if bound is not None:
                out.append(Act(act=act, slot=slot, values=list(bound), canonical_values=list(bound)))
            elif k in values:
                vs = values[k]
                out.append(Act(act=act, slot=slot, values=[v for v, _ in vs], canonical_values=[c for _, c in vs]))
            else:
                out.append(Act(act=act, slot=slot))
        return score, out

    def _value(self, slot: str, text: str, ctx: Context, lowercase: bool) -> tuple[str, str, float, int] | None:
        """(spoken, canonical, score, sureness) of a captured value: its length, less for a value nobody knows."""
        spoken = text.strip(_STRIP)
        got = self.recognise(ctx.service, slot, spoken, ctx, lowercase)
        if got is None:
            return None
        return spoken, got[0], len(text) * (1.0 if got[1] >= 2 else _UNKNOWN), got[1]

    # -- cues -------------------------------------------------------------------------------------------

    def _cues_in(self, text: str, ctx: Context, already: list[Act]) -> list[Act]:
        """Acts of text no template explains, sentence by sentence, by the cue rules below."""
        out: list[Act] = []
        confirming = bool(_CONFIRM.search(text.lower()))  # "So: X, Y and Z. Is that right?" confirms all
        for sentence in _SENTENCES.split(text):
            if sentence.strip():
                out.extend(self._sentence(sentence.strip(), ctx, already + out, confirming))
        return out

    def _sentence(self, text: str, ctx: Context, already: list[Act], confirming: bool) -> list[Act]:
        low = text.lower()
        svc = self.pack.service(ctx.service)
        args = self._args(ctx)
        out: list[Act] = []
        failure = bool(_FAILURE.search(low))
        question = text.rstrip().endswith("?") or bool(_ASKING.match(low))
        if _GOODBYE.search(low) and not _REQ_MORE.search(low):
            out.append(Act(act="GOODBYE"))
        if _REQ_MORE.search(low):
            out.append(Act(act="REQ_MORE"))
        if failure:
            out.append(Act(act="NOTIFY_FAILURE"))
        elif _SUCCESS.search(low) and not question:
            out.append(Act(act="NOTIFY_SUCCESS"))
        m = _COUNT.search(low)
        if m and not failure:
            n = normalize.number(m.group(1))
            if n is not None and n != "1":
                out.append(Act(act="INFORM_COUNT", slot="count", values=[m.group(1)], canonical_values=[n]))
        offer_intent = self._offer_intent(low, ctx) if question and _OFFER_INTENT.search(low) else None
        if offer_intent is not None:
            out.append(Act(act="OFFER_INTENT", slot="intent", values=[offer_intent], canonical_values=[offer_intent]))
            return out
        spotted = self._spot(text, low, ctx, args)
        values = [(slot, spoken, canon) for slot, spoken, canon in spotted if slot != "count"]
        if values:
            if confirming and not failure:
                out += [Act(act="CONFIRM", slot=sl, values=[v], canonical_values=[c]) for sl, v, c in values if sl in args]
            elif (question and len(values) == 1 and values[0][0] in args and not _PROPOSING.search(low)
                  and not nameish(values[0][0])):
                sl, v, c = values[0]
                out.append(Act(act="REQUEST", slot=sl, values=[v], canonical_values=[c]))
            else:
                results = self._results(ctx)
                offering = bool(_OFFERING.search(low)) or any(a.act == "INFORM_COUNT" for a in out + already)
                for sl, v, c in values:
                    if sl in ctx.requested:
                        out.append(Act(act="INFORM", slot=sl, values=[v], canonical_values=[c]))
                    elif offering and sl in results and not failure and not svc.is_categorical(sl):
                        # a category said in passing ("a nice Thai place") is rarely part of an offer
                        out.append(Act(act="OFFER", slot=sl, values=[v], canonical_values=[c]))
        elif question and not out:
            for slot in self._asked(low, ctx, args, svc):
                out.append(Act(act="REQUEST", slot=slot))
        return out

    def _args(self, ctx: Context) -> list[str]:
        """The slots the system may ask or confirm: the current intent's, else every intent's."""
        svc = self.pack.service(ctx.service)
        intents = [svc.intents[ctx.intent]] if ctx.intent in svc.intents else list(svc.intents.values())
        out: list[str] = []
        for i in intents:
            for slot in list(i.required_slots) + list(i.optional_slots):
                if slot not in out:
                    out.append(slot)
        return out

    def _results(self, ctx: Context) -> set[str]:
        svc = self.pack.service(ctx.service)
        intents = [svc.intents[ctx.intent]] if ctx.intent in svc.intents else list(svc.intents.values())
        return {s for i in intents for s in i.result_slots}

    def _offer_intent(self, low: str, ctx: Context) -> str | None:
        """The transactional intent a "would you like to book...?" offers: the one whose words the text shares."""
        svc = self.pack.service(ctx.service)
        words = set(_WORDS.findall(low))
        best, best_n = None, 0
        for i in svc.transactional_intents:
            if i.name == ctx.intent:
                continue
            n = len(words & _intent_words(i.name, i.description))
            if n > best_n:
                best, best_n = i.name, n
        return best

    def _asked(self, low: str, ctx: Context, args: list[str], svc: Any) -> list[str]:
        """The slots a question asks for: by question words of the slot's kind and the words of its name and
        description; a question that fits several slots equally asks for none the user can tell."""
        words = {_stem(w) for w in _WORDS.findall(low)}
        scored: list[tuple[int, str]] = []
        for slot in args:
            spec = svc.slots.get(slot)
            if spec is None:
                continue
            kind = self.kind(ctx.service, slot)
            score = 0
            cue = _KIND_QUESTIONS.get(kind)
            if cue is not None and cue.search(low):
                score += 2
            own = {_stem(w) for w in slot.split("_")} - _WEAK_WORDS
            score += 2 * len(own & words)
            desc = {_stem(w) for w in _WORDS.findall(spec.description.lower())} - _WEAK_WORDS
            score += len(desc & words) > 1
            if spec.is_categorical:
                score += any(v.lower() in low for v in spec.possible_values if len(v) > 3)
            if score >= 2:
                scored.append((score, slot))
        if not scored:
            return []
        top = max(sc for sc, _ in scored)
        best = [sl for sc, sl in scored if sc == top]
        if len(best) > 1:  # several slots fit equally: one the user has not given yet, if only one
            best = [sl for sl in best if not ctx.known.get(sl)]
        return best if len(best) == 1 else []

    def _spot(self, text: str, low: str, ctx: Context, args: list[str]) -> list[tuple[str, str, str]]:
        """(slot, spoken, canonical) of the values found in a sentence: dates, times, prices and counts by
        their shape, other values by the service's known surface forms and the user's own values. A value
        more than one slot could hold goes to the one the user holds it for, else the one its neighbouring
        words name ("from X", "to X"), else nowhere."""
        taken: list[tuple[int, int]] = []
        out: list[tuple[int, str, str, str]] = []
        slots = list(dict.fromkeys(args + sorted(self._results(ctx))))

        def free(a: int, b: int) -> bool:
            return not any(a < e and s < b for s, e in taken)

        for kind, pattern in _SHAPES:
            cands = [sl for sl in slots if self.kind(ctx.service, sl) == kind]
            for m in pattern.finditer(low):
                a, b = m.span(1)
                if not free(a, b):
                    continue
                spoken = text[a:b]
                options = []
                for sl in cands:
                    got = self.recognise(ctx.service, sl, spoken, ctx)
                    if got is not None and got[1] >= 2:
                        options.append((sl, got[0], got[1]))
                pick = self._pick(options, low, a, b, ctx)
                taken.append((a, b))
                if pick is not None:
                    out.append((a, pick[0], spoken, pick[1]))
        for a, b, options in self._surfaces(low, ctx, slots):
            if not free(a, b):
                continue
            taken.append((a, b))
            pick = self._pick(options, low, a, b, ctx)
            if pick is not None:
                out.append((a, pick[0], text[a:b], pick[1]))
        out.sort()
        seen: set[str] = set()
        result = []
        for _, sl, spoken, canon in out:
            if sl not in seen:
                seen.add(sl)
                result.append((sl, spoken, canon))
        return result

    def _pick(self, options: list[tuple[str, str, int]], low: str, a: int, b: int,
              ctx: Context) -> tuple[str, str] | None:
        if not options:
            return None
        after_word = (_WORDS.findall(low[b:b + 24]) or [""])[0]
        if options and self.kind(ctx.service, options[0][0]) == "count":
            # a count is only read with the noun it counts ("4 bed rooms", "2 people")
            noun = _stem(after_word)
            fits = [o for o in options if noun in self._count_nouns(ctx.service, o[0])]
            return (fits[0][0], fits[0][1]) if len(fits) == 1 else None
        if len({o[0] for o in options}) == 1:
            return options[0][0], options[0][1]
        mine = [o for o in options if o[2] >= 3]
        if len(mine) == 1:
            return mine[0][0], mine[0][1]
        before = set(_WORDS.findall(low[max(0, a - 24):a])[-3:])
        after = set(_WORDS.findall(low[b:b + 24])[:2])
        near = before | after
        fits = []
        for sl, canon, _ in options:
            own = {_stem(w) for w in sl.split("_")}
            if ((before & _FROM_WORDS and own & _FROM_SLOTS) or (before & _TO_WORDS and own & _TO_SLOTS)
                    or own & {_stem(w) for w in near} - _WEAK_WORDS):
                fits.append((sl, canon))
        return fits[0] if len(fits) == 1 else None

    def _count_nouns(self, service: str, slot: str) -> set[str]:
        """The nouns a count of this slot is said with: its name's and description's words, and people's
        words for a party size."""
        spec = self.pack.service(service).slots.get(slot)
        words = {_stem(w) for w in slot.split("_")} | {_stem(w) for w in _WORDS.findall(spec.description.lower())
                                                      if spec is not None}
        words -= _WEAK_WORDS
        if words & _PARTY:
            words |= _PARTY
        if "bed" in words:
            words |= {"bedroom", "bed"}
        if "bath" in words:
            words |= {"bathroom", "bath"}
        return words

    def _surfaces(self, low: str, ctx: Context, slots: list[str]) -> list[tuple[int, int, list[tuple[str, str, int]]]]:
        """Spans of known surface forms in ``low``, longest first, each with the (slot, canonical, sureness)
        it may stand for."""
        index = self._surface_index(ctx.service)
        words = set(_WORDS.findall(low))
        allowed = set(slots)
        found: dict[tuple[int, int], list[tuple[str, str, int]]] = {}
        cands: list[tuple[str, str, str, int]] = []
        for w in words:
            for surface, slot, canon in index.get(w, ()):
                if slot in allowed:
                    cands.append((surface, slot, canon, 2))
        for slot, values in ctx.known.items():
            if slot not in allowed:
                continue
            for c in values:
                for f in {c, *self.pack.spoken_forms(ctx.service, slot, c)}:
                    if len(f) > 2 and f.lower() not in _STOP_VALUES:
                        cands.append((f.lower(), slot, c, 3))
        cands.sort(key=lambda c: -len(c[0]))
        spans: list[tuple[int, int]] = []
        for surface, slot, canon, sure in cands:
            start = low.find(surface)
            while start >= 0:
                end = start + len(surface)
                if (start == 0 or not low[start - 1].isalnum()) and (end == len(low) or not low[end].isalnum()):
                    if not any(s < end and start < e and (s, e) != (start, end) for s, e in spans):
                        if (start, end) not in found:
                            spans.append((start, end))
                        found.setdefault((start, end), [])
                        if not any(o[0] == slot for o in found[(start, end)]):
                            found[(start, end)].append((slot, canon, sure))
                    break
                start = low.find(surface, start + 1)
        return [(a, b, found[(a, b)]) for a, b in sorted(found, key=lambda k: (-(k[1] - k[0]), k[0]))]

    def _surface_index(self, service: str) -> dict[str, list[tuple[str, str, str]]]:
        """Known surface forms of a service's values (not those of dates, times, prices or counts, which
        are read by shape), keyed by their longest word."""
        got = self._cues.get(service)
        if got is None:
            got = {}
            svc = self.pack.service(service)
            for slot, spec in svc.slots.items():
                if self.kind(service, slot) in _SHAPED or set(spec.possible_values) == {"True", "False"}:
                    continue
                values = list(dict.fromkeys(list(spec.possible_values) + self.pack.value_pool(service, slot)))
                for canon in values:
                    for form in {canon, *self.pack.spoken_forms(service, slot, canon)}:
                        f = form.lower()
                        ws = _WORDS.findall(f)
                        if len(f) < 3 or not ws or f in _STOP_VALUES or f == "dontcare":
                            continue
                        got.setdefault(max(ws, key=len), []).append((f, slot, canon))
            self._cues[service] = got
        return got


_SENTENCES = re.compile(r"(?<=[.?!])\s+")
_WORDS = re.compile(r"[a-z0-9]+")
_WEAK_WORDS = {"name", "number", "of", "the", "a", "an", "to", "is", "for", "and", "or", "in", "on", "at", "which",
               "what", "you", "your", "do", "type", "has", "whether", "user", "want", "would", "like"}
_FROM_WORDS = {"from", "leaving", "departing", "depart", "origin", "out", "pickup", "pick"}
_TO_WORDS = {"to", "into", "arriving", "arrive", "destination", "towards", "heading", "going", "for"}
_FROM_SLOTS = {"from", "origin", "departure", "leaving", "pickup", "source", "outbound", "start"}
_TO_SLOTS = {"to", "destination", "arrival", "dropoff", "inbound", "end", "where"}
_STOP_VALUES = {"yes", "no", "the", "one", "any", "all", "none", "true", "false", "and", "you", "for", "her", "him",
                "ok", "okay", "today", "sure", "good", "great", "nice", "best", "more", "other", "another"}
_GOODBYE = re.compile(r"\b(good ?bye|bye|have a (?:great|good|nice|wonderful|lovely|pleasant) (?:day|one|evening|night|weekend)"
                      r"|take care|enjoy your (?:day|evening))\b")
_REQ_MORE = re.compile(r"\b(anything else|something else|any other (?:thing|help|request)|(?:further|more|other) "
                       r"(?:help|assistance)|what else can i|can i (?:help|assist) (?:you )?(?:with )?(?:anything|something)"
                       r"|help you with anything)\b")
_FAILURE = re.compile(r"\b(sorry|unfortunately|(?:could|was|were|am|is) ?(?:not|n't) (?:able|possible|available)|"
                      r"couldn'?t|could not|unable to|failed|wasn'?t able|no (?:results|matches|options|luck))\b")
_SUCCESS = re.compile(r"\b(?:(?:has|have|is|are) (?:been |now )?(?:successfully )?(?:booked|reserved|confirmed|made|"
                      r"purchased|scheduled|placed|sent|transferred|set|added|completed|processed|initiated|done)|"
                      r"successful(?:ly)?|all set|is on (?:its|the) way|went through|enjoy (?:the|your) )")
_COUNT = re.compile(r"\b(?:found|there (?:are|were)|i (?:have|see|got)|got|located)\s+(\d+|two|three|four|five|six"
                    r"|seven|eight|nine|ten|eleven|twelve)\s+(?:\w+\s+){0,2}?(?:results?|options?|matches|places|\w+s)\b")
_CONFIRM = re.compile(r"\b(confirm|confirming|correct|is that right|is this right|to verify|verify|to be sure|"
                      r"just to check|to make sure|does that sound|is everything right|okay\?|ok\?|right\?)")
_OFFERING = re.compile(r"\b(how about|what about|there is|there's|there are|i found|found|i have|i've got|"
                       r"i recommend|i suggest|would you like|do you like|is a good|is a nice|option|one is|one at)\b")
_PROPOSING = re.compile(r"\b(how about|what about|there is|there's|there are|i found|found|i have|i've got|"
                        r"i recommend|i suggest|is a good|is a nice|one is|called|named)\b")
_ASKING = re.compile(r"^(?:and |so |okay,? |ok,? |sure,? |great,? )?(what|which|when|where|how|who|do you|would you|"
                     r"could you|can you|did you|are you|is it|will you|shall i|tell me)\b")
_OFFER_INTENT = re.compile(r"\b(?:would you like|do you want|shall i|should i|want me to|like me to|interested in)\b"
                           r"(?: me)?(?: to| in)? (?:also )?(?:book|reserve|buy|purchase|rent|schedule|make|play|get|add|"
                           r"transfer|send|set up|visit|go ahead|booking|reserving|buying|purchasing|renting|making)\b")
_KIND_QUESTIONS = {
    "time": re.compile(r"\b(what time|which time|when|what hour|how early|how late)\b"),
    "date": re.compile(r"\b(what date|which date|what day|which day|when|how soon)\b"),
    "count": re.compile(r"\bhow many\b"),
    "city": re.compile(r"\b(which city|what city|where|which town|what town|what location|which location|"
                       r"what area|which area)\b"),
    "place": re.compile(r"\b(where|which location|what location)\b"),
    "money": re.compile(r"\b(how much|what amount)\b"),
}
_PARTY = {"people", "person", "guest", "adult", "ticket", "seat", "passenger", "rider", "traveler", "traveller", "group",
          "party"}


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def _intent_words(name: str, description: str) -> set[str]:
    words = {w.lower() for w in re.findall(r"[A-Z][a-z]+", name)}
    words |= set(_WORDS.findall(description.lower()))
    return {_stem(w) for w in words} - _WEAK_WORDS | {w for w in words if len(w) > 3} - _WEAK_WORDS


_TIME_SHAPE = re.compile(r"(?:^|(?<=[^\w:]))(\d{1,2}(?::\d{2})?\s*(?:a\.?m\.?|p\.?m\.?)(?:\s+in\s+the\s+(?:morning|afternoon|evening))?"
                         r"|\d{1,2}:\d{2}(?:\s+in\s+the\s+(?:morning|afternoon|evening))?|noon|midnight"
                         r"|(?:half|quarter) (?:past|to) \w+(?:\s+in\s+the\s+(?:morning|afternoon|evening))?)(?![\w:])")
_DATE_SHAPE = re.compile(r"\b((?:january|february|march|april|may|june|july|august|september|october|november|december|"
                         r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\.? \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?"
                         r"|(?:the )?\d{1,2}(?:st|nd|rd|th)? of (?:this month|next month|january|february|march|april|may|"
                         r"june|july|august|september|october|november|december)"
                         r"|day after tomorrow|today|tomorrow|tonight"
                         r"|(?:next|this) (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
                         r"|(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)(?: next week| this week)?"
                         r"|the \d{1,2}(?:st|nd|rd|th))\b")
_MONEY_SHAPE = re.compile(r"(\$\s?\d[\d,]*(?:\.\d+)?|\b\d[\d,]*(?:\.\d+)? (?:dollars|bucks))")
_RATING_SHAPE = re.compile(r"\b(\d\.\d{1,2})\b")
_COUNT_SHAPE = re.compile(r"\b(\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|a single)\s+(?=\w)")
_SHAPES = [("time", _TIME_SHAPE), ("date", _DATE_SHAPE), ("money", _MONEY_SHAPE), ("rating", _RATING_SHAPE),
           ("count", _COUNT_SHAPE)]


def _dedupe(acts: list[Act]) -> list[Act]:
    """One act per (act, slot, values): a value said twice is one act."""
    seen: set[tuple] = set()
    out = []
    for a in acts:
        key = (a.act, a.slot, tuple(v.lower() for v in a.canonical_values))
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


def triples(acts: Iterable[Act]) -> set[tuple[str, str, str]]:
    """The (act, slot, canonical value) triples of acts, values lower-cased; "" for an act without value."""
    out = set()
    for a in acts:
        vals = a.canonical_values or a.values
        if not vals:
            out.add((a.act, a.slot, ""))
        for v in vals:
            out.add((a.act, a.slot, v.lower()))
    return out


def measure(understanding: Understanding, dialogues: Iterable[dict[str, Any]],
            services: Iterable[str] | None = None) -> dict[str, Any]:
    """Precision and recall of the (act, slot, value) triples recovered from the system turns of SGD
    dialogues, each read with the context a user would have: the service, the user's active intent, the
    values the user informed and the values the system said earlier in the dialogue."""
    allowed = set(services) if services is not None else None
    tp = fp = fn = turns = exact = 0
    by_act: dict[str, list[int]] = {}
    for d in dialogues:
        known: dict[str, dict[str, list[str]]] = {}
        intent: dict[str, str] = {}
        wanted: dict[str, set[str]] = {}
        for turn in d["turns"]:
            for f in turn["frames"]:
                svc = f["service"]
                mine = known.setdefault(svc, {})
                if turn["speaker"] == "USER":
                    state = f.get("state") or {}
                    intent[svc] = state.get("active_intent") or intent.get(svc, "NONE")
                    wanted.setdefault(svc, set()).update(state.get("requested_slots") or ())
                elif allowed is None or svc in allowed:
                    ctx = Context(svc, intent.get(svc), mine, wanted.get(svc, ()))  # wanted: requested so far
                    gold = [Act(act=a["act"], slot=a["slot"], values=a["values"],
                                canonical_values=a.get("canonical_values") or a["values"]) for a in f["actions"]]
                    got = understanding.understand(turn["utterance"], ctx)
                    g, p = triples(gold), triples(got)
                    tp += len(g & p)
                    fp += len(p - g)
                    fn += len(g - p)
                    turns += 1
                    exact += g == p
                    for t in g | p:
                        c = by_act.setdefault(t[0], [0, 0, 0])
                        c[0] += t in g and t in p
                        c[1] += t in p and t not in g
                        c[2] += t in g and t not in p
                for a in f["actions"]:  # what was said is known from now on
                    for v in a.get("canonical_values") or ():
                        if v not in mine.setdefault(a["slot"], []):
                            mine[a["slot"]].append(v)
    return {"turns": turns, "exact": exact, "tp": tp, "fp": fp, "fn": fn,
            "precision": tp / (tp + fp) if tp + fp else 1.0, "recall": tp / (tp + fn) if tp + fn else 1.0,
            "by_act": by_act}


_SHARED: dict[int, tuple[Any, Understanding]] = {}


def for_pack(pack: Any) -> Understanding:
    """The Understanding of a pack, shared by every user of a run (its compiled banks are read-only)."""
    got = _SHARED.get(id(pack))
    if got is None or got[0] is not pack:
        got = _SHARED[id(pack)] = (pack, Understanding(pack))
    return got[1]
