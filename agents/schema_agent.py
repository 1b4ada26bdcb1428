"""A rule-based schema-guided system agent for SGD services, like the system bot of the SGD simulator.

Per service it tracks the user's active intent, slot values (canonical for calls, spoken for the state
it exposes) and requested slots: from the user's acts when the turn carries frames, else from the text
with the value-matching understanding step of ``agents/nlu.py``. Its policy: request missing required
slots; call search intents and offer the results one by one (OFFER + INFORM_COUNT), answer requested
slots from the entity on the table; confirm before a transactional call and call it on AFFIRM; notify
success or failure; offer the service's transactional intent after a selection (OFFER_INTENT); ask
whether there is anything else (REQ_MORE); say goodbye. Utterances come from the pack's realizer.
"""

from __future__ import annotations

import bisect
import itertools
import random
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

from ..engine.contracts import AgentReply, EpisodeContext, Observation, ToolCall
from ..engine.events import Act, AgentTurn, DialogueState, Frame, SlotSpan, ToolCalled, ToolReturned, UserTurn
from ..scenarios.sgd.values import ANY_VALUES
from .nlu import ValueMatcher

_NAMEISH = ("name", "title", "airlines", "car_name", "operator")
_LITERAL = frozenset(("OFFER_INTENT", "INFORM_COUNT"))  # acts whose value is said as it is
_OPEN_QUESTION = "How can I help you?"  # what the agent says before it knows which service the user wants


# (act, slot) -> that act without values, made once: acts are never mutated once said, so turns share them
_BARE: dict[tuple[str, str], Act] = {}
_act_key = attrgetter("act", "slot")  # (act, slot): the order of a frame's acts, without a Python call per act
_act_of = attrgetter("act")
_first = itemgetter(0)


class ServiceSchema:
    """The schema facts the policy needs for one service, precomputed once per run (shared by its episodes)."""

    __slots__ = ("name", "required", "optional", "params", "transactional", "args", "categorical", "offer_slots",
                 "search", "txn", "results", "mined_offers", "sources", "possible")

    def __init__(self, schema: dict[str, Any]) -> None:
        self.name = schema["service_name"]
        self.categorical = {s["name"] for s in schema["slots"] if s.get("is_categorical")}
        self.required = {i["name"]: list(i["required_slots"]) for i in schema["intents"]}
        self.optional = {i["name"]: dict(i.get("optional_slots") or {}) for i in schema["intents"]}
        # an intent's parameters: its required slots, then its optional ones
        self.params = {i: tuple(dict.fromkeys([*slots, *self.optional[i]]))
                       for i, slots in self.required.items()}
        self.transactional = {i["name"]: bool(i.get("is_transactional")) for i in schema["intents"]}
        self.args = {s for i in schema["intents"] for s in list(i["required_slots"]) + list(i.get("optional_slots") or {})}
        self.search = [i["name"] for i in schema["intents"] if not i.get("is_transactional")]
        self.txn = [i["name"] for i in schema["intents"] if i.get("is_transactional")]
        self.offer_slots: dict[str, list[str]] = {}
        self.results = {i["name"]: set(i.get("result_slots", ())) for i in schema["intents"]}
        self.mined_offers: dict[str, tuple[list[tuple[str, ...]], list[int]] | None] = {}  # sets, cum. weights
        self.sources: dict[str, list[tuple[str, str]]] | None = None  # slot -> (domain, slot) it is carried from
        self.possible = {s["name"]: set(s.get("possible_values") or ()) for s in schema["slots"]}
        for i in schema["intents"]:
            own = set(i["required_slots"]) | set(i.get("optional_slots") or {})
            rest = [s for s in i.get("result_slots", ()) if s not in own]
            named = [s for s in rest if any(k in s for k in _NAMEISH)]
            others = [s for s in rest if s not in named]
            # as SGD's system: what identifies the entity, then values echoing the user's own constraints
            echo = [s for s in i.get("result_slots", ()) if s in own]
            self.offer_slots[i["name"]] = (named[:2] + echo)[:3] if named else (others[:2] + echo)[:3]


