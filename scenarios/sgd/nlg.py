"""Template NLG for SGD acts: mined, delexicalised templates keyed by the act signature of one frame.

A template is a list of parts: literal strings and ints, an int being the index of an act value in the
signature's placeholder order (acts sorted by token, values in order). Values rendered by meaning rather
than literally (the intent named by INFORM_INTENT-style acts, True/False/dontcare) are part of the token,
so they have no placeholder.
Lookup order for a signature: the service's bank, then its domain's bank (services sharing the domain name,
which share slot names); else a composition of per-act groups, each looked up the same way, then act by
act in the service and domain banks, in the borrowed bank (single-act templates of other domains free of
their domain's words, for a slot of the same name and a similar description), in the generic bank
(templates seen in several domains, with no slot-specific words) and finally as a sentence phrased from
the schema's descriptions. When a signature has few exact templates, composed wordings are mixed in.
"""

from __future__ import annotations

import random
import re
from typing import Any, Callable, Sequence

from ...engine.events import Act, SlotSpan
from ...engine.memo import IdentityMemo
from .schema import ServiceSchema

BOUND_VALUES = frozenset({"True", "False", "dontcare"})
# The user's first turn: USER templates, minus those mined from later turns that lean on an earlier one.
OPENING = "USER_OPENING"
_NONE: frozenset[str] = frozenset()
Template = list  # list[str | int]

# Order in which composed groups are spoken, per speaker (acts not listed go last).
_ORDER = {
    "SYSTEM": ["NOTIFY_FAILURE", "NOTIFY_SUCCESS", "CONFIRM", "INFORM", "INFORM_COUNT", "OFFER", "REQUEST",
               "OFFER_INTENT", "REQ_MORE", "GOODBYE"],
    "USER": ["AFFIRM", "NEGATE", "AFFIRM_INTENT", "NEGATE_INTENT", "SELECT", "INFORM_INTENT", "INFORM",
             "REQUEST_ALTS", "REQUEST", "THANK_YOU", "GOODBYE"],
}


def act_token(act: str, slot: str, values: Sequence[str]) -> tuple[str, bool]:
    """The signature token of one act and whether its values are placeholders (else bound into the token)."""
    if not slot:
        return act, False
    if not values:
        return f"{act}({slot})", False
    if act.endswith("_INTENT") or not BOUND_VALUES.isdisjoint(values):
        return f"{act}({slot}={'|'.join(values)})", False
    if len(values) == 1 and act != "REQUEST":
        return f"{act}({slot})", True
    return f"{act}({slot}*{len(values)})", True


def parse_token(tok: str) -> tuple[str, str, str | None, int] | None:
    """A signature token read back, the inverse of ``act_token`` and ``generic_token``: its act, its slot ("*"
    in a generic token), its bound values joined by "|" or None, and how many value placeholders it has;
    None if it is malformed."""
    if "(" not in tok:
        return tok, "", None, 0
    if not tok.endswith(")"):
        return None
    act, inside = tok[:-1].split("(", 1)
    if "=" in inside:
        slot, bound = inside.split("=", 1)
        return act, slot, bound, 0
    if inside == "*" or "*" not in inside:
        return act, inside, None, 0 if act == "REQUEST" else 1
    slot, _, n = inside.partition("*")
    if not slot:  # generic: "*v" one value, "*x2" two
        slot, n = "*", "1" if n == "v" else n[1:] if n[:1] == "x" else ""
    return (act, slot, None, int(n)) if n.isdigit() else None


class _Memo(dict):
    """key -> ``compute(key)``, computed on first use; emptied when it outgrows ``limit`` (a bound on memory)."""

    def __init__(self, compute: Callable[[Any], Any], limit: int = 100_000) -> None:
        super().__init__()
        self.compute, self.limit = compute, limit

    def __missing__(self, key: Any) -> Any:
        if len(self) > self.limit:
            self.clear()
        value = self[key] = self.compute(key)
        return value


def _shape_token(key: tuple[str, str, int]) -> str | None:
    """The token of an act (act, slot, number of values) whose values are all literal (no True, False or
    dontcare); None for an intent act, whose values are part of its token."""
    act, slot, n = key
    return None if n and slot and act.endswith("_INTENT") else act_token(act, slot, ("",) * n)[0]


def _tokens_by_act_then_slot(n: int) -> _Memo:
    """act -> slot -> the token of an act with ``n`` literal values: two lookups by string, no tuple per act."""
    return _Memo(lambda act: _Memo(lambda slot: _SHAPES[(act, slot, n)]))


