"""The schema agent's understanding step: SGD dialogue acts from a user's text, for turns without frames.

It finds the values of a service's slots in the text (schema possible_values, the pack's entity values
and every surface form the pack knows, longest match first, on word boundaries), then reads the acts off
the nearest of the pack's mined USER templates (and the schema-phrased ones), the whole turn or sentence
by sentence, values replaced by "#": its acts, the slots its placeholders give the values, and yes/no
acts read in the light of what the agent said last (a "yes" after OFFER is SELECT, after OFFER_INTENT
AFFIRM_INTENT). A text no template is near is read by word rules (intent-name words, yes/no/thanks/bye
phrases). Crude next to a trained NLU, but enough to run the rule agent against users that send only
text (LLM users, HTTP clients); docs/users.md has its measured precision and recall.
"""

from __future__ import annotations

import heapq
import math
import re
from typing import Any

from ..engine.events import Act, SlotSpan
from ..scenarios.sgd.nlg import builtin_template, parse_token
from ..scenarios.sgd.schema import names_intents

_WEAK = {"has", "the", "number", "name", "type", "date", "time"}  # words of slot names that say little alone
_WORD = re.compile(r"[a-z0-9]+")
_YES = re.compile(r"\b(yes|yeah|yep|sure|ok|okay|sounds (good|great|perfect)|that works|perfect|great|correct|"
                  r"please do|go ahead|that's right|absolutely|sounds like|i'll take|interested|"
                  r"i (?:would |'d )?(?:like|love|want) (?:that|it|this|to see that|to (?:go|try|see) (?:that|it|there)))\b")
_OKAY = re.compile(r"\b(fine|okay|ok|alright|good|comfortable|happy|prefer|would like|i'd like|want)\b")
_NO = re.compile(r"\b(no|nope|not really|don't|do not|nah)\b")
_THANKS = re.compile(r"\b(thanks|thank you|thank)\b")
_BYE = re.compile(r"\b(bye|goodbye|that's all|that is all|nothing else)\b")
_ALTS = re.compile(r"\b(other|another|else|alternatives?|different)\b")
_ANY = re.compile(r"\b(any is fine|anything|any of them|doesn't matter|does not matter|don't care|no preference|"
                  r"whatever|any (one|place|time|day|date|city|kind))\b")
_ASK = re.compile(r"\?|\b(what|which|how|where|when|is it|does it|do they|can you tell)\b")
_WANT = re.compile(r"\b(want|need|like|looking|find|search|book|reserve|buy|get|rent|play|schedule|check|"
                   r"add|transfer|make|help)\b")


# words of a description that say nothing of which slot is meant
_COMMON = {"name", "number", "the", "this", "that", "with", "from", "which", "what", "whether", "user", "for", "and",
           "date", "time", "type", "city", "location", "event", "movie", "song", "hotel", "restaurant", "place",
           "ride", "flight", "attraction", "property", "apartment", "service", "booking", "reservation"}
# how people ask for a slot, by the last word of its name
_SLOT_QUESTIONS = {"number": "phone call contact", "address": "address located where street", "price": "cost much",
                   "fare": "cost much price", "genre": "kind type genre", "subcategory": "kind type genre",
                   "humidity": "humid", "wind": "windy", "rating": "rated reviews good", "precipitation": "rain"}

# words people use for a domain's things, beyond the words of its intent names
_DOMAIN_WORDS = {
    "Restaurants": "restaurant eat dine dinner lunch food table", "Hotels": "hotel stay room accommodation",
    "Buses": "bus coach", "Flights": "flight fly plane airline", "Events": "event concert game show ticket",
    "Movies": "movie film cinema theater", "Media": "movie film watch", "Music": "song music play listen",
    "RideSharing": "cab taxi ride", "RentalCars": "car rental rent", "Homes": "apartment house home visit",
    "Weather": "weather forecast rain", "Travel": "attraction visit sightseeing", "Banks": "bank balance account",
    "Alarm": "alarm wake", "Services": "doctor dentist stylist salon therapist appointment",
    "Payment": "pay payment money send", "Messaging": "message send share", "Trains": "train",
    "Calendar": "calendar event appointment",
}


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def _camel_words(name: str) -> set[str]:
    return {_stem(w.lower()) for w in re.findall(r"[A-Z][a-z]*|[a-z]+", name)}