def _transfer_sources(pack: Any, name: str) -> dict[str, list[tuple[str, str]]]:
    """Per slot of service ``name``: the (domain, slot) pairs real dialogues carried its value from, most
    frequent first (pack.stats["transfers"], keys "DomA.slotA>DomB.slotB")."""
    domain = name.rsplit("_", 1)[0]
    found: list[tuple[int, str, str, str]] = []
    for key, n in ((getattr(pack, "stats", None) or {}).get("transfers") or {}).items():
        src, _, dst = key.partition(">")
        src_domain, _, src_slot = src.partition(".")
        dst_domain, _, dst_slot = dst.partition(".")
        if dst_domain == domain and src_slot and dst_slot:
            found.append((-int(n), dst_slot, src_domain, src_slot))
    out: dict[str, list[tuple[str, str]]] = {}
    for _, dst_slot, src_domain, src_slot in sorted(found):
        out.setdefault(dst_slot, []).append((src_domain, src_slot))
    return out


def _mined_offer_sets(pack: Any, name: str, svc: ServiceSchema, intent: str) -> tuple[list, list] | None:
    """The OFFER slot sets real systems used for this service (the pack's SYSTEM template signatures
    made of OFFERs only), weighted by how many templates each has: offers then read like real ones."""
    banks = getattr(getattr(pack, "realizer", None), "banks", None) or {}
    counts: dict[tuple[str, ...], int] = {}
    for sig, templates in (banks.get("SYSTEM", {}).get(name) or {}).items():
        slots = []
        for token in sig.split("+"):
            if not token.startswith("OFFER(") or "=" in token or "*" in token:
                break
            slots.append(token[6:-1])
        else:
            if slots and set(slots) <= svc.results[intent]:
                counts[tuple(slots)] = counts.get(tuple(slots), 0) + len(templates)
    if not counts:
        return None
    sets = sorted(counts)
    return sets, list(itertools.accumulate(counts[k] for k in sets))


class Track:
    """The agent's belief about one service: intent, values, requested slots, results, the entity on the table,
    pending confirmation."""

    __slots__ = ("intent", "canon", "values", "requested", "results", "pos", "offered", "selected", "booked",
                 "changed", "confirming", "done", "_state", "proposal")

    def __init__(self) -> None:
        self.intent: str | None = None
        self.canon: dict[str, str] = {}
        # slot -> spoken values, sorted, as the exposed state shows them; ``values`` and its lists are replaced,
        # never mutated, so that logged states can share them
        self.values: dict[str, list[str]] = {}
        self.requested: list[str] = []  # replaced, never mutated, like ``values``
        self.results: list[dict[str, Any]] = []
        self.pos = 0
        self.offered: dict[str, Any] | None = None
        self.selected: dict[str, Any] | None = None
        self.booked: dict[str, Any] | None = None
        self.changed = False
        self.confirming: list[Act] | None = None  # the CONFIRM acts awaiting AFFIRM
        self.done: set[str] = set()
        self.proposal: list[Act] | None = None  # a REQUEST with a proposed value, awaiting AFFIRM
        self._state: DialogueState | None = None

    def state(self) -> DialogueState:
        """The tracked state as SGD's DialogueState (reused while nothing changed; never mutated)."""
        st = self._state
        intent = self.intent or "NONE"
        if (st is None or st.slot_values is not self.values or st.requested_slots is not self.requested
                or st.active_intent != intent):
            st = self._state = DialogueState(active_intent=intent, requested_slots=self.requested,
                                             slot_values=self.values)
        return st

    def entity(self) -> dict[str, Any] | None:
        """The entity talked about: the booking just made, else the selected or offered result, else the last
        booking (None when there is none)."""
        if self.booked is not None and self.intent in self.done:
            return self.booked
        return self.selected or self.offered or self.booked

    def answers(self) -> list[tuple[str, str, Any]]:
        """INFORM acts for the slots the user requested this turn that the entity talked about holds."""
        entity = self.entity()
        if entity is None:
            return []
        return [("INFORM", slot, entity[slot]) for slot in self.requested if slot in entity]


class Heard(NamedTuple):
    """A user turn as a policy decides on it, once ``SchemaAgent.listen`` has folded it into the belief."""

    service: str | None  # the service in focus (None: no service spoken of yet)
    kinds: set[str]  # the kinds of the user's acts
    closing: bool  # the user said goodbye, ended the dialogue, or said no to "anything else?"
    affirmed: bool  # the user affirmed the values the agent confirmed: the transaction can be made