# (act, slot, *values) -> token; bound values and intents only: a few hundred keys
_TOKENS = _Memo(lambda key: act_token(key[0], key[1], key[2:])[0])
# a few hundred keys too, where keys with the values' words would be tens of thousands
_SHAPES = _Memo(_shape_token)
_NO_VALUE = _tokens_by_act_then_slot(0)  # the most common shapes first: acts without values...
_ONE_VALUE = _tokens_by_act_then_slot(1)  # ...and with one literal value


def _token(a: Any) -> str:
    # literal values shape a token by their number alone: keyed so, the cache stays small and hot
    values = a.values
    if not values:
        return _NO_VALUE[a.act][a.slot]
    if len(values) == 1:
        tok = _ONE_VALUE[a.act][a.slot] if values[0] not in BOUND_VALUES else None
    else:
        tok = _SHAPES[(a.act, a.slot, len(values))] if BOUND_VALUES.isdisjoint(values) else None
    return tok if tok is not None else _TOKENS[(a.act, a.slot, *values)]


def signature(acts: Sequence[Any]) -> tuple[str, list[int]]:
    """The signature string of a frame's acts and the act indices in signature (sorted token) order."""
    if len(acts) == 1:
        return _token(acts[0]), [0]
    toks = sorted([(_token(a), i) for i, a in enumerate(acts)])
    return "+".join([t for t, _ in toks]), [i for _, i in toks]


def _phrase(svc: ServiceSchema | None, slot: str) -> str:
    """A noun phrase for a slot: its schema description, lower-case start, no leading article; else its name."""
    desc = svc.slots[slot].description if svc is not None and slot in svc.slots else ""
    text = desc.strip().rstrip(".") or slot.replace("_", " ")
    text = text[:1].lower() + text[1:]
    for lead in ("boolean flag ", "flag ", "indicating ", "denoting ", "denotes ", "for "):
        if text.startswith(lead):
            text = text[len(lead):]
    for article in ("the ", "a ", "an "):
        if text.startswith(article):
            return text[len(article):]
    return text


_VERB = re.compile(r"\b(is|are|has|have|serves|offers|arrives|allows|includes)\b")


def _bound_sentence(speaker: str, act: str, ph: str, value: str) -> str:
    """A sentence for a yes/no/any value of a slot described as "whether X" ("if pets are allowed")."""
    question = re.match(r"(whether or not|whether|if) (.+?)( or not)?$", ph)
    if question is None:
        word = {"True": "yes", "False": "no"}.get(value)
        return f"Any {ph} is fine." if word is None else f"{ph[:1].upper()}{ph[1:]}: {word}."
    clause = question.group(2)
    if value not in ("True", "False"):  # dontcare
        return f"I don't mind whether {clause}." if speaker == "USER" else f"Whether {clause} does not matter."
    if clause.startswith("to "):  # "whether to purchase insurance"
        if speaker == "USER":
            return f"I {'want' if value == 'True' else 'do not want'} {clause}."
        said = f"you {'want' if value == 'True' else 'do not want'} {clause}."
        return f"Please confirm that {said}" if act == "CONFIRM" else said[:1].upper() + said[1:]
    if value == "False":
        verb = _VERB.search(clause)
        if verb is None:
            return f"{clause[:1].upper()}{clause[1:]}: no."
        word = verb.group(1)
        negated = f"{word} not" if word in ("is", "are") else f"do not {word}" if word == "have" else \
            "does not have" if word == "has" else f"does not {word[:-1]}"
        clause = clause[:verb.start()] + negated + clause[verb.end():]
    if speaker == "USER":
        return f"Make sure {clause}."
    if act == "CONFIRM":
        return f"Please confirm that {clause}."
    return f"{clause[:1].upper()}{clause[1:]}."


def nameish(slot: str) -> bool:
    """Whether a slot holds the name of the thing itself (a restaurant's name, a song's title)."""
    return slot.endswith("name") or slot.endswith("title") or slot in ("artist", "song", "album", "director")


def _intent_phrase(svc: ServiceSchema | None, intent: str) -> str:
    """A verb phrase for an intent from its description ("find a restaurant"), else its name in words."""
    desc = svc.intents[intent].description if svc is not None and intent in svc.intents else ""
    if desc:
        return desc.strip().rstrip(".")[:1].lower() + desc.strip().rstrip(".")[1:]
    words = "".join(" " + c.lower() if c.isupper() else c for c in intent).strip()
    return words