_FEAT = re.compile(r"[a-z]+|[0-9]+|#")
_SENTENCE = re.compile(r"(?<=[.?!])\s+")
_ONWARD = {"INFORM_INTENT", "INFORM", "REQUEST", "REQUEST_ALTS", "AFFIRM_INTENT"}
_VOTERS = 5  # how many nearest templates vote on the intent meant
_NEAR = 0.5  # the least similarity at which a template is trusted over the word rules
_SLOTLESS = ("AFFIRM", "NEGATE", "SELECT", "REQUEST_ALTS", "THANK_YOU", "GOODBYE", "AFFIRM_INTENT", "NEGATE_INTENT")


def _features(text: str) -> set[str]:
    """Words and word pairs of a lower-cased text whose values were replaced by "#"."""
    words = _FEAT.findall(text)
    return set(words) | {a + " " + b for a, b in zip(words, words[1:])}


def _text(template: list) -> str:
    return "".join(p if type(p) is str else "#" for p in template).lower()


def _holes(tokens: tuple[str, ...], template: list) -> tuple[str, ...]:
    """The slot of each value placeholder of a template, in the order the template says them
    (its ints index the values of its tokens in token order; "*" for a slot-generic one)."""
    values: list[str] = []
    for tok in tokens:
        parsed = parse_token(tok)
        if parsed is not None:
            values += [parsed[1]] * parsed[3]
    return tuple(values[p] if p < len(values) else "*" for p in template if type(p) is int)


class _Bank:
    """User templates of one service as idf-weighted features: ``best`` finds the nearest one (cosine)."""

    def __init__(self, entries: list[tuple[tuple[str, ...], list]]) -> None:
        docs: dict[tuple, int] = {}
        for tokens, template in entries:
            text = _text(template)
            feats = frozenset(_features(text))
            if feats:
                key = (feats, tokens, _holes(tokens, template),
                       tuple(p.lower() for p in template if type(p) is str) if len(template) > 1 else None, text)
                docs[key] = docs.get(key, 0) + 1
        # (features, act tokens, value slots in text order, literal parts if any value, text)
        self.docs = list(docs)
        self.count = list(docs.values())  # how many templates read so: of equally near ones the commonest wins
        df: dict[str, int] = {}
        for feats, *_ in self.docs:
            for f in feats:
                df[f] = df.get(f, 0) + 1
        n = len(self.docs)
        self.unknown = math.log(n + 1.0) if n else 1.0  # the weight of a feature no template has
        self.idf = {f: math.log((n + 1.0) / c) + 0.1 for f, c in df.items()}
        self.postings: dict[str, list[int]] = {}
        for k, (feats, *_) in enumerate(self.docs):
            for f in feats:
                self.postings.setdefault(f, []).append(k)
        self.norm = [math.sqrt(sum(self.idf[f] ** 2 for f in feats)) for feats, *_ in self.docs]

    def best(self, feats: set[str], values: list[set[str]]) -> tuple[float, tuple, tuple, tuple | None, str]:
        """The cosine similarity, act tokens, value slots (in text order), literal parts and text of the
        template nearest to ``feats`` (0 and empty tuples if none); of templates as near, one whose
        value slots the found ``values`` (the slots each could fill, in text order) can fill."""
        idf, postings = self.idf, self.postings
        acc: dict[int, float] = {}
        qnorm = 0.0
        for f in feats:
            w = idf.get(f)
            if w is None:
                qnorm += self.unknown ** 2
                continue
            qnorm += w * w
            w2 = w * w
            for k in postings[f]:
                acc[k] = acc.get(k, 0.0) + w2
        if not acc:
            return 0.0, (), (), None, ""
        norm, docs = self.norm, self.docs
        top = max(acc[j] / norm[j] for j in acc)

        def fits(j: int) -> bool:
            holes = docs[j][2]
            return len(holes) == len(values) and all(h == "*" or h in v for h, v in zip(holes, values))

        count = self.count
        k = min((j for j in acc if acc[j] / norm[j] >= top - 1e-9),
                key=lambda j: (not fits(j), -count[j], len(docs[j][1]), j))
        tokens = docs[k][1]
        said = next((t for t in tokens if t.startswith("INFORM_INTENT")), None)
        if said is not None:
            # which intent is meant is voted by the nearest few templates that name one: a single
            # neighbour may differ by one word ("find a table" is a reservation, "find a restaurant" not)
            votes: dict[str, float] = {}
            for j in heapq.nlargest(_VOTERS, acc, key=lambda j: acc[j] / norm[j]):
                for t in docs[j][1]:
                    if t.startswith("INFORM_INTENT"):
                        votes[t] = votes.get(t, 0.0) + acc[j] / norm[j]
            won = max(sorted(votes), key=lambda t: votes[t])
            tokens = tuple(won if t == said else t for t in tokens)
        return acc[k] / (norm[k] * math.sqrt(qnorm)), tokens, docs[k][2], docs[k][3], docs[k][4]