def _kinds(said: list[tuple[str, list[Act]]]) -> set[str]:
    """The kinds of the acts the user said this turn."""
    if len(said) == 1:
        acts = said[0][1]
        return {acts[0].act} if len(acts) == 1 else set(map(_act_of, acts))
    return {a.act for _, acts in said for a in acts}


def _closes_selection(kinds: set[str], intent: str | None, svc: ServiceSchema) -> bool:
    """Whether the user's turn chose one of the results of a search (asking for no others)."""
    return "SELECT" in kinds and "INFORM_INTENT" not in kinds and "REQUEST_ALTS" not in kinds and intent in svc.search


class _Tracks(dict):
    """Service name -> its track, made on first use: ``tracks[name]`` always has one, ``get`` only if known."""

    def __missing__(self, name: str) -> Track:
        t = self[name] = Track()
        return t


class SchemaAgent:
    """Rule-based schema-guided system agent (deterministic; one instance per episode)."""

    deterministic = True

    def __init__(self, pack: Any = None, *, services: dict[str, ServiceSchema] | None = None,
                 max_request: int = 2, count_rate: float = 0.55, propose_rate: float = 0.5,
                 listen: str = "acts") -> None:
        self.pack = pack
        self.max_request = max_request
        self.text_only = listen == "text"  # understand the utterance even when the turn carries acts
        self.count_rate = count_rate
        self.propose_rate = propose_rate
        self._services = services if services is not None else {}
        self._nlu: ValueMatcher | None = None

    def start(self, ctx: EpisodeContext) -> None:
        """Forget the last episode; note the services this one may talk about."""
        data = ctx.scenario.data
        packed = data.get("pack")
        if self.pack is None and hasattr(packed, "realizer"):  # the data may name the pack (its id) only
            self.pack = packed
        self.rng: random.Random = ctx.rng
        self.schemas = data.get("schemas") or {}
        self.names = list(self.schemas) or sorted({t.service for t in ctx.tools})
        self.tracks: dict[str, Track] = _Tracks()
        self.current: str | None = None
        self.last: set[str] = set()  # act kinds of the agent's previous turn
        self._expecting: list[str] = []  # slots the agent asked for last
        self.offered_intent: tuple[str, str] | None = None  # (service, intent) of our OFFER_INTENT
        self.pending: tuple[str, str, list[Act]] | None = None  # (service, intent, acts to prepend)
        self._tagged: dict[str, list[SlotSpan]] | None = None  # spans found in the user's text this turn
        self._offer_acts: dict[str, list[Act]] = {}  # the OFFER acts of the entity on the table

    # -- protocol ---------------------------------------------------------------------------------

    def respond(self, obs: Observation) -> AgentReply:
        """Answer a user turn, or turn the results of the call just made into a turn."""
        if obs.tool_results and self.pending is not None:
            return self._after_call(obs.tool_results[0])
        return self.decide(self.listen(obs))

    def listen(self, obs: Observation) -> Heard:
        """Understand a user turn and fold it into the belief (the tracks, the focus, accepted offers and values):
        what ``decide`` turns into the rule's reply, or another policy into its own."""
        user = obs.user
        frames = user.frames
        if frames and not self.text_only and user.inferred is not True:  # inferred acts are a reading: read the words
            if len(frames) == 1:  # the common case, without a comprehension
                said = [(frames[0].service, frames[0].actions)] if frames[0].actions else []
            else:
                said = [(f.service, f.actions) for f in frames if f.actions]
            self._tagged = None
        else:
            found: list[tuple[str, SlotSpan]] = []
            # the understood (service, act) pairs as runs of one service, like frames
            pairs = self._understand(user.utterance, found)
            said = [(service, [a for _, a in run]) for service, run in itertools.groupby(pairs, key=_first)]
            self._tagged = {}
            for service, span in found:
                self._tagged.setdefault(service, []).append(span)
        return self._hear(said, user.end)

    def warm(self, history: list[Any]) -> None:
        """Take a logged episode as its own past (a fork's copied prefix), without realizing a word: each user turn
        it answered is heard as live, each call's results are taken, and each of its turns is noted as said."""
        answered = max((i for i, e in enumerate(history) if type(e) is AgentTurn), default=-1)
        heard: Heard | None = None
        for event in history[:answered + 1]:  # a user turn after its last one is still to be answered
            kind = type(event)
            if kind is UserTurn:
                heard = self.listen(Observation(user=event, history=[]))
                self._decided(heard)
            elif kind is ToolCalled:
                self.pending = (event.service, event.method, [])
            elif kind is ToolReturned and self.pending is not None:
                self.take_results(event)
            elif kind is AgentTurn:
                self._recall(event)

    def _decided(self, heard: Heard) -> None:
        """What ``decide`` changes in the belief whatever it draws: a chosen search result closes the search."""
        name = heard.service
        if name is None or heard.closing or heard.affirmed:
            return
        t = self.tracks[name]
        if _closes_selection(heard.kinds, t.intent, self._services.get(name) or self.service(name)):
            t.done.add(t.intent)

    def _recall(self, turn: AgentTurn) -> None:
        """Note one of its logged turns as said: the acts asked for, offered, confirmed or proposed (as ``say``
        and the policy note them)."""
        if not turn.frames:  # the open question: nothing understood yet
            self.last, self._expecting = {"REQ_MORE"}, []
            return
        name, acts = turn.frames[0].service, turn.frames[0].actions
        self.last = kinds = {a.act for a in acts}
        t = self.tracks[name]
        svc = self._services.get(name) or self.service(name)
        asked = [a.slot for a in acts if a.act == "REQUEST"]
        order = svc.params.get(t.intent, ()) if t.intent else ()
        self._expecting = sorted(asked, key=lambda s: order.index(s) if s in order else len(order))
        if "OFFER" in kinds:
            offer = self._offer_acts[name] = [a for a in acts if a.act == "OFFER"]
            t.offered = _offered_row(t, offer)
        if "CONFIRM" in kinds:
            t.confirming, t.changed = acts, False
        if any(a.act == "REQUEST" and a.values for a in acts):
            t.proposal = acts
        if "OFFER_INTENT" in kinds:
            intent = next(a for a in acts if a.act == "OFFER_INTENT")
            self.offered_intent = (name, (intent.canonical_values or intent.values or [""])[0])

    # -- understanding ----------------------------------------------------------------------------

    def service(self, name: str) -> ServiceSchema:
        """The schema facts of service ``name``."""
        svc = self._services.get(name)
        if svc is None:
            schema = self.schemas.get(name) or self.pack.schemas[name]
            svc = self._services[name] = ServiceSchema(schema)
        return svc

    def _understand(self, text: str, spans: list[tuple[str, SlotSpan]]) -> list[tuple[str, Act]]:
        if self._nlu is None:
            self._nlu = ValueMatcher(self.pack, self.names)
        track = self.tracks.get(self.current) if self.current else None
        last = self.last
        if track is not None and track.offered is not None and track.selected is None and "OFFER" not in last:
            last = last | {"OFFER"}  # an answer about the offer leaves it on the table: "sounds good" selects it
        return self._nlu.parse(text, self.current, track.intent if track else None, last, self._expecting, spans)

    def _set(self, t: Track, svc: ServiceSchema, slot: str, canon: str, spoken: str, change: bool = True) -> None:
        if slot not in svc.args:
            return
        old = t.canon.get(slot)
        if old is not None and old.lower() == canon.lower():
            said = t.values[slot]
            if spoken not in said:  # another way to say the same value: the state lists them all
                t.values = {**t.values, slot: sorted([*said, spoken])}
            return
        t.canon[slot] = canon
        t.values = {**t.values, slot: [spoken]}
        t.changed = t.changed or change

    def _accept(self, name: str, acts: list[Act] | None, change: bool = False) -> None:
        """Values the system said and the user accepted become part of the tracked state (values of the
        entity on the table are no reason to search again; a proposed value from elsewhere is)."""
        if not acts:
            return
        t = self.tracks[name]
        svc = self._services.get(name) or self.service(name)
        for a in acts:
            if a.canonical_values and a.values:
                self._set(t, svc, a.slot, a.canonical_values[0], a.values[0], change)

    def _propose(self, name: str, svc: ServiceSchema, slot: str) -> str | None:
        """A value for ``slot`` carried over from another service of this dialogue, the way SGD's system
        asks "Are you wanting the car on March 7th?": the pack's mined slot transfers say which slots."""
        if svc.sources is None:
            svc.sources = _transfer_sources(self.pack, name)
        for domain, src in svc.sources.get(slot, ()):
            for other, track in self.tracks.items():
                if other != name and other.rsplit("_", 1)[0] == domain:
                    value = track.canon.get(src)
                    if value and value != "dontcare" and (slot not in svc.categorical
                                                          or value in svc.possible.get(slot, ())):
                        return value
        return None

    # -- policy -----------------------------------------------------------------------------------

    def _hear(self, said: list[tuple[str, list[Act]]], user_end: bool) -> Heard:
        """Fold the user's acts, per service in the order said (no service has an empty list), into the belief."""
        for t in self.tracks.values():
            if t.requested:
                t.requested = []  # a new list: the last state keeps the old one
        kinds = _kinds(said)
        name = self._focus(said, kinds)
        if name is None:
            return Heard(None, kinds, False, False)
        t = self.tracks[name]
        confirming, proposal = t.confirming, t.proposal
        t.confirming = t.proposal = None
        # "no" to "anything else?" ends the dialogue
        declined = "NEGATE" in kinds and "REQ_MORE" in self.last and "INFORM" not in kinds
        if declined or "NEGATE_INTENT" in kinds:
            t.intent = None  # SGD's state has no active intent after "no" to an offer or to "anything else?"
        self._track_user_acts(said)
        if "GOODBYE" in kinds or user_end or declined:
            return Heard(name, kinds, True, False)
        self._take_accepted(name, t, kinds, proposal)
        affirmed = confirming is not None and "AFFIRM" in kinds and "INFORM" not in kinds
        if affirmed:
            self._accept(name, confirming)
        return Heard(name, kinds, False, affirmed)

    def decide(self, heard: Heard) -> AgentReply:
        """The rule's reply to a user turn ``listen`` has heard."""
        name = heard.service
        if name is None:
            return self.say(None, [("REQ_MORE", "", None)], end=False)
        if heard.closing:
            return self.say(name, [("GOODBYE", "", None)], end=True)
        t = self.tracks[name]
        if heard.affirmed:
            return self.call(name, t.intent, [])
        return self._next_step(name, t, heard.kinds)

    def _focus(self, said: list[tuple[str, list[Act]]], kinds: set[str]) -> str | None:
        """The service the user is talking about, now current: the one with a new intent, else the last one spoken
        of, else the first one of this turn (None when no service was ever spoken of)."""
        name = self.current
        if "INFORM_INTENT" in kinds:
            name = next(s for s, acts in reversed(said) if any(a.act == "INFORM_INTENT" for a in acts))
        elif name is None:
            if not said:
                return None
            name = said[0][0]
        self.current = name
        return name

    def _track_user_acts(self, said: list[tuple[str, list[Act]]]) -> None:
        """Fold the user's informed values, requested slots and new intents into the tracks of their services."""
        tracks, services = self.tracks, self._services
        for s, acts in said:
            ts = tracks[s]  # every service spoken of is tracked
            for a in acts:
                act = a.act
                if act == "INFORM":
                    if a.values:
                        canon = a.canonical_values[0] if a.canonical_values else a.values[0]
                        self._set(ts, services.get(s) or self.service(s), a.slot, canon, a.values[0])
                elif act == "REQUEST":
                    if a.slot:
                        ts.requested = [*ts.requested, a.slot]
                elif act == "INFORM_INTENT" and a.values:
                    intent = a.canonical_values[0] if a.canonical_values else a.values[0]
                    if intent in (services.get(s) or self.service(s)).required and (intent != ts.intent
                                                                                     or intent in ts.done):
                        ts.intent = intent  # a new intent, or the same one asked for again
                        ts.done.discard(intent)
                        ts.changed = True

    def _take_accepted(self, name: str, t: Track, kinds: set[str], proposal: list[Act] | None) -> None:
        """Take on what the user accepted of the agent's last turn: the intent offered, the entity offered, or
        the value proposed."""
        if "AFFIRM_INTENT" in kinds and self.offered_intent and self.offered_intent[0] == name:
            t.intent = self.offered_intent[1]
            t.changed = True
        self.offered_intent = None
        if "SELECT" in kinds and t.offered is not None:
            t.selected = t.offered
            self._accept(name, self._offer_acts.get(name))
        if proposal is not None and "AFFIRM" in kinds:
            self._accept(name, proposal, change=True)

    def _next_step(self, name: str, t: Track, kinds: set[str]) -> AgentReply:
        """Answer the slots the user requested, then move the service's intent on: search again, close a
        selection, ask for what is missing, confirm a transaction or search."""
        out = t.answers()  # the slots the entity cannot answer are answered with the call's results
        svc = self._services.get(name) or self.service(name)
        if "REQUEST_ALTS" in kinds:
            if t.changed or not t.results:
                return self.call(name, t.intent, out)
            return self.say(name, out + self.next_offer(name), end=False)
        if _closes_selection(kinds, t.intent, svc):
            return self._close_selection(name, t, svc, out)
        if t.intent is None or (t.intent in t.done and not t.changed):
            return self.say(name, out or [("REQ_MORE", "", None)], end=False)
        missing = [s for s in svc.required[t.intent] if s not in t.canon]
        if missing:
            return self._ask_missing(name, t, svc, missing, out)
        if svc.transactional[t.intent]:
            if out and not t.changed:
                return self.say(name, out, end=False)
            return self.confirm(name)
        if t.changed or not t.results:
            return self.call(name, t.intent, out)
        return self.say(name, out or [("REQ_MORE", "", None)], end=False)

    def _close_selection(self, name: str, t: Track, svc: ServiceSchema, out: list) -> AgentReply:
        """The user chose a search result: the search is done; offer the service's next transaction, if any."""
        t.done.add(t.intent)
        if out:
            return self.say(name, out, end=False)
        offer = next((i for i in svc.txn if i not in t.done), None)
        if offer is not None:
            self.offered_intent = (name, offer)
            return self.say(name, [("OFFER_INTENT", "intent", offer)], end=False)
        return self.say(name, [("REQ_MORE", "", None)], end=False)

    def _ask_missing(self, name: str, t: Track, svc: ServiceSchema, missing: list[str], out: list) -> AgentReply:
        """Ask for required slots still missing (after answering, if the user asked something): one or a few at
        a time, or propose a value another service of the dialogue holds."""
        if out:  # answer first; the missing slots are asked on the next turn
            return self.say(name, out, end=False)
        if len(self.tracks) > 1 and self.rng.random() < self.propose_rate:  # another service is known
            for slot in missing:
                value = self._propose(name, svc, slot)
                if value is not None:
                    reply = self.say(name, [("REQUEST", slot, value)], end=False)
                    t.proposal = reply.frames[0].actions
                    return reply
        k = 1 if len(missing) == 1 or self.rng.random() < 0.5 else self.max_request
        return self.say(name, [("REQUEST", s, None) for s in missing[:k]], end=False)

    def _params(self, t: Track, svc: ServiceSchema, intent: str) -> dict[str, str]:
        canon = t.canon
        return {s: canon[s] for s in svc.params[intent] if s in canon}

    def confirm(self, name: str) -> AgentReply:
        """CONFIRM the values of the active intent of service ``name`` (with its defaults) and await the user's
        AFFIRM; the intent must be set."""
        t = self.tracks[name]
        svc = self._services.get(name) or self.service(name)
        acts = [("CONFIRM", s, v) for s, v in self._params(t, svc, t.intent).items()]
        for s, default in svc.optional[t.intent].items():
            if s not in t.canon and default not in ANY_VALUES:
                acts.append(("CONFIRM", s, default))
        t.changed = False
        reply = self.say(name, acts, end=False)
        t.confirming = reply.frames[0].actions
        return reply

    def call(self, name: str, intent: str | None, out: list) -> AgentReply:
        """Call ``intent`` of service ``name`` with the tracked values (a transaction with its defaults too); the
        acts ``out`` are said with what the results bring. No intent: REQ_MORE instead."""
        t, svc = self.tracks[name], self.service(name)
        if intent is None:
            return self.say(name, out + [("REQ_MORE", "", None)], end=False)
        params = self._params(t, svc, intent)
        if svc.transactional[intent]:
            for s, default in svc.optional[intent].items():
                params.setdefault(s, default)
        self.pending = (name, intent, out)
        return AgentReply(tool_calls=[ToolCall(service=name, method=intent, parameters=params)])

    def take_results(self, result: Any) -> tuple[str, str, list, list[dict[str, Any]]]:
        """Fold the result of the call just made into the belief: (service, intent, the acts to say with it,
        the rows; none when a transaction failed). A search's rows become the results to offer, none offered yet."""
        name, intent, out = self.pending
        self.pending = None
        t, svc = self.tracks[name], self.service(name)
        rows = result.results or []
        t.changed = False
        if svc.transactional[intent]:
            if rows and result.error is None:
                t.done.add(intent)
                t.booked = rows[0]
            else:
                rows = []
        else:  # nothing is on the table until one of the new results is offered
            t.results, t.pos = rows, 0
            t.selected = t.offered = None
        return name, intent, out, rows

    def _after_call(self, result: Any) -> AgentReply:
        name, intent, out, rows = self.take_results(result)
        t, svc = self.tracks[name], self.service(name)
        if svc.transactional[intent]:
            if rows:
                acts = [a for a in out if a[0] == "INFORM"]
                acts += [("INFORM", s, rows[0][s]) for s in t.requested if s in rows[0]
                         and not any(a[1] == s for a in acts)]
                return self.say(name, acts + [("NOTIFY_SUCCESS", "", None)], end=False)
            return self.say(name, out + [("NOTIFY_FAILURE", "", None), ("REQ_MORE", "", None)], end=False)
        if not rows:
            return self.say(name, out + [("NOTIFY_FAILURE", "", None), ("REQ_MORE", "", None)], end=False)
        acts = self.offer(name, rows[0])
        if len(rows) > 1 and self.rng.random() < self.count_rate:  # SGD gives the count on about half the offers
            acts.append(("INFORM_COUNT", "count", str(len(rows))))
        entity = rows[0]
        if out:
            acts = [a for a in out if a[0] == "INFORM"] + acts
        if t.requested:
            acts += [("INFORM", s, entity[s]) for s in t.requested
                     if s in entity and not any(a[1] == s for a in acts)]
        return self.say(name, acts, end=False)

    def offer(self, name: str, row: dict[str, Any]) -> list[tuple[str, str, Any]]:
        """OFFER acts for ``row`` of service ``name``'s results, now the entity on the table: a slot set real
        systems used (a weighted draw), else what identifies the entity and echoes the user's constraints."""
        t = self.tracks[name]
        t.offered = row
        svc = self._services.get(name) or self.service(name)
        mined = svc.mined_offers
        if t.intent in mined:  # None (no mined sets) is cached too
            sets = mined[t.intent]
        else:
            sets = mined[t.intent] = _mined_offer_sets(self.pack, name, svc, t.intent)
        if sets:
            # one weighted draw, exactly as rng.choices(sets, cum_weights=cum)[0] makes it (same random() call
            # and bisection), without building its list
            population, cum = sets
            slots = population[bisect.bisect(cum, self.rng.random() * (cum[-1] + 0.0), 0, len(population) - 1)]
            acts = [("OFFER", s, row[s]) for s in slots if row.get(s) not in (None, "")]
            if len(acts) == len(slots):  # the entity has every value of the set
                return acts
        return [("OFFER", s, row[s]) for s in svc.offer_slots.get(t.intent, ()) if row.get(s) not in (None, "")]

    def next_offer(self, name: str) -> list[tuple[str, str, Any]]:
        """OFFER acts for the next of service ``name``'s results (after the last, the first again)."""
        t = self.tracks[name]
        t.pos = (t.pos + 1) % len(t.results)
        return self.offer(name, t.results[t.pos])

    # -- realization ------------------------------------------------------------------------------

    def say(self, name: str | None, acts: list[tuple[str, str, Any]], end: bool) -> AgentReply:
        """The turn saying ``acts`` ((act, slot, canonical value or None) for service ``name``; None: no service
        yet, the open question): realized with the pack's templates, remembered, with the tracked state."""
        last = self.last = {acts[0][0]} if len(acts) == 1 else set(map(_first, acts))
        if name is None:  # nothing understood yet, so no service to speak for: still never an empty turn
            utterance, frames = _OPEN_QUESTION, []
        else:
            svc = self._services.get(name) or self.service(name)
            categorical, pack, rng = svc.categorical, self.pack, self.rng
            built: list[Act] = []
            for act, slot, value in acts:
                if value is None:
                    bare = _BARE.get((act, slot))
                    if bare is None:
                        bare = _BARE[(act, slot)] = Act(act=act, slot=slot)
                    built.append(bare)
                    continue
                if type(value) is not str:
                    value = str(value)
                if act in _LITERAL or slot in categorical or value == "dontcare":
                    spoken = value
                else:
                    spoken = pack.spoken(name, slot, value, rng)
                built.append(Act(act=act, slot=slot, values=[spoken], canonical_values=[value]))
            if len(built) > 1:
                built.sort(key=_act_key)  # one order per signature (the realizer caches plans by signature)
            utterance, spans = pack.realizer.realize("SYSTEM", name, built, rng)
            frames = [Frame(service=name, actions=built, slots=spans)]
            if "OFFER" in last:
                self._offer_acts[name] = [a for a in built if a.act == "OFFER"]
        self._expecting = [a[1] for a in acts if a[0] == "REQUEST"] if "REQUEST" in last else []
        tracks = self.tracks
        if len(tracks) == 1:  # the common case: one service, no dict comprehension
            (n, t), = tracks.items()
            state = {n: t.state()}
        else:
            state = {n: t.state() for n, t in tracks.items()}
        return AgentReply(utterance=utterance, frames=frames, state=state, tagged_slots=self._tagged, end=end)