def builtin_template(speaker: str, svc: ServiceSchema | None, act: Act) -> Template:
    """A plain template for one act, rendered from the schema's descriptions (the last-resort fallback)."""
    a, slot, vals = act.act, act.slot, act.values
    if a.endswith("_INTENT") and slot:
        ip = _intent_phrase(svc, vals[0] if vals else "")
        return {"INFORM_INTENT": [f"I want to {ip}."], "OFFER_INTENT": [f"Would you like to {ip}?"],
                "AFFIRM_INTENT": [f"Yes, I want to {ip}."], "NEGATE_INTENT": [f"No, I don't want to {ip}."]
                }.get(a, [f"{ip[:1].upper()}{ip[1:]}."])
    if not slot:
        text = {("SYSTEM", "NOTIFY_SUCCESS"): "That is done.", ("SYSTEM", "NOTIFY_FAILURE"): "Sorry, that did not work.",
                ("SYSTEM", "REQ_MORE"): "Can I help with anything else?", ("SYSTEM", "GOODBYE"): "Goodbye.",
                ("USER", "AFFIRM"): "Yes.", ("USER", "NEGATE"): "No.", ("USER", "SELECT"): "That one works.",
                ("USER", "REQUEST_ALTS"): "What else is there?", ("USER", "THANK_YOU"): "Thank you.",
                ("USER", "GOODBYE"): "Goodbye.", ("USER", "AFFIRM_INTENT"): "Yes, please.",
                ("USER", "NEGATE_INTENT"): "No, thanks."}.get((speaker, a), a.replace("_", " ").capitalize() + ".")
        return [text]
    ph = _phrase(svc, slot)
    if vals and any(v in BOUND_VALUES for v in vals):
        return [_bound_sentence(speaker, a, ph, vals[0])]
    if not vals:
        if ph.startswith("whether") or ph.startswith("if "):
            return [f"Could you tell me {ph}?"] if speaker == "SYSTEM" else [f"Can you tell me {ph}?"]
        return [f"Could you tell me the {ph}?"] if speaker == "SYSTEM" else [f"What is the {ph}?"]
    if len(vals) > 1:
        parts: Template = [f"For the {ph}, "]
        for k in range(len(vals)):
            parts += ([", ", k] if 0 < k < len(vals) - 1 else [" or ", k] if k else [k])
        return parts + ["?"]
    if a == "OFFER" and speaker == "SYSTEM" and nameish(slot):
        return ["How about ", 0, "?"]
    lead = {("SYSTEM", "CONFIRM"): f"Please confirm the {ph}: ", ("SYSTEM", "OFFER"): f"The {ph} is ",
            ("USER", "REQUEST"): f"Is the {ph} ", ("USER", "SELECT"): f"I'll take this {ph}: ",
            ("SYSTEM", "REQUEST"): f"Should the {ph} be ",  # a system REQUEST with a value proposes it
            ("SYSTEM", "INFORM_COUNT"): "I found "}.get((speaker, a), f"The {ph} is ")
    tail = {("USER", "REQUEST"): "?", ("SYSTEM", "REQUEST"): "?", ("SYSTEM", "INFORM_COUNT"): " results."}
    return [lead, 0, tail.get((speaker, a), ".")]


def _listable(speaker: str, act: Act) -> bool:
    """Whether a fallback act can join a list ("the x is A, the y is B"): one literal value, no name offer."""
    if act.act == "REQUEST" and not act.values and act.slot:
        return True
    return (len(act.values) == 1 and act.values[0] not in BOUND_VALUES and not act.act.endswith("_INTENT")
            and act.slot not in ("", "count") and (speaker, act.act) in _LIST_LEADS
            and not (act.act == "OFFER" and nameish(act.slot)))


_LIST_LEADS = {("SYSTEM", "CONFIRM"): ("Please confirm: ", "."), ("SYSTEM", "INFORM"): ("", "."),
               ("SYSTEM", "OFFER"): ("", "."), ("USER", "INFORM"): ("I'd like ", ".")}


def builtin_list(speaker: str, svc: ServiceSchema | None, acts: list[Act]) -> Template:
    """One sentence for several fallback acts of one kind: "Please confirm: the x is A and the y is B."""
    if acts[0].act == "REQUEST":
        names = [_phrase(svc, a.slot) for a in acts]
        names = [n if n.startswith(("whether", "if ")) else f"the {n}" for n in names]
        said = ", ".join(names[:-1]) + " and " + names[-1]
        return [f"Could you tell me {said}?" if speaker == "SYSTEM" else f"Can you tell me {said}?"]
    lead, end = _LIST_LEADS[(speaker, acts[0].act)]
    user = speaker == "USER"
    parts: Template = [lead]
    for k, a in enumerate(acts):
        if k:
            parts.append(" and " if k == len(acts) - 1 else ", ")
        ph = _phrase(svc, a.slot)
        parts += [f"the {ph} to be " if user else f"the {ph} is ", k]
    parts.append(end)
    if not lead:
        parts[1] = parts[1][:1].upper() + parts[1][1:]
    return parts