class _Banks(dict):
    """Service name -> its two template banks (``_banks``), built on first use; one per pack (``pack.derive``)."""

    def __init__(self, pack: Any) -> None:
        super().__init__()
        self.pack = pack

    def __missing__(self, name: str) -> tuple[_Bank, _Bank]:
        got = self[name] = _banks(self.pack, name)
        return got


def _banks(pack: Any, name: str) -> tuple[_Bank, _Bank]:
    """The service's template bank and the bank of its templates that name an intent."""
    realizer, schema = pack.realizer, pack.service(name)
    intents = set(schema.intents)
    entries: list[tuple[tuple[str, ...], list]] = []
    for sig, tpls in realizer.signatures("USER", name).items():
        tokens = tuple(sig.split("+"))
        entries += [(tokens, t) for t in tpls]
    # templates seen in several domains (AFFIRM, THANK_YOU, "# please"), and single acts of slots of the
    # same name in other domains
    for tok, tpls in (realizer.generic.get("USER") or {}).items():
        parsed = parse_token(tok)
        if parsed and (parsed[1] in ("", "*") or (names_intents(parsed[0], parsed[1], schema.slots)
                                                     and parsed[2] in intents)):
            entries += [((tok,), t) for t in tpls]
    # an intent act only for this service's intents (Homes_2 has a slot "intent": other services' INFORM_INTENT
    # templates are not templates of that slot)
    for tok, sources in (realizer.by_slot.get("USER") or {}).items():
        parsed = parse_token(tok)
        if parsed and (parsed[2] in intents if names_intents(parsed[0], parsed[1], schema.slots)
                       else parsed[1] in schema.slots):
            entries += [((tok,), t) for src in sorted(sources) for t in sources[src]]
    # the schema-phrased sentences users fall back on ("Any city is fine.", "Make sure pets are allowed.")
    for act in _SLOTLESS:
        entries.append(((act,), builtin_template("USER", schema, Act(act=act))))
    for intent in sorted(intents):
        entries.append(((f"INFORM_INTENT(intent={intent})",),
                        builtin_template("USER", schema, Act(act="INFORM_INTENT", slot="intent", values=[intent]))))
    for slot, spec in schema.slots.items():
        entries.append(((f"REQUEST({slot})",), builtin_template("USER", schema, Act(act="REQUEST", slot=slot))))
        values = ["dontcare"] + (["True", "False"] if set(spec.possible_values) == {"True", "False"} else ["x"])
        for v in values:
            tok = f"INFORM({slot})" if v == "x" else f"INFORM({slot}={v})"
            entries.append(((tok,), builtin_template("USER", schema, Act(act="INFORM", slot=slot, values=[v]))))
    full = _Bank(entries)
    named = _Bank([e for e in entries if any(t.startswith("INFORM_INTENT") for t in e[0])])
    return full, named


