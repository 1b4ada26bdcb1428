"""A value-matching understanding step: SGD dialogue acts from a user's text, for turns without frames.

It finds the values of a service's slots in the text (schema possible_values, the pack's entity values
and every surface form the pack knows, longest match first, on word boundaries), guesses a new intent
from the words of intent names, and maps yes/no/thanks/bye/alternatives phrases to acts, reading them in
the light of what the agent said last (a "yes" after CONFIRM is AFFIRM, after OFFER it is SELECT, after
OFFER_INTENT it is AFFIRM_INTENT). Crude next to a trained NLU, but enough to run the rule agent against
users that send only text (LLM users, HTTP clients).
"""

from __future__ import annotations

import re
from typing import Any

from ..engine.events import Act, SlotSpan

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
        """
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

    def _values(self, text: str, low: str, service: str, expecting: list[str], acts: list[tuple[str, Act]],
                spans: list[tuple[str, SlotSpan]] | None = None) -> None:
        """INFORM acts for the slot values found in ``low``, ambiguous ones resolved towards ``expecting``."""
        found: dict[str, list[tuple[str, str]]] = {}
        taken: list[tuple[int, int]] = []
        index = self.index.get(service, ())
        for k in self._candidates(service, low):
            surface, slot, canon = index[k]
            start = low.find(surface)
            while start >= 0:
                end = start + len(surface)
                bounded = (start == 0 or not low[start - 1].isalnum()) and (end == len(low) or not low[end].isalnum())
                if bounded and not any(s < end and start < e for s, e in taken if (s, e) != (start, end)):
                    found.setdefault(f"{start}:{end}", []).append((slot, canon))
                    taken.append((start, end))
                    break
                start = low.find(surface, start + 1)
        used: set[str] = set()
        for key in sorted(found, key=lambda k: int(k.split(":")[0])):
            options = found[key]
            start, end = (int(x) for x in key.split(":"))
            pick = next((o for o in options if o[0] in expecting and o[0] not in used), None)
            pick = pick or next((o for o in options if o[0] not in used), None)
            if pick is None:
                continue
            used.add(pick[0])
            acts.append((service, Act(act="INFORM", slot=pick[0], values=[text[start:end]],
                                      canonical_values=[pick[1]])))
            if spans is not None and pick[0] not in self.categorical[service]:
                spans.append((service, SlotSpan(slot=pick[0], start=start, exclusive_end=end)))