# A template bound to a group's acts: (first literal, steps), a step being (act of the group, value index,
# span slot or None, the literal after the value, its number agreement or None); see _bind
_Bound = tuple  # tuple[str, tuple[tuple[int, int, str | None, str, tuple[str, str] | None], ...]]
# A group of acts said together: (the signature positions of its acts, its bound templates)
_Group = tuple  # tuple[tuple[int, ...], list[_Bound]]


class _Plan:
    """Resolved ways to realize one signature: alternatives (each a list of groups) with weights.

    Two alternatives at most (exact wordings, composed ones); ``realize`` picks one by ``cum``. A group is
    (the signature positions of its acts, its bound templates); see ``_bind_all``.
    """

    __slots__ = ("alternatives", "cum")

    def __init__(self, alternatives: list[list[_Group]], weights: list[int]):
        self.alternatives = alternatives
        self.cum = [sum(weights[: k + 1]) for k in range(len(weights))]


class Realizer:
    """Fills mined templates for act signatures; see the module docstring for the lookup order."""

    def __init__(self, banks: dict[str, dict[str, dict[str, list[Template]]]],
                 generic: dict[str, dict[str, list[Template]]], services: dict[str, ServiceSchema],
                 by_slot: dict[str, dict[str, dict[str, list[Template]]]] | None = None, min_variety: int = 6,
                 rich: int = 8):
        self.banks = banks  # speaker -> service -> signature -> templates
        self.generic = generic  # speaker -> generic token -> templates
        self.by_slot = by_slot or {}  # speaker -> single-act token -> source service -> domain-free templates
        self.services = services
        self.min_variety = min_variety
        self.rich = rich  # exact wordings below which composed ones are mixed in
        self._domain: dict[tuple[str, str], dict[str, list[Template]]] = {}
        self._plans: dict[tuple[str, str, str], _Plan] = {}
        # bound templates, shared by every plan that says the same signature or act (a group of a composed
        # plan is mostly one act, said in many plans): binding them is most of the cost of a new plan
        self._wordings: dict[tuple[str, str, str], list[_Bound]] = {}  # (speaker, service, signature)
        self._singles: dict[tuple[str, str, str, bool], list[_Bound] | None] = {}  # (speaker, service, token, worded)
        self._openers = IdentityMemo(limit=100_000)  # a list of bound templates -> its standalone ones
        # (speaker, service, act tokens in the caller's order) -> (alternatives with the caller's act indices,
        # cumulative weights, its wordings when it places no value): no sort or join per call
        self._fast: dict[tuple, tuple[list[list[tuple[tuple[int, ...], list[_Bound]]]], list[int],
                                      list[str] | None]] = {}
        self._noncat: dict[str, frozenset[str]] = {
            name: frozenset(s for s, ss in svc.slots.items() if not ss.is_categorical) for name, svc in services.items()}

    def domain_bank(self, speaker: str, service: str) -> dict[str, list[Template]]:
        """The templates of the domain's other services, translated into this service's slots and intents."""
        key = (speaker, service)
        bank = self._domain.get(key)
        if bank is None:
            domain = service.rsplit("_", 1)[0]
            bank = {}
            target = self.services.get(service)
            for other, sigs in sorted(self.banks.get(speaker, {}).items()):
                if other == service or other.rsplit("_", 1)[0] != domain:
                    continue
                source = self.services.get(other)
                if target is None or source is None:
                    continue
                slots, intents = _slot_map(source, target), _intent_map(source, target)
                for sig, tpls in sigs.items():
                    got = _translate(sig, slots, intents)
                    if got is not None:
                        new_sig, perm = got
                        bank.setdefault(new_sig, []).extend(
                            [[perm[p] if isinstance(p, int) else p for p in t] for t in tpls])
            self._domain[key] = bank
        return bank

    def _lookup(self, speaker: str, service: str, sig: str) -> list[Template]:
        own = self.banks.get(speaker, {}).get(service, {}).get(sig, [])
        if len(own) >= self.min_variety:
            return own
        return own + self.domain_bank(speaker, service).get(sig, [])

    def borrowed(self, speaker: str, service: str, slot: str, tok: str) -> list[Template]:
        """Templates of other domains' slots of the same name that mean the same (similar descriptions)."""
        out: list[Template] = []
        target = self.services.get(service)
        for source, tpls in sorted(self.by_slot.get(speaker, {}).get(tok, {}).items()):
            other = self.services.get(source)
            if tok.split("(", 1)[0].endswith("_INTENT") or (target is not None and other is not None and slot in target.slots
                                    and slot in other.slots and _similar(target.slots[slot].description,
                                                                         other.slots[slot].description)):
                out.extend(tpls)
        return out

    def _found(self, speaker: str, service: str, sig: str, acts: Sequence[Act]) -> list[_Bound]:
        """The mined wordings of a signature (``_lookup``) bound to its acts, given in signature order."""
        key = (speaker, service, sig)
        got = self._wordings.get(key)
        if got is None:
            got = self._wordings[key] = _bind_all(acts, self._lookup(speaker, service, sig),
                                                  self._noncat.get(service, _NONE))
        return got

    def _single(self, speaker: str, service: str, act: Act, worded: bool) -> list[_Bound] | None:
        """The bound wordings of one act said in a composition (only those with words besides the value when
        ``worded``): mined, borrowed, generic, else schema-phrased; None when it joins a schema-phrased list."""
        tok = act_token(act.act, act.slot, act.values)[0]
        key = (speaker, service, tok, worded)
        if key in self._singles:
            return self._singles[key]
        keep = _worded if worded else _every
        tpls = (keep(self._lookup(speaker, service, tok))
                or keep(self.borrowed(speaker, service, act.slot, tok))
                or keep(self.generic.get(speaker, {}).get(generic_token(act), [])))
        if not tpls and not _listable(speaker, act):
            tpls = [builtin_template(speaker, self.services.get(service), act)]
        got = self._singles[key] = _bind_all([act], tpls, self._noncat.get(service, _NONE)) if tpls else None
        return got

    def _composed(self, speaker: str, service: str, acts: Sequence[Act], order: list[int]) -> list[_Group]:
        """Groups of acts of one kind (each looked up whole, else act by act) in a natural speaking order."""
        pos_of = {i: k for k, i in enumerate(order)}
        rank = {a: k for k, a in enumerate(_ORDER.get(speaker, []))}
        noncat = self._noncat.get(service, _NONE)
        by_act: dict[str, list[int]] = {}
        for i in order:
            by_act.setdefault(acts[i].act, []).append(i)
        groups: list[_Group] = []
        for act_name in sorted(by_act, key=lambda a: rank.get(a, len(rank))):
            idx = by_act[act_name]
            if len(idx) > 1:
                sub, sub_order = signature([acts[i] for i in idx])
                bound = self._found(speaker, service, sub, [acts[idx[k]] for k in sub_order])
                if bound:
                    groups.append((tuple(pos_of[idx[k]] for k in sub_order), bound))
                    continue
            if len(idx) > 2:  # all but one act may have been said together: say the odd one apart
                for odd in idx:
                    rest = [i for i in idx if i != odd]
                    sub, sub_order = signature([acts[i] for i in rest])
                    bound = self._found(speaker, service, sub, [acts[rest[k]] for k in sub_order])
                    if bound:
                        groups.append((tuple(pos_of[rest[k]] for k in sub_order), bound))
                        idx = [odd]
                        break
            if act_name == "OFFER":  # the entity's name first, as real systems do
                idx = sorted(idx, key=lambda i: not nameish(acts[i].slot))
            plain: list[int] = []  # acts left to the schema-phrased fallback, said together
            # a bare value ("2.") answers a question; next to other acts it reads as a stray number
            for i in idx:
                bound = self._single(speaker, service, acts[i], len(order) > 1)
                if bound is None:
                    plain.append(i)
                else:
                    groups.append(((pos_of[i],), bound))
            if len(plain) == 1:
                template = builtin_template(speaker, self.services.get(service), acts[plain[0]])
                groups.append(((pos_of[plain[0]],), _bind_all([acts[plain[0]]], [template], noncat)))
            elif plain:
                template = builtin_list(speaker, self.services.get(service), [acts[i] for i in plain])
                groups.append((tuple(pos_of[i] for i in plain), _bind_all([acts[i] for i in plain], [template], noncat)))
        return groups

    def _plan(self, speaker: str, service: str, acts: Sequence[Act], sig: str, order: list[int]) -> _Plan:
        if speaker == OPENING:  # the user's plan, with the wordings that open a dialogue well
            key = ("USER", service, sig)
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = self._plan("USER", service, acts, sig, order)
            return _Plan([[(pos, self._standalone(tpls)) for pos, tpls in groups] for groups in plan.alternatives],
                         [plan.cum[0]] + [b - a for a, b in zip(plan.cum, plan.cum[1:])])
        found = self._found(speaker, service, sig, [acts[i] for i in order])
        if not found:
            return _Plan([self._composed(speaker, service, acts, order)], [1])
        exact = [(tuple(range(len(order))), found)]
        if len(acts) > 1 and len(found) < self.rich:
            # few exact wordings: mix in composed ones too, for variety
            return _Plan([exact, self._composed(speaker, service, acts, order)], [len(found), self.rich - len(found)])
        return _Plan([exact], [1])

    def _standalone(self, tpls: list[_Bound]) -> list[_Bound]:
        """The bound templates that open a dialogue well (all of them when none does), once per list."""
        def build() -> list[_Bound]:
            kept = [t for t in tpls if not _FOLLOWS_UP[" _ ".join([t[0], *(step[3] for step in t[1])]).strip()]]
            return kept or tpls

        return self._openers.get((tpls,), build)

    def realize(self, speaker: str, service: str, acts: list[Act], rng: random.Random) -> tuple[str, list[SlotSpan]]:
        """The utterance for one frame's acts and the spans of the non-categorical values placed in it."""
        fast = (speaker, service, _token(acts[0])) if len(acts) == 1 else (speaker, service, *[_token(a) for a in acts])
        got = self._fast.get(fast)
        if got is None:
            # the plan depends on the signature alone; ``order`` maps its positions onto these acts
            sig, order = signature(acts)
            key = (speaker, service, sig)
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = self._plan(speaker, service, acts, sig, order)
            if len(self._fast) > 200_000:
                self._fast.clear()
            # each group's signature positions as indices of these acts
            alts = [[(tuple([order[p] for p in pos]), tpls) for pos, tpls in groups] for groups in plan.alternatives]
            got = self._fast[fast] = (alts, plan.cum, _literals(plan))
        alternatives, cum, literals = got
        if literals is not None:  # no value to place (most turns): one of the wordings as it is
            n = len(literals)
            return literals[int(rng.random() * n)] if n > 1 else literals[0], []
        # one alternative by weight: a draw only when there is a choice
        groups = (alternatives[0] if len(alternatives) == 1 or rng.random() * cum[-1] < cum[0]
                  else alternatives[1])
        out: list[str] = []
        spans: list[SlotSpan] = []
        pos = 0
        for idx, tpls in groups:
            if out:  # groups are said one after another
                out.append(" ")
                pos += 1
            n = len(tpls)
            lit, steps = tpls[int(rng.random() * n)] if n > 1 else tpls[0]
            out.append(lit)
            pos += len(lit)
            for k, j, span, lit, agree in steps:
                v = acts[idx[k]].values[j]
                end = pos + len(v)
                if span is not None:
                    spans.append(SlotSpan(slot=span, start=pos, exclusive_end=end))
                if agree is not None:  # "1 people" -> "1 person", "4 ticket" -> "4 tickets"
                    if v in _ONE:
                        lit = agree[0]
                    elif v.isdigit() or v.lower() in _MANY:
                        lit = agree[1]
                out += (v, lit)
                pos = end + len(lit)
        return "".join(out), spans

    def signatures(self, speaker: str, service: str) -> dict[str, list[Template]]:
        """Every mined template this service can speak with, by signature: its own bank, then its domain's."""
        out = {sig: list(tpls) for sig, tpls in self.banks.get(speaker, {}).get(service, {}).items()}
        for sig, tpls in self.domain_bank(speaker, service).items():
            out.setdefault(sig, []).extend(tpls)
        return out