class ValueMatcher:
    """Surface-form index over the services of an episode; ``parse`` turns text into acts."""

    def __init__(self, pack: Any, services: list[str]) -> None:
        self.pack = pack
        self.index: dict[str, list[tuple[str, str, str]]] = {}  # service -> [(surface, slot, canonical)]
        # service -> word -> positions in ``index`` of the surfaces keyed by that word (see ``_candidates``)
        self.by_word: dict[str, dict[str, list[int]]] = {}
        self.wordless: dict[str, list[int]] = {}  # service -> positions of surfaces with no word at all
        self.words_of: dict[str, list[frozenset[str]]] = {}  # service -> the words of each surface
        self.intents: dict[str, dict[str, set[str]]] = {}
        self.slot_words: dict[str, dict[str, set[str]]] = {}
        self.search: dict[str, set[str]] = {}
        self.categorical: dict[str, set[str]] = {}
        self.boolean: dict[str, set[str]] = {}
        self.slot_cues: dict[str, dict[str, set[str]]] = {}  # service -> slot -> word beginnings it is asked with  # service -> slots whose values are True/False
        for name in services:
            self._build(name)

    def _build(self, name: str) -> None:
        schema = self.pack.schemas[name]
        entries: dict[tuple[str, str], str] = {}
        args = {s for i in schema["intents"] for s in list(i["required_slots"]) + list(i.get("optional_slots") or {})}
        for slot in schema["slots"]:
            s = slot["name"]
            if s not in args:
                continue
            values = list(slot.get("possible_values") or ())
            try:
                values += [v for v in self.pack.value_pool(name, s) if v not in values]
            except Exception:  # a pack without a pool for this slot: the schema values are all we have
                pass
            for canon in values:
                forms = [canon]
                try:
                    forms += self.pack.spoken_forms(name, s, canon)
                except Exception:
                    pass
                for form in forms:
                    if form and (len(form) > 1 or form.isdigit()) and form.lower() not in ("true", "false", "dontcare"):
                        entries.setdefault((form.lower(), s), canon)
        # longest surfaces first so "San Jose" wins over "Jose"
        self.index[name] = index = sorted(((f, s, c) for (f, s), c in entries.items()), key=lambda e: -len(e[0]))
        # a surface can only occur bounded in a text that has all its words: key each by its longest word
        by_word: dict[str, list[int]] = {}
        wordless: list[int] = []
        words_of: list[frozenset[str]] = []
        for k, (surface, _, _) in enumerate(index):
            ws = frozenset(_WORD.findall(surface))
            words_of.append(ws)
            if ws:
                by_word.setdefault(max(ws, key=lambda w: (len(w), w)), []).append(k)
            else:
                wordless.append(k)
        self.by_word[name], self.wordless[name], self.words_of[name] = by_word, wordless, words_of
        domain = {_stem(w) for w in _DOMAIN_WORDS.get(name.rsplit("_", 1)[0], "").split()}
        self.intents[name] = {i["name"]: _camel_words(i["name"]) | domain for i in schema["intents"]}
        self.search[name] = {i["name"] for i in schema["intents"] if not i.get("is_transactional")}
        self.categorical[name] = {s["name"] for s in schema["slots"] if s.get("is_categorical")}
        self.boolean[name] = {s["name"] for s in schema["slots"] if set(s.get("possible_values") or ()) == {"True", "False"}}
        self.slot_cues[name] = {s["name"]: {w[:5] for w in _WORD.findall(s.get("description", "").lower() + " "
                                                                     + _SLOT_QUESTIONS.get(s["name"].rsplit("_", 1)[-1], ""))
                                            if len(w) > 3 and w not in _COMMON}
                                for s in schema["slots"] if s["name"] in args or not s.get("is_categorical")}
        self.slot_words[name] = {s["name"]: {_stem(w) for w in s["name"].split("_") if len(w) > 2} - _WEAK
                                 for s in schema["slots"]}

    def parse(self, text: str, service: str | None, intent: str | None, last: set[str],
              expecting: list[str], spans: list[tuple[str, SlotSpan]] | None = None) -> list[tuple[str, Act]]:
        """The acts of ``text`` (a user turn), given the current service/intent and the agent's last acts.

        When ``spans`` is given, the (service, span) of every non-categorical value found is appended to it.
        The acts are those of the nearest user template (whole text, else sentence by sentence), their
        values found by matching; a text no template is near enough to is read by the older word rules.
        """
        low = text.lower()
        found: dict[str, list[tuple[int, int, list[tuple[str, str]]]]] = {}
        pieces = [(0, len(low))]
        if len(low) > 1:
            bounds = [m.end() for m in _SENTENCE.finditer(low)]
            if bounds:
                starts = [0] + bounds
                pieces += [(a, b) for a, b in zip(starts, bounds + [len(low)]) if low[a:b].strip()]
        home, opening = service, ()
        if home is None:
            # a first turn names its service by an intent: the intent template nearest the whole turn says which
            first = self._read(low, 0, len(low), None, found)
            home, opening = first[1] or None, tuple(t for t in first[2] if t.startswith("INFORM_INTENT"))
        readings = [self._read(low, a, b, home, found) for a, b in pieces]
        whole, parts = readings[0], readings[1:]
        if len(parts) > 1 and sum(r[0] for r in parts) / len(parts) > whole[0] + 0.05:
            chosen = [r for r in parts if r[0] >= _NEAR]  # a turn said as several templates, one after another
        else:
            chosen = [whole] if whole[0] >= _NEAR else []
        if not chosen:
            return self._rules(text, service, intent, last, expecting, spans)
        service = service or home
        tokens = [t for r in chosen for t in r[2]]
        if not any(t.startswith("INFORM_INTENT") for t in tokens):
            tokens += opening  # "What's the weather in X?" reads best as its values, yet it asks for the weather
        switched = next((r[1] for r in chosen if r[1] != service and any(t.startswith("INFORM_INTENT") for t in r[2])),
                        None)
        name = switched or service or chosen[0][1]
        # a piece's values said where its template says values: the n-th value fills its n-th slot
        fixed: dict[int, str] = {}
        spotted = list(found[name])
        for r in chosen:
            a, b = r[4]
            inside = [s for s, e, _ in found[name] if s >= a and e <= b]
            if len(inside) > len(r[3]):
                # more values than the template says: one its own words say is no value ("does not have
                # adequate vegetarian options" is no vegetarian category)
                said = f" {' '.join(_FEAT.findall(r[6]))} "
                drop = {s for s, e, _ in found[name] if s in inside
                        and f" {' '.join(_FEAT.findall(low[s:e]))} " in said}
                spotted = [v for v in spotted if v[0] not in drop]
                inside = [s for s in inside if s not in drop]
            if len(inside) == len(r[3]):
                fixed.update((s, slot) for s, slot in zip(inside, r[3]) if slot != "*")
            elif r[5] is not None and r[1] == name and len(inside) < len(r[3]):
                extra = self._unmatched(low, a, b, r[3], r[5], inside, name)
                fixed.update((s, opts[0][0]) for s, e, opts in extra)
                spotted = sorted(spotted + extra)
        return self._from_tokens(text, name, tokens, spotted, fixed, last, expecting, spans)

    def _unmatched(self, low: str, a: int, b: int, holes: tuple, parts: tuple, inside: list[int],
                   service: str) -> list[tuple[int, int, list[tuple[str, str]]]]:
        """Values no surface form matched, read off where the template has them ("I am going to
        1030 2nd Street" by "I am going to #."): said as they are, for non-categorical slots."""
        pattern = r"\s*".join(re.escape(p.strip(" .?!,")) + ("(.+?)" if i < len(holes) else "")
                               for i, p in enumerate(parts))
        m = re.fullmatch(r"\W*" + pattern + r"[\s.?!,]*", low[a:b])
        if m is None:
            return []
        out = []
        for i, slot in enumerate(holes):
            s, e = m.start(i + 1) + a, m.end(i + 1) + a
            if slot in self.categorical[service] or slot not in self.slot_words[service] or s in inside:
                continue
            value = low[s:e].strip(" .?!,")
            out.append((s, s + len(value), [(slot, value)]))
        return out

    def _read(self, low: str, a: int, b: int, home: str | None, found: dict) -> tuple:
        """The nearest template to ``low[a:b]``: (score, service, act tokens, value slots, (a, b), literal
        parts, template text); any template of ``home``, of other services only those naming an intent."""
        best: tuple = (0.0, "", (), (), (a, b), None, "")
        for name in ([home] if home else []) + [n for n in self.index if n != home]:
            if name not in found:
                found[name] = self._find(low, name)
            feats = _features(_delex(low, found[name], a, b))
            values = [{o[0] for o in opts} for s, e, opts in found[name] if s >= a and e <= b]
            full, named = self.pack.derive(_Banks)[name]
            score, tokens, holes, parts, said = (full if name == home else named).best(feats, values)
            if name != home:
                score -= 0.05  # a tie stays with the service being talked about
            if score > best[0]:
                best = (score, name, tokens, holes, (a, b), parts, said)
        return best

    def _from_tokens(self, text: str, service: str, tokens: list[str], found: list, fixed: dict[int, str],
                     last: set[str], expecting: list[str],
                     spans: list[tuple[str, SlotSpan]] | None) -> list[tuple[str, Act]]:
        """The acts a template's tokens stand for, read in the light of the agent's last acts; the
        slots of its value placeholders decide between the slots a found value could fill."""
        acts: list[tuple[str, Act]] = []
        prefer: list[str] = []
        seen: set[tuple[str, str]] = set()
        for tok in tokens:
            parsed = parse_token(tok)
            if parsed is None:
                continue
            act, slot, bound, _ = parsed
            if act == "INFORM" and (bound is None or slot == "*"):
                if slot and slot != "*":
                    prefer.append(slot)  # a value placeholder: the value comes from matching
                continue
            act = _in_context(act, last)
            if (act, slot) in seen:
                continue
            seen.add((act, slot))
            if act == "INFORM_INTENT" and bound:
                acts.append((service, Act(act=act, slot="intent", values=[bound], canonical_values=[bound])))
            elif act == "INFORM" and bound and slot in self.slot_words[service]:
                acts.append((service, Act(act=act, slot=slot, values=[bound], canonical_values=[bound])))
            elif act == "REQUEST" and slot in self.slot_words[service]:
                acts.append((service, Act(act=act, slot=slot)))
            elif not slot and act in _SLOTLESS:
                acts.append((service, Act(act=act)))
        if any(a.act in _ONWARD for _, a in acts) or (prefer and found):
            # a user asking for more is not leaving: a goodbye there is the template's, not the user's
            acts = [x for x in acts if x[1].act != "GOODBYE"]
        informed = {a.slot for _, a in acts if a.act == "INFORM"}
        self._pick(text, service, found, prefer + [s for s in expecting if s not in prefer], informed, acts, spans,
                   fixed)
        return acts

    def _rules(self, text: str, service: str | None, intent: str | None, last: set[str],
               expecting: list[str], spans: list[tuple[str, SlotSpan]] | None = None) -> list[tuple[str, Act]]:
        """The acts of ``text`` by word rules: values, intent-name words, yes/no/thanks/bye phrases."""
        low = text.lower()
        words = {_stem(w) for w in _WORD.findall(low)}
        acts: list[tuple[str, Act]] = []
        # a new intent: the intent whose name words the text shares most, if the user sounds like wanting it
        best, best_score, best_service = None, 0.0, service
        # a wish ("I want a table") names an intent; so does a first question ("What's the weather in X?")
        if _WANT.search(low) or (service is None and _ASK.search(low)):
            for name, intents in self.intents.items():
                for iname, iwords in intents.items():
                    # ties go to the current service, then to searches (people look before they book)
                    score = len(iwords & words) + (0.5 if name == service else 0) + (0.25 if iname in self.search[name] else 0)
                    if len(iwords & words) and score > best_score:
                        best, best_score, best_service = iname, score, name
        if best is not None and best_score >= 1 and (best != intent or best_service != service):
            service = best_service
            acts.append((service, Act(act="INFORM_INTENT", slot="intent", values=[best], canonical_values=[best])))
        if service is None:
            return acts
        self._values(text, low, service, expecting, acts, spans)
        if expecting and _ANY.search(low):
            # "any is fine": whatever was asked and not answered, except categorical slots
            for slot in expecting:
                if slot not in self.categorical[service] and not any(a.slot == slot for _, a in acts):
                    acts.append((service, Act(act="INFORM", slot=slot, values=["dontcare"],
                                              canonical_values=["dontcare"])))
        yes, no = bool(_YES.search(low)), bool(_NO.search(low))
        flags = [s for s in expecting if s in self.boolean[service] and not any(a.slot == s for _, a in acts)]
        if flags and "REQUEST" in last and (yes or _OKAY.search(low)) != no:
            # "Do you want a shared ride?" - "That's fine with me": the answer is the flag's value
            value = "False" if no else "True"
            acts += [(service, Act(act="INFORM", slot=s, values=[value], canonical_values=[value])) for s in flags]
            return acts
        if "OFFER_INTENT" in last and (yes or no):
            acts.append((service, Act(act="AFFIRM_INTENT" if yes and not no else "NEGATE_INTENT")))
        elif "OFFER" in last and _ALTS.search(low) and not yes:
            acts.append((service, Act(act="REQUEST_ALTS")))
        elif "OFFER" in last and yes:
            acts.append((service, Act(act="SELECT")))
        elif yes and not no:
            acts.append((service, Act(act="AFFIRM")))
        elif no:
            acts.append((service, Act(act="NEGATE")))
        if _ASK.search(low):
            # a slot is asked about when at least half of its name's words occur in the question
            asked = False
            for slot, sw in self.slot_words[service].items():
                if sw and 2 * len(sw & words) >= len(sw) and not any(a.slot == slot for _, a in acts):
                    acts.append((service, Act(act="REQUEST", slot=slot)))
                    asked = True
            if not asked and not any(a.act == "INFORM" for _, a in acts):
                # else the one slot whose description or usual question words the question shares most
                # ("How humid will it be?" - humidity), word beginnings compared so "humid" meets "humidity"
                heads = {w[:5] for w in words if len(w) > 3}
                scored = sorted(((len(cues & heads), slot) for slot, cues in self.slot_cues[service].items()),
                                reverse=True)
                if scored and scored[0][0] and (len(scored) == 1 or scored[1][0] < scored[0][0]):
                    acts.append((service, Act(act="REQUEST", slot=scored[0][1])))
        if _THANKS.search(low):
            acts.append((service, Act(act="THANK_YOU")))
        if _BYE.search(low):
            acts.append((service, Act(act="GOODBYE")))
        return acts

    def _candidates(self, service: str, low: str) -> list[int]:
        """Positions in ``index`` (in its order) of the surfaces whose words all occur in ``low``: any other
        surface cannot occur there on word boundaries (a bounded occurrence keeps every word of it whole)."""
        by_word = self.by_word.get(service)
        if by_word is None:
            return []
        words = set(_WORD.findall(low))
        words_of = self.words_of[service]
        out = list(self.wordless[service])
        for w in words:
            for k in by_word.get(w, ()):
                if words_of[k] <= words:
                    out.append(k)
        out.sort()
        return out

    def _find(self, low: str, service: str) -> list[tuple[int, int, list[tuple[str, str]]]]:
        """The value spans in ``low`` (longest surfaces first, never overlapping), in text order, each with
        the (slot, canonical value) pairs it could be."""
        found: dict[tuple[int, int], list[tuple[str, str]]] = {}
        taken: list[tuple[int, int]] = []
        index = self.index.get(service, ())
        for k in self._candidates(service, low):
            surface, slot, canon = index[k]
            start = low.find(surface)
            while start >= 0:
                end = start + len(surface)
                bounded = (start == 0 or not low[start - 1].isalnum()) and (end == len(low) or not low[end].isalnum())
                if bounded and not any(s < end and start < e for s, e in taken if (s, e) != (start, end)):
                    found.setdefault((start, end), []).append((slot, canon))
                    taken.append((start, end))
                    break
                start = low.find(surface, start + 1)
        return [(s, e, found[(s, e)]) for s, e in sorted(found)]

    def _values(self, text: str, low: str, service: str, expecting: list[str], acts: list[tuple[str, Act]],
                spans: list[tuple[str, SlotSpan]] | None = None) -> None:
        """INFORM acts for the slot values found in ``low``, ambiguous ones resolved towards ``expecting``."""
        self._pick(text, service, self._find(low, service), expecting, set(), acts, spans)

    def _pick(self, text: str, service: str, found: list, prefer: list[str], used: set[str],
              acts: list[tuple[str, Act]], spans: list[tuple[str, SlotSpan]] | None,
              fixed: dict[int, str] | None = None) -> None:
        """An INFORM act per found value, for its slot in ``fixed`` (by start) if it can fill it, else the
        first slot of ``prefer`` it can fill, else any; a slot is filled once (``used``: already filled)."""
        used = set(used)
        for start, end, options in found:
            want = fixed.get(start) if fixed else None
            pick = next((o for o in options if o[0] == want and want not in used), None) if want else None
            pick = pick or next((o for s in prefer for o in options if o[0] == s and s not in used), None)
            pick = pick or next((o for o in options if o[0] not in used), None)
            if pick is None:
                continue
            used.add(pick[0])
            acts.append((service, Act(act="INFORM", slot=pick[0], values=[text[start:end]],
                                      canonical_values=[pick[1]])))
            if spans is not None and pick[0] not in self.categorical[service]:
                spans.append((service, SlotSpan(slot=pick[0], start=start, exclusive_end=end)))


def _delex(low: str, found: list, a: int, b: int) -> str:
    """``low[a:b]`` with the values found in it replaced by "#", as the templates have them."""
    out, pos = [], a
    for s, e, _ in found:
        if s >= a and e <= b:
            out += [low[pos:s], " # "]
            pos = e
    out.append(low[pos:b])
    return "".join(out)


def _in_context(act: str, last: set[str]) -> str:
    """A yes or no as the agent's last turn makes it: to an offered intent it takes or refuses the
    intent, to an offer it takes the offer; an intent yes/no without an intent offer is a plain one."""
    if "CONFIRM" in last:
        return {"SELECT": "AFFIRM", "AFFIRM_INTENT": "AFFIRM", "NEGATE_INTENT": "NEGATE"}.get(act, act)
    if "OFFER_INTENT" in last:
        return {"AFFIRM": "AFFIRM_INTENT", "SELECT": "AFFIRM_INTENT", "NEGATE": "NEGATE_INTENT"}.get(act, act)
    if "OFFER" in last:
        return {"AFFIRM": "SELECT", "AFFIRM_INTENT": "SELECT"}.get(act, act)
    return {"AFFIRM_INTENT": "AFFIRM", "NEGATE_INTENT": "NEGATE"}.get(act, act)