def _offered_row(t: Track, offer: list[Act]) -> dict[str, Any]:
    """The result the OFFER acts ``offer`` speak of, looked for from the next one to offer on (it is then on
    the table); a row of the offered values when no result has them all."""
    said = {a.slot: a.canonical_values[0] for a in offer if a.canonical_values}
    rows, n = t.results, len(t.results)
    first = t.pos if t.offered is None else t.pos + 1  # the first of new results, else the one after the last
    for k in range(n):
        i = (first + k) % n
        row = rows[i]
        if all(str(row.get(slot)) == value for slot, value in said.items()):
            t.pos = i
            return row
    return said


def _listen(value: str) -> str:
    if value not in ("acts", "text"):
        raise ValueError(value)
    return value


def make_factory(arg: str | None, scenarios: Any, options: dict[str, Any]) -> Any:
    """Registry factory for ``--agent schema``: options max_request (slots asked at once, default 2),
    count_rate (share of first offers that say how many results there are, default 0.55) and
    propose_rate (how often a value known from another service is proposed when asking, default 0.5) and
    listen (``acts``: read the user's acts when the turn carries them, the default; ``text``: always
    understand the utterance, tagging its slot spans, as a text-only channel would make it)."""
    from ..engine.errors import UserError

    known = {"max_request": (int, "an integer"), "count_rate": (float, "a number"),
             "propose_rate": (float, "a number"), "listen": (_listen, "'acts' or 'text'")}
    kwargs: dict[str, Any] = {}
    for key, value in options.items():
        if key not in known:
            raise UserError(f"schema agent: unknown option {key!r} (known: {', '.join(sorted(known))})")
        try:
            kwargs[key] = known[key][0](value)
        except (TypeError, ValueError):
            raise UserError(f"schema agent: option {key}={value!r} is not {known[key][1]}") from None
    pack = getattr(scenarios, "pack", None)
    if pack is None:
        raise UserError("schema agent: needs SGD scenarios (--scenarios sgd or a pack directory), "
                        f"not {getattr(scenarios, 'name', type(scenarios).__name__)!r}")
    services: dict[str, ServiceSchema] = {}  # shared by the episodes of a run: schemas do not change

    def make() -> SchemaAgent:
        return SchemaAgent(pack, services=services, **kwargs)

    return make