def _literals(plan: _Plan) -> list[str] | None:
    """The wordings of a plan that places no value (one way to say it, without placeholders), else None."""
    if len(plan.alternatives) == 1 and len(plan.alternatives[0]) == 1:
        tpls = plan.alternatives[0][0][1]
        if not any(steps for _, steps in tpls):
            return [lit for lit, _ in tpls]
    return None


# Words that only make sense after something was said: "I also need a cab to get there", "Yes. ...".
_OPENERS = ("yes", "yeah", "yep", "okay", "ok", "great", "perfect", "sounds good", "thanks", "thank you", "no", "nope",
            "cool", "alright")
_FOLLOW_UP = re.compile(
    r"\b(?:also|too|as well|another|the same|same (?:day|place|city|area|time)"
    r"|th(?:at|is) (?:area|place|city|location|day|date|time|one|restaurant|hotel|event|movie|property)"
    r"|(?<!hi )(?<!hey )(?<!hello )(?<!is )(?<!are )there\b(?! (?:is|are|any|a|an)\b))"
    r"|^\W*(?:%s)\b" % "|".join(_OPENERS), re.I)
# A match of _FOLLOW_UP in ASCII text holds one of these clues (lower-cased) or starts with an opener: a text
# without them needs no search, which tries every alternative at every position
_CLUES = ("also", "too", "as well", "another", "same", "that ", "this ", "there")
_NON_WORD = "".join(c for c in map(chr, range(128)) if not (c.isalnum() or c == "_"))


def _follows_up(text: str) -> bool:
    if text.isascii():
        low = text.lower()
        if not any(clue in low for clue in _CLUES) and not low.lstrip(_NON_WORD).startswith(_OPENERS):
            return False
    return _FOLLOW_UP.search(text) is not None


_FOLLOWS_UP = _Memo(_follows_up)  # wording -> whether it leans on an earlier turn


def _every(tpls: list[Template]) -> list[Template]:
    return tpls


def _worded(tpls: list[Template]) -> list[Template]:
    """The templates that say something besides their values (a letter in a literal part)."""
    return [t for t in tpls if any(type(part) is str and any(c.isalpha() for c in part) for part in t)]


def _bind_all(acts: Sequence[Act], tpls: list[Template], noncat: frozenset[str]) -> list[_Bound]:
    """Templates for a group of acts compiled and bound to its placeholders; a step names its act by its
    place in ``acts`` (a plan maps the group's places onto the acts it realizes)."""
    holes = []  # per placeholder: (act of the group, value index, the slot when its value gets a span)
    for k, a in enumerate(acts):
        if act_token(a.act, a.slot, a.values)[1]:
            span = a.slot if a.slot in noncat else None
            holes.extend((k, j, span) for j in range(len(a.values)))
    return [_bind(t, holes) for t in tpls]


def _bind(template: Template, holes: list[tuple[int, int, str | None]]) -> _Bound:
    """A template bound once to its group's placeholders: the first literal, then per placeholder (act of the
    group, value index, span slot or None, the literal after it, its number agreement or None), so that
    filling it takes one step per value."""
    lits = [""]
    refs = []
    for part in template:
        if isinstance(part, int):
            refs.append(part)
            lits.append("")
        else:
            lits[-1] += part
    if not refs:  # most templates: a literal only
        return lits[0], ()
    return lits[0], tuple([(*holes[ref], lit, _AGREEMENT[lit]) for ref, lit in zip(refs, lits[1:])])


_ONE = frozenset(("1", "one", "One", "a single"))
_MANY = frozenset("two three four five six seven eight nine ten eleven twelve".split())
_NOUNS = {"people": ("person", "people"), "person": ("person", "people"), "persons": ("person", "people")}
for _w in ("ticket", "seat", "room", "passenger", "adult", "rider", "traveler", "traveller", "day", "night", "bag",
           "guest", "bed", "bath", "stop", "transfer", "layover", "bedroom", "bathroom", "movie", "film", "flight",
           "event", "song", "show", "option", "result", "restaurant", "hotel", "house", "apartment",
           "place", "car", "train", "trip", "attraction", "doctor", "dentist", "stylist", "salon"):
    _NOUNS[_w] = _NOUNS[_w + "s"] = (_w, _w + "s")
_NOUNS.update(bus=("bus", "buses"), buses=("bus", "buses"), property=("property", "properties"),
              properties=("property", "properties"))
_COUNTED = re.compile(r"( )(%s)\b" % "|".join(sorted(_NOUNS, key=len, reverse=True)), re.I)


def counted_forms(lit: str) -> tuple[str, str] | None:
    """The singular and plural variants of a literal after a value that starts with a counted noun ("_ people"),
    so that the mined wording of "for 4 people" says "for 1 person"; None for any other literal."""
    m = _COUNTED.match(lit)
    if m is None:
        return None
    one, many = _NOUNS[m.group(2).lower()]
    if m.group(2)[:1].isupper():
        one, many = one.capitalize(), many.capitalize()
    rest = lit[m.end():]
    return f" {one}{rest}", f" {many}{rest}"


_AGREEMENT = _Memo(counted_forms)  # literals repeat (".", " tonight?") and matching one is the costly part of a bind


def _slot_map(source: ServiceSchema, target: ServiceSchema) -> dict[str, str]:
    """Source slot -> target slot of the same meaning: same name, or a similar description, same kind of slot."""
    from .values import slot_kind

    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in source.slots:
        if name in target.slots:
            out[name] = name
            taken.add(name)
    def words(spec: Any) -> set[str]:
        return _words(f"{spec.name.replace('_', ' ')} {spec.description}")

    # words most slots of either service mention ("car", "movie") or that only name a kind ("date") tell nothing
    seen: dict[str, int] = {}
    for spec in list(source.slots.values()) + list(target.slots.values()):
        for w in words(spec):
            seen[w] = seen.get(w, 0) + 1
    vague = {w for w, n in seen.items() if n >= 4} | _words(" ".join(_KIND_WORDS)) | _KIND_WORDS
    scored = []
    for s_name, s_spec in source.slots.items():
        if s_name in out:
            continue
        for t_name, t_spec in target.slots.items():
            if t_name in taken or s_spec.is_categorical != t_spec.is_categorical or slot_kind(s_spec) != slot_kind(t_spec):
                continue
            shared = (words(s_spec) & words(t_spec)) - vague
            if shared:
                scored.append((-len(shared), s_name, t_name))
    for _, s_name, t_name in sorted(scored):
        if s_name not in out and t_name not in taken:
            out[s_name] = t_name
            taken.add(t_name)
    # the only address (or phone, title...) of each service is the same thing whatever its name
    by_kind: dict[tuple[str, str], list[str]] = {}
    for side, svc in (("s", source), ("t", target)):
        for name, spec in svc.slots.items():
            if not spec.is_categorical and slot_kind(spec) not in ("other", "count", "money", "date", "time"):
                by_kind.setdefault((side, slot_kind(spec)), []).append(name)
    for (side, kind), names in by_kind.items():
        others = by_kind.get(("t", kind), [])
        if side == "s" and len(names) == 1 and len(others) == 1 and names[0] not in out and others[0] not in taken:
            out[names[0]] = others[0]
            taken.add(others[0])
    return out


_KIND_WORDS = {"date", "time", "city", "price", "number", "name", "cost", "addres", "address", "phone", "rating",
               "location", "total", "per", "boolean", "flag", "indicating", "whether", "allowed", "has", "available",
               "true", "false", "option", "possible"}


def _intent_map(source: ServiceSchema, target: ServiceSchema) -> dict[str, str]:
    """Intents both services share by name: an intent's wording ("rent the movie") is only reused for the
    same intent, since similar ones (play the movie) would be said differently."""
    return {name: name for name in source.intents if name in target.intents}


def _translate(sig: str, slots: dict[str, str], intents: dict[str, str]) -> tuple[str, list[int]] | None:
    """A signature of one service in another's slot and intent names, and the placeholder permutation."""
    tokens: list[tuple[str, int]] = []  # (target token, placeholder count), in source order
    for tok in sig.split("+"):
        parsed = parse_token(tok)
        if parsed is None:
            return None
        act, slot, bound, count = parsed
        if not slot:
            tokens.append((tok, 0))
        elif bound is not None and act.endswith("_INTENT"):
            names = [intents.get(v) for v in bound.split("|")]
            if None in names:
                return None
            tokens.append((f"{act}({slot}={'|'.join(names)})", 0))
        elif slot in slots:  # the same token in the target's slot name
            tokens.append((tok.replace(f"({slot}", f"({slots[slot]}", 1), count))
        else:
            return None
    order = sorted(range(len(tokens)), key=lambda k: tokens[k][0])
    new_sig = "+".join(tokens[k][0] for k in order)
    if len(set(t for t, _ in tokens)) != len(tokens) and new_sig != sig:
        return None  # two acts fell onto one token: placeholders would be ambiguous
    start, pos = {}, 0
    for k, (_, count) in enumerate(tokens):
        start[k] = pos
        pos += count
    perm = [0] * pos
    new_pos = 0
    for k in order:
        for j in range(tokens[k][1]):
            perm[start[k] + j] = new_pos
            new_pos += 1
    return new_sig, perm


def _words(text: str) -> set[str]:
    return {w[:-1] if w.endswith("s") else w for w in re.findall(r"[a-z]{3,}", text.lower())} - _STOP


_STOP = {"the", "and", "for", "with", "which", "what", "whether", "that", "this", "from", "name", "number", "user"}


def _similar(a: str, b: str) -> bool:
    """Whether two slot descriptions share at least half of the smaller one's content words."""
    wa, wb = _words(a), _words(b)
    return bool(wa and wb) and len(wa & wb) * 2 >= min(len(wa), len(wb))


def generic_token(act: Any) -> str:
    """The slot-independent token of one act for the generic bank ("INFORM(*)", "INFORM(*=dontcare)", "THANK_YOU")."""
    tok, placeholders = act_token(act.act, act.slot, act.values)
    if not act.slot or act.act.endswith("_INTENT"):
        return tok
    if placeholders:
        single = len(act.values) == 1 and act.act != "REQUEST"
        return f"{act.act}(*v)" if single else f"{act.act}(*x{len(act.values)})"
    if act.values:
        return f"{act.act}(*={'|'.join(act.values)})"
    return f"{act.act}(*)"
