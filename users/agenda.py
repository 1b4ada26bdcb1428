"""An agenda-based SGD user (Schatzmann et al., 2007): a goal, a stack of pending acts, SGD annotations.

The goal comes from the scenario (``scenario.data["goal"]``, see scenarios/sgd/goals.py): subgoals in
dialogue order, each a service intent with canonical constraints, optional slots (said only when asked),
requested result slots, relaxations to fall back on, and slots filled from the previous subgoal's entity.
Each subgoal pushes its INFORM/REQUEST acts on the agenda; system acts push reactions on top (an answer
to REQUEST, NEGATE+INFORM to a wrong CONFIRM, ...) and every turn pops the top acts, how many depending on
``verbosity``. Every turn is annotated as SGD does: one frame per service spoken about, actions with the
spoken and canonical values, spans of non-categorical values, and the true dialogue state with every
spoken variant of a value mentioned so far (the system's too, once the user accepted it).

With a noise model (users/noise.py) the user sometimes says a wrong value or intent and repairs it on
its next turn; the state always holds what the user means.
"""

from __future__ import annotations

import random
from operator import attrgetter
from typing import Any, Callable

from ..engine.contracts import Claim, EpisodeContext, UserReply, Verdict
from ..engine.events import Act, AgentTurn, DialogueState, Frame, UserTurn
from ..scenarios.sgd.nlg import OPENING
from .noise import NoiseModel
from .understanding import Context, for_pack


class _Service:
    """What the user needs of one service schema, precomputed once per run."""

    __slots__ = ("name", "args", "categorical", "transactional", "intents", "result_slots", "_by_value")

    def __init__(self, schema: dict[str, Any]) -> None:
        self.name = schema["service_name"]
        self.categorical = {s["name"] for s in schema["slots"] if s.get("is_categorical")}
        self.intents = [i["name"] for i in schema["intents"]]
        self.transactional = {i["name"]: bool(i.get("is_transactional")) for i in schema["intents"]}
        self.result_slots = {i["name"]: set(i.get("result_slots", ())) for i in schema["intents"]}
        # SGD tracks in the state exactly the slots that are arguments of some intent of the service
        self.args = {s for i in schema["intents"] for s in list(i["required_slots"]) + list(i.get("optional_slots", {}))}
        self._by_value: dict[str, dict[str, list[dict[str, str]]] | None] = {}

    def rows_with(self, pack: Any, slot: str, value: str) -> list[dict[str, str]] | None:
        """The pack's entity rows whose ``slot`` is ``value`` ([] when none; None when no row has the slot)."""
        index = self._by_value.get(slot, False)
        if index is False:
            built: dict[str, list[dict[str, str]]] = {}
            for row in pack.entities(self.name):
                if slot in row:
                    built.setdefault(row[slot], []).append(row)
            index = self._by_value[slot] = built or None
        return None if index is None else index.get(value, [])


class _Sub:
    """One subgoal being pursued: its (possibly relaxed) constraints and progress."""

    __slots__ = ("service", "intent", "transactional", "constraints", "optional", "requested", "pending",
                 "relax", "from_previous", "fulfilled", "failed", "offered", "row", "alts", "relaxed",
                 "selected", "reason", "retries", "count", "claim")

    def __init__(self, sg: dict[str, Any], transactional: bool) -> None:
        self.service: str = sg["service"]
        self.intent: str = sg["intent"]
        self.transactional = transactional
        self.constraints: dict[str, str] = dict(sg.get("constraints") or {})
        self.optional: dict[str, str] = dict(sg.get("optional") or {})
        self.requested: list[str] = list(sg.get("requested") or [])
        self.pending: list[str] = list(self.requested)  # requested slots not informed yet
        self.relax: list[tuple[str, str]] = [(s, v) for s, v in (sg.get("relax") or [])]
        self.from_previous: dict[str, str] = dict(sg.get("from_previous") or {})
        self.fulfilled = False
        self.failed = False
        self.selected = False
        self.offered: dict[str, str] | None = None  # the entity on the table (canonical values)
        self.row: dict[str, str] = {}  # what the user learnt of the chosen / booked entity
        self.claim: Claim | None = None  # what the user believes it got, fixed when the subgoal is fulfilled
        self.alts = 0
        self.relaxed = 0
        self.retries = 0
        self.count: int | None = None  # how many results the system said it found
        self.reason = ""

    @property
    def done(self) -> bool:
        return self.fulfilled and not self.pending


class _Held:
    """What the user holds about one service: the dialogue state (canonical values, every spoken variant
    mentioned, the active intent) and its annotation as last made, kept until something changes."""

    __slots__ = ("args", "canon", "variants", "active", "changed", "slot_values", "state")

    def __init__(self, args: set[str]) -> None:
        self.args = args  # the slots SGD tracks in the state (see _Service)
        self.canon: dict[str, str] = {}  # slot -> canonical value
        self.variants: dict[str, list[str]] = {}  # slot -> spoken variants, in the order first mentioned
        self.active = "NONE"
        self.changed: dict[str, None] = {}  # the slots whose variants changed since the last annotation, in order
        self.slot_values: dict[str, list[str]] = {}  # slot -> sorted variants as last annotated (a logged dict:
        self.state: DialogueState | None = None  # replaced on change, never changed) and the state holding them

    def annotation(self, requested: list[str]) -> DialogueState:
        """The state to annotate a turn with: the last one when nothing changed."""
        if self.changed:
            # a new dict with just the changed slots sorted again; new slots come last in the order they were
            # first held, as in ``variants``
            slot_values = self.slot_values = dict(self.slot_values)
            for k in self.changed:
                slot_values[k] = sorted(self.variants[k])
            self.changed = {}
            self.state = None
        state = self.state
        if state is None or state.active_intent != self.active or state.requested_slots != requested:
            state = self.state = DialogueState(active_intent=self.active, requested_slots=requested,
                                               slot_values=self.slot_values)
        return state


_act_key = attrgetter("act", "slot")  # (act, slot): the order of a frame's acts, without a Python call per act


# the user's acts that change its dialogue state (see _update_state)
_STATEFUL = frozenset(("INFORM", "INFORM_INTENT", "NEGATE_INTENT", "NEGATE", "AFFIRM_INTENT"))

_EMPTY: dict[str, str] = {}  # read-only stand-in for a service with no values yet

# A turn's items that carry no spoken value (an intent, SELECT, THANK_YOU, REQUEST(slot)...: most turns) read
# the same in every dialogue: their acts (see AgendaUser._acts) are built once and shared by every user of the
# process, keyed by the items; events are never changed once made, so sharing their acts is safe.
_PLAIN: dict[tuple, tuple[list[Act], list[str], bool]] = {}


# Loops rather than any() / all() over a generator on the turn's path: a generator that stops early is
# closed by raising GeneratorExit into it, which costs more than the loop.

def _closing(items: Any) -> bool:
    """A "no" that closes the dialogue: the turn thanks and informs nothing."""
    thanks = False
    for i in items:
        if i[1] == "INFORM":
            return False
        thanks = thanks or i[1] == "THANK_YOU"
    return thanks


def _agrees(row: dict[str, str], values: dict[str, str]) -> bool:
    """Whether ``row`` has each of ``values`` it has a column for."""
    for k, v in values.items():
        if k in row and row[k] != v:
            return False
    return True


def _hear(frames: list[Frame], service: str | None) -> tuple[list[tuple], bool, dict[str, list[Act]]]:
    """In one pass over the system's acts: (service, act, slot, canonical values) of each, whether the system
    said GOODBYE, and the acts about ``service`` by act name."""
    sig = []  # a loop, not a comprehension: this runs every turn and a comprehension costs a function object
    goodbye = False
    by: dict[str, list[Act]] = {}
    for f in frames:
        name = f.service
        mine = name == service
        for a in f.actions:
            act = a.act
            sig.append((name, act, a.slot, tuple(a.canonical_values)))
            if mine:
                got = by.get(act)
                if got is None:
                    by[act] = [a]
                else:
                    got.append(a)
            if act == "GOODBYE":
                goodbye = True
    return sig, goodbye, by


def _all_about(items: list, service: str) -> bool:
    for item in items:
        if item[0] != service:
            return False
    return True


def _by_service(said: list, meant: list) -> list[tuple[str, list, list]]:
    """(service, the acts said about it, the acts meant about it) per service the turn speaks about, in order."""
    first = said[0][0] if said else ""
    if _all_about(said, first) and (meant is said or _all_about(meant, first)):  # the common case
        return [(first, said, meant)] if said else []
    # a turn over two services (thanks for one, a new intent for the other)
    groups: dict[str, tuple[str, list, list]] = {}
    for item in said:
        if item[0] not in groups:
            groups[item[0]] = (item[0], [], [])
        groups[item[0]][1].append(item)
    for item in meant:
        if item[0] in groups:
            groups[item[0]][2].append(item)
    return list(groups.values())


def _shifted(spans: list, offset: int) -> list:
    """Spans moved ``offset`` characters on (a frame said after another); a function of its own, as a
    comprehension in _reply would make ``offset`` a cell on every turn."""
    return [type(sp)(slot=sp.slot, start=sp.start + offset, exclusive_end=sp.exclusive_end + offset) for sp in spans]


# What a draw of the user's gave, as the acts of its answer show it (see AgendaUser._chance): the turn asks
# something, asks before choosing, asks for alternatives, opens an intent, says goodbye, says no, stays.
def _asks(told: set) -> bool:
    return "REQUEST" in told


def _asks_first(told: set) -> bool:
    return "SELECT" not in told and "REQUEST_ALTS" not in told


def _wants_alts(told: set) -> bool:
    return "REQUEST_ALTS" in told


def _opens(told: set) -> bool:
    return "INFORM_INTENT" in told


def _leaves(told: set) -> bool:
    return "GOODBYE" in told


def _declines(told: set) -> bool:
    return "NEGATE" in told


def _stays(told: set) -> bool:
    return "GOODBYE" not in told


def _acts_told(turn: UserTurn) -> set:
    """The acts a logged user turn says, by name and by (name, slot)."""
    told: set = set()
    for frame in turn.frames:
        for a in frame.actions:
            told.add(a.act)
            told.add((a.act, a.slot))
    return told


def _repair_of(meant: list, turn: UserTurn) -> list:
    """The acts repairing the slips of ``turn`` against the acts it ``meant``, as NoiseModel.corrupt makes them: a
    wrong or missing value said again (after a NEGATE when a wrong value comes first), a wrong intent said again."""
    said = {(f.service, a.act, a.slot): a.canonical_values[0]
            for f in turn.frames for a in f.actions if a.canonical_values}
    repair: list = []
    for item in meant:
        service, act, slot, value = item
        if act == "INFORM" and value not in (None, "dontcare"):
            got = said.get((service, act, slot))
            if got is not None and got != value and not repair:
                repair.append((service, "NEGATE", "", None))
            if got != value:
                repair.append(item)
        elif act == "INFORM_INTENT" and said.get((service, act, slot)) != value:
            repair.append(item)
    return repair


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and (a == b or a.lower() == b.lower())


class AgendaUser:
    """Schatzmann-style agenda user for SGD goals; see the module docstring for the annotations it gives."""

    deterministic = True

    def __init__(self, pack: Any = None, *, patience: int = 3, verbosity: float = 0.45, alts_rate: float = 0.25,
                 max_alts: int = 2, request_first: float = 0.6, noise: NoiseModel | None = None,
                 services: dict[str, _Service] | None = None) -> None:
        self.pack = pack
        self.patience = patience
        self.verbosity = verbosity
        self.alts_rate = alts_rate
        self.max_alts = max_alts
        self.request_first = request_first
        self.noise = noise
        self._services = services if services is not None else {}

    # -- protocol ---------------------------------------------------------------------------------

    def start(self, ctx: EpisodeContext) -> None:
        """Take the goal of the episode's scenario and reset every piece of dialogue memory."""
        data = ctx.scenario.data
        packed = data.get("pack")
        if self.pack is None and hasattr(packed, "realizer"):  # the data may name the pack (its id) only
            self.pack = packed
        self.rng: random.Random = ctx.rng
        schemas = data.get("schemas") or {}
        goal = data["goal"]
        self.subs = [_Sub(sg, self._service(sg["service"], schemas).transactional.get(sg["intent"], False))
                     for sg in goal["subgoals"]]
        self.idx = 0
        self.held: dict[str, _Held] = {}  # service -> what the user holds about it (see _held)
        self.spoken: dict[tuple[str, str, str], str] = {}  # the variant this user says for a value
        self.agenda: list[tuple[str, str, str]] = []  # (act, slot, service), top = end
        self.repair: list[tuple[str, str, str, str | None]] = []
        self.turns = 0
        self.useless = 0
        self.heard: set[tuple] = set()  # signatures of the system turns heard so far
        self._offer_acts: list[Act] = []  # the OFFER acts of the entity on the table
        self.left = ""  # why the user left early ("" while talking)
        self.ended = False
        self._told: set | None = None  # while warming: the acts of the logged answer being relived
        self._activate(0)

    def respond(self, agent: AgentTurn | None) -> UserReply | None:
        """Open the dialogue (agent None) or react to the agent's turn."""
        if self.ended:
            return None
        step = self._step(agent)
        if step is None:
            return None
        out, end, slips = step
        return self._reply(out, end=end, slips=slips)

    def warm(self, history: list[Any]) -> None:
        """Take a logged episode as its own past (a fork's copied prefix), without realizing a word: each agent
        turn it answered is heard again and decided on as its logged answer shows it decided (see _chance), and
        what that answer meant is folded into its state."""
        answered = max((i for i, e in enumerate(history) if type(e) is UserTurn), default=-1)
        heard: AgentTurn | None = None
        for event in history[:answered + 1]:  # an agent turn after its last answer is still to be answered
            if type(event) is AgentTurn:
                heard = event
            elif type(event) is UserTurn and not self.ended:
                self._relive(heard, event)

    def _relive(self, heard: AgentTurn | None, turn: UserTurn) -> None:
        """Answer ``heard`` (None: open the dialogue) again as the logged ``turn`` did, taking in what it meant."""
        for frame in turn.frames:  # the variants it said are the ones it says
            for a in frame.actions:
                if a.act == "INFORM" and a.values and a.canonical_values:
                    self.spoken[(frame.service, a.slot, a.canonical_values[0])] = a.values[0]
        self._told = _acts_told(turn)
        if self.noise is not None:
            self._told |= self._dropped(turn)
        try:
            step = self._step(heard)
        finally:
            self._told = None
        if step is None:
            return
        out, end, slips = step
        self.ended = self.ended or end
        if slips and self.noise is not None:
            self._learn_meant(out, turn)
            self.repair = _repair_of(out, turn)
        for service, items, _ in _by_service(out, out):
            self._update_state(self._held(service), items)

    def _dropped(self, turn: UserTurn) -> set:
        """The informs ``turn`` meant but dropped (a slip): slots its logged state holds anew that it does not say."""
        dropped = set()
        for frame in turn.frames:
            if frame.state is None:
                continue
            said = {a.slot for a in frame.actions}
            held = self.held.get(frame.service)
            for slot, variants in frame.state.slot_values.items():
                if slot not in said and (held is None or slot not in held.variants):
                    dropped.add(("INFORM", slot))
        return dropped

    def _learn_meant(self, meant: list, turn: UserTurn) -> None:
        """The variants of the values ``turn`` meant but did not say (slips): its logged state holds them."""
        states = {f.service: f.state for f in turn.frames if f.state is not None}
        for service, act, slot, value in meant:
            if act != "INFORM" or value is None or (service, slot, value) in self.spoken or service not in states:
                continue
            held = self.held.get(service)
            known = held.variants.get(slot, ()) if held is not None else ()
            fresh = [v for v in states[service].slot_values.get(slot, ()) if v not in known]
            if fresh:
                self.spoken[(service, slot, value)] = fresh[0]

    def _step(self, agent: AgentTurn | None) -> tuple[list, bool, bool] | None:
        """What the user says to ``agent`` (None: it opens the dialogue): its acts, whether they end the dialogue
        and whether they may slip; None when the agent closed the dialogue."""
        if agent is None:
            return self._opening(), False, True
        self.turns += 1
        sub = self.subs[self.idx] if self.idx < len(self.subs) else None
        mine = sub.service if sub is not None else None
        sig, goodbye, by = _hear(agent.frames, mine)
        if not sig and agent.utterance:  # an agent that sends only text: read its acts from the words
            frames = [Frame(service=self._cur_service(), actions=self._understand(agent.utterance))]
            sig, goodbye, by = _hear(frames, mine)
        if goodbye or agent.end:
            self.ended = True
            if not self.left and not self._all_done():
                self.left = "the system closed the dialogue before the goal was met"
            return None
        # a turn the user has heard before (the same acts) or an empty one brings nothing new
        new = False
        if sig:
            sig.sort()
            n = len(self.heard)
            self.heard.add(tuple(sig))
            new = len(self.heard) > n  # the set grew: one hash of the signature, not two (`in`, then add)
        self.useless = 0 if new else self.useless + 1
        if self.useless > self.patience:
            self.left = f"patience exhausted after {self.useless} useless system turns"
            return [(self._cur_service(), "GOODBYE", "", None)], True, True
        if self.repair:
            # the system acted on a slip of the user's last turn: the correction comes first and alone (no
            # SELECT of an offer found with the wrong value, no GOODBYE), and it is not itself corrupted
            out, self.repair = self.repair, []
            return out, False, False
        out, end = self._react(sub, by)
        return out, end, True

    def _chance(self, p: float, shown: Callable[[set], bool]) -> bool:
        """A draw that comes out true with probability ``p``; while warming, what the logged answer shows it gave
        (``shown`` of the acts that answer says)."""
        told = self._told
        if told is None:
            return self.rng.random() < p
        return shown(told)

    def _told_inform(self, item: tuple[str, str, str]) -> bool:
        return item[0] == "INFORM" and ("INFORM", item[1]) in self._told

    def _volunteers(self, slot: str) -> bool:
        """Whether the user volunteers ``slot`` now (probability ``verbosity``); while warming, whether the logged
        answer informs it."""
        told = self._told
        if told is None:
            return self.rng.random() < self.verbosity
        return ("INFORM", slot) in told

    def verdict(self) -> Verdict:
        """Success when every subgoal was fulfilled and every requested slot informed; else why not."""
        fulfilled = requested = informed = relaxed = alternatives = 0
        for s in self.subs:
            fulfilled += s.fulfilled
            requested += len(s.requested)
            informed += len(s.requested) - len(s.pending)
            relaxed += s.relaxed
            alternatives += s.alts
        reward = {"turns": self.turns, "subgoals": len(self.subs), "fulfilled": fulfilled, "requested": requested,
                  "informed": informed, "relaxed": relaxed, "alternatives": alternatives}
        if self._all_done():
            return Verdict(outcome="success", reason="every goal intent fulfilled, every requested slot informed",
                           reward=reward, claims=[s.claim or self._claim(s, None) for s in self.subs])
        if self.left.startswith("patience"):
            return Verdict(outcome="abandoned", reason=self.left, reward=reward)
        for s in self.subs:
            if not s.done:
                why = s.reason or (f"requested slots not informed: {', '.join(s.pending)}" if s.fulfilled
                                   else "not fulfilled")
                reason = f"{s.service}.{s.intent}: {why}"
                if self.left:
                    reason += f" ({self.left})"
                return Verdict(outcome="failure", reason=reason, reward=reward)
        return Verdict(outcome="failure", reason=self.left or "goal not met", reward=reward)

    def _understand(self, utterance: str) -> list[Act]:
        """The system acts of a text-only agent turn, read in the light of the current subgoal."""
        sub = self._cur() or self.subs[-1]
        known: dict[str, list[str]] = {}
        for values in (sub.constraints, sub.optional, self._said(sub.service), sub.row,
                       sub.offered or _EMPTY, dict(sub.relax)):
            for slot, value in values.items():
                if value != "dontcare" and value not in known.setdefault(slot, []):
                    known[slot].append(value)
        ctx = Context(sub.service, sub.intent, known, sub.requested)
        return for_pack(self.pack).understand(utterance, ctx)

    def _claim(self, sub: _Sub, entity: dict[str, str] | None) -> Claim:
        """What the user believes it got for ``sub``: its constraints, the optional values it said, the entity."""
        said = self._said(sub.service)
        held = {s: v for s, v in sub.optional.items() if _same(said.get(s), v)}
        held.update(sub.constraints)
        return Claim(service=sub.service, intent=sub.intent, transactional=sub.transactional, constraints=held,
                     entity=entity)

    # -- goal bookkeeping -------------------------------------------------------------------------

    def _service(self, name: str, schemas: dict[str, Any] | None = None) -> _Service:
        svc = self._services.get(name)
        if svc is None:
            schema = (schemas or {}).get(name) or self.pack.schemas[name]
            svc = self._services[name] = _Service(schema)
        return svc

    def intents_of(self, service: str) -> list[str]:
        """The intents of ``service``, in schema order (what a slip of the noise model may say instead)."""
        return self._service(service).intents

    def _all_done(self) -> bool:
        for s in self.subs:
            if not s.done:
                return False
        return True

    def _cur(self) -> _Sub | None:
        return self.subs[self.idx] if self.idx < len(self.subs) else None

    def _cur_service(self) -> str:
        sub = self._cur()
        return sub.service if sub else self.subs[-1].service

    def _activate(self, i: int) -> None:
        """Make subgoal ``i`` current: fill slots from the previous entity and push its acts."""
        self.idx = i
        if i >= len(self.subs):
            return
        sub = self.subs[i]
        if sub.from_previous and i > 0 and self.subs[i - 1].failed and not self.subs[i - 1].row:
            # it builds on an entity that was never found: nothing to ask for
            sub.failed = True
            sub.reason = f"it depends on {self.subs[i - 1].service}.{self.subs[i - 1].intent}, which failed"
            self._activate(i + 1)
            return
        if sub.from_previous and i > 0:
            prev = self.subs[i - 1]
            known = {**prev.constraints, **prev.row}
            if prev.from_previous and i > 1 and self.subs[i - 2].service == prev.service:
                # prev booked what the search before it found: what the user heard of that entity counts too
                known = {**self.subs[i - 2].row, **known}
            for slot, src in sub.from_previous.items():
                value = known.get(src) or self._lookup(prev, src, known)
                if value:
                    sub.constraints.setdefault(slot, value)
        # bottom to top: requests (asked once an entity is on the table), informs, then the intent
        service = sub.service
        agenda = []  # loops, not comprehensions: those would make ``service`` a cell (see _shifted)
        for r in reversed(sub.requested):
            agenda.append(("REQUEST", r, service))
        slots = list(sub.constraints)
        if len(slots) > 1:  # a random rotation: cheaper than a shuffle, still varies what is said first
            k = int(self.rng.random() * len(slots))
            slots = slots[k:] + slots[:k]
        for s in slots:
            agenda.append(("INFORM", s, service))
        agenda.append(("INFORM_INTENT", sub.intent, service))
        self.agenda = agenda

    def _lookup(self, prev: _Sub, slot: str, known: dict[str, str]) -> str | None:
        """A value of the previous entity the user never heard: look the entity up in the pack's table."""
        if not prev.row:
            return None
        svc = self._service(prev.service)
        best: list[dict[str, str]] | None = None
        for k, v in prev.row.items():  # the rows sharing the most selective known value
            rows = svc.rows_with(self.pack, k, v)
            if rows is not None and (best is None or len(rows) < len(best)):
                best = rows
        for row in best or ():
            if slot in row and _agrees(row, prev.row):
                return row[slot]
        return None

    def _value(self, sub: _Sub, slot: str) -> str | None:
        v = sub.constraints.get(slot)
        if v is None:
            v = sub.optional.get(slot)
        return v

    # -- turn building ----------------------------------------------------------------------------

    def _pop_volunteers(self, out: list, sub: _Sub, limit: int) -> None:
        """Pop INFORMs of not yet stated constraints from the agenda, each with probability verbosity."""
        agenda, constraints = self.agenda, sub.constraints
        if self._told is not None:  # warming: the slots the logged answer volunteered come first (on top)
            agenda.sort(key=self._told_inform)
        said = self._said(sub.service)
        in_turn = None  # slots this turn already speaks of, built on first need
        n = 0
        while n < limit and agenda and agenda[-1][0] == "INFORM":
            _, slot, service = agenda[-1]
            value = constraints.get(slot)
            if value is None or _same(said.get(slot), value):
                agenda.pop()
                continue
            if in_turn is None:
                in_turn = {o[2] for o in out}
            if slot in in_turn:
                agenda.pop()
                continue
            if not self._volunteers(slot):
                break
            agenda.pop()
            out.append((service, "INFORM", slot, value))
            in_turn.add(slot)
            n += 1

    def _opening(self) -> list:
        sub = self.subs[self.idx]
        self.agenda.pop()  # the INFORM_INTENT on top
        out = [(sub.service, "INFORM_INTENT", "intent", sub.intent)]
        self._pop_volunteers(out, sub, 4)
        return out

    def _open_next(self, out: list) -> bool:
        """Move to the next subgoal and say its intent (with some constraints); returns end."""
        service = self._cur_service()
        self._activate(self.idx + 1)
        sub = self._cur()
        if sub is None:  # the rest depended on what failed: close
            out += [(service, "THANK_YOU", "", None), (service, "GOODBYE", "", None)]
            return True
        self.agenda.pop()
        out.append((sub.service, "INFORM_INTENT", "intent", sub.intent))
        self._pop_volunteers(out, sub, 3)
        return False

    def _finish(self, out: list, sub_service: str, after_req_more: bool) -> bool:
        """Nothing left to do: close the dialogue (returns end)."""
        if after_req_more:
            if self._chance(0.75, _declines):
                out += [(sub_service, "NEGATE", "", None), (sub_service, "THANK_YOU", "", None)]
            else:
                out += [(sub_service, "THANK_YOU", "", None), (sub_service, "GOODBYE", "", None)]
            return True
        if self._chance(0.5, _stays):
            out.append((sub_service, "THANK_YOU", "", None))
            return False
        out += [(sub_service, "THANK_YOU", "", None), (sub_service, "GOODBYE", "", None)]
        return True

    def _move_on(self, out: list, sub: _Sub, after_req_more: bool) -> bool:
        """The current subgoal is settled: thank, open the next one or close (returns end)."""
        if self.idx + 1 < len(self.subs):
            nxt = self.subs[self.idx + 1]
            if after_req_more or self._chance(0.7, _opens):  # SGD users mostly go straight on
                if nxt.service != sub.service and not after_req_more:
                    out.append((sub.service, "THANK_YOU", "", None))
                return self._open_next(out)
            else:
                out.append((sub.service, "THANK_YOU", "", None))
            return False
        self.idx = len(self.subs)
        return self._finish(out, sub.service, after_req_more)

    def _ask(self, out: list, sub: _Sub, most: int) -> None:
        """REQUEST up to ``most`` pending requested slots (the agenda's REQUEST items)."""
        asked = 0
        for slot in sub.pending:
            if asked >= most:
                break
            out.append((sub.service, "REQUEST", slot, None))
            asked += 1
        if asked:
            slots = {o[2] for o in out}  # the turn's REQUESTs leave the agenda
            self.agenda = [a for a in self.agenda if a[0] != "REQUEST" or a[1] not in slots]

    def _react(self, sub: _Sub | None, by: dict[str, list[Act]]) -> tuple[list, bool]:
        """The user's acts in answer to the system's acts on the current subgoal's service (``by`` act name),
        and whether the user ends the dialogue: the answer to the act that matters most, in this order."""
        out: list = []
        if sub is None:  # everything settled, the system keeps talking
            return out, self._finish(out, self.subs[-1].service, True)
        for a in by.get("INFORM", ()):
            if a.canonical_values:
                sub.row[a.slot] = a.canonical_values[0]
            if a.slot in sub.pending:
                sub.pending.remove(a.slot)
        if "CONFIRM" in by:
            end = self._confirmation(out, sub, by["CONFIRM"])
        elif "NOTIFY_SUCCESS" in by:
            end = self._succeeded(out, sub)
        elif "NOTIFY_FAILURE" in by and "OFFER" not in by:
            end = self._failed(out, sub, "REQ_MORE" in by)
        elif "OFFER" in by:
            end = self._offer(out, sub, by)
        elif "REQUEST" in by:
            end = self._requested(out, sub, by["REQUEST"])
        elif "OFFER_INTENT" in by:
            end = self._intent_offered(out, sub, by["OFFER_INTENT"][0].canonical_values)
        elif "REQ_MORE" in by:
            end = self._move_on(out, sub, True) if sub.done else self._unstick(out, sub)
        elif "INFORM" in by and sub.offered is not None and not sub.selected:
            end = self._decide_offer(out, sub)  # the details asked about the offer are in
        elif "INFORM" in by and sub.done:
            end = self._move_on(out, sub, False)
        else:
            end = self._unstick(out, sub)
        return out, end

    def _confirmation(self, out: list, sub: _Sub, confirms: list[Act]) -> bool:
        """Correct a confirmation that got a value wrong, else affirm it (and maybe ask what is pending)."""
        wrong = []
        for a in confirms:
            mine = self._value(sub, a.slot)
            heard = a.canonical_values[0] if a.canonical_values else None
            if mine is not None and not _same(mine, heard) and mine != "dontcare":
                wrong.append((a.slot, mine))
        svc = sub.service
        if wrong:
            out.append((svc, "NEGATE", "", None))
            for s, v in wrong:
                out.append((svc, "INFORM", s, v))
            return False
        for a in confirms:
            if a.canonical_values:
                sub.row[a.slot] = a.canonical_values[0]
                self._accept(svc, a)
        out.append((svc, "AFFIRM", "", None))
        if sub.pending and self._chance(0.5, _asks):
            self._ask(out, sub, 2)
        return False

    def _succeeded(self, out: list, sub: _Sub) -> bool:
        """The booking is made: ask what is still pending, else move on."""
        sub.fulfilled = True
        sub.claim = self._claim(sub, None)
        if sub.pending:
            self._ask(out, sub, 2)
            return False
        return self._move_on(out, sub, False)

    def _requested(self, out: list, sub: _Sub, requests: list[Act]) -> bool:
        """Answer the system's questions: affirm a value it proposes that suits, else inform the user's own (a
        fallback when the goal has none), and maybe volunteer more."""
        svc = sub.service
        for a in requests:
            mine = self._value(sub, a.slot)
            if a.canonical_values and (mine is None or _same(mine, a.canonical_values[0])):
                out.append((svc, "AFFIRM", "", None))
                sub.constraints.setdefault(a.slot, a.canonical_values[0])
                self._accept(svc, a)
                continue
            if mine is None:
                mine = self._fallback(sub, a.slot)
                sub.constraints[a.slot] = mine
            out.append((svc, "INFORM", a.slot, mine))
        self._pop_volunteers(out, sub, 2)
        return False

    def _intent_offered(self, out: list, sub: _Sub, offered: list[str]) -> bool:
        """Take an offered intent that is the next subgoal's, else refuse it and ask, open the next subgoal or
        close."""
        svc = sub.service
        nxt = self.subs[self.idx + 1] if self.idx + 1 < len(self.subs) else None
        if sub.done and nxt is not None and nxt.service == svc and offered and nxt.intent == offered[0]:
            self._activate(self.idx + 1)
            self.agenda.pop()
            out.append((svc, "AFFIRM_INTENT", "", None))
            self._pop_volunteers(out, nxt, 2)
            return False
        out.append((svc, "NEGATE_INTENT", "", None))
        if sub.fulfilled and sub.pending:
            self._ask(out, sub, 2)
        elif sub.done:
            if nxt is None:
                self.idx = len(self.subs)
                if self._chance(0.3, _leaves):
                    out.append((svc, "GOODBYE", "", None))
                    return True
            elif self._chance(0.5, _opens):
                return self._open_next(out)
        return False

    def _unstick(self, out: list, sub: _Sub) -> bool:
        """A system turn the agenda has no rule for: ask what is still unknown, else restate the intent."""
        if sub.fulfilled and sub.pending:
            self._ask(out, sub, 2)
            return False
        out.append((sub.service, "INFORM_INTENT", "intent", sub.intent))
        said = self._said(sub.service)
        for slot, value in sub.constraints.items():
            if not _same(said.get(slot), value):
                out.append((sub.service, "INFORM", slot, value))
                break
        return False

    def _fallback(self, sub: _Sub, slot: str) -> str:
        """A value for a slot the goal says nothing about: "dontcare", or any allowed value."""
        svc = self._service(sub.service)
        if slot not in svc.categorical:
            return "dontcare"
        values = self.pack.service(sub.service).possible_values(slot)
        return values[0] if values else "dontcare"

    def _failed(self, out: list, sub: _Sub, req_more: bool) -> bool:
        """The intent failed: relax the next constraint and retry, or give the subgoal up."""
        svc = sub.service
        if sub.relax:
            slot, value = sub.relax.pop(0)
            sub.relaxed += 1
            if slot in sub.constraints or slot in sub.optional or value != "dontcare":
                sub.constraints[slot] = value
            out.append((svc, "INFORM", slot, value))
            if not sub.transactional:
                out.append((svc, "REQUEST_ALTS", "", None))
            elif req_more:
                out.append((svc, "INFORM_INTENT", "intent", sub.intent))
            return False
        if sub.transactional and sub.retries < 1:
            # a booking can fail for no reason the user sees: try once more as it is
            sub.retries += 1
            out.append((svc, "INFORM_INTENT", "intent", sub.intent))
            return False
        sub.failed = True
        sub.reason = sub.reason or "the system notified failure and no relaxation was left"
        if self.idx + 1 < len(self.subs):
            return self._open_next(out)
        self.idx = len(self.subs)
        out += [(svc, "THANK_YOU", "", None), (svc, "GOODBYE", "", None)]
        return True

    def _offer(self, out: list, sub: _Sub, by: dict[str, list[Act]]) -> bool:
        """Hear an offer: say what the system searched without, turn down an entity that contradicts the goal,
        take an alternative to a failed booking, else ask about the entity or decide on it."""
        offered = self._note_offer(sub, by)
        said = self._said(sub.service)
        # only what the user holds to counts against an offer: constraints, and optional values it said
        conflict = [s for s, v in offered.items()
                    if (sub.constraints.get(s) or (said.get(s) if s in sub.optional else None)) not in (None, "dontcare")
                    and not _same(sub.constraints.get(s) or said.get(s), v)]
        args = self._service(sub.service).args
        unsaid = [(s, v) for s, v in sub.constraints.items() if not _same(said.get(s), v) and s in args]
        if unsaid and (conflict or not offered.keys() >= {s for s, _ in unsaid}) and "NOTIFY_FAILURE" not in by:
            # the system searched before hearing everything: say the rest (and ask again when the offer is wrong)
            out += [(sub.service, "INFORM", s, v) for s, v in unsaid]
            if conflict:
                out.append((sub.service, "REQUEST_ALTS", "", None))
            return False
        if conflict:
            return self._contradicted(out, sub, offered, "NOTIFY_FAILURE" in by)
        if "NOTIFY_FAILURE" in by:
            for a in self._offer_acts:
                self._accept(sub.service, a)
            out.append((sub.service, "AFFIRM", "", None))
            return False
        if sub.pending and self._chance(self.request_first, _asks_first):
            self._ask(out, sub, 2)
            return False
        return self._decide_offer(out, sub)

    def _note_offer(self, sub: _Sub, by: dict[str, list[Act]]) -> dict[str, str]:
        """Put the offered entity (its canonical values, returned) on the table, with how many results there are."""
        offered = {a.slot: a.canonical_values[0] for a in by["OFFER"] if a.canonical_values}
        if "INFORM_COUNT" in by and by["INFORM_COUNT"][0].canonical_values:
            count = by["INFORM_COUNT"][0].canonical_values[0]
            sub.count = int(count) if count.isdigit() else None
        elif sub.offered is None and not sub.alts:
            sub.count = 1  # a first offer without a count: the only result
        sub.offered = offered
        sub.selected = False
        self._offer_acts = by["OFFER"]
        return offered

    def _contradicted(self, out: list, sub: _Sub, offered: dict[str, str], after_failure: bool) -> bool:
        """An offer that contradicts the goal: take it after a failed booking if it is the next relaxation anyway,
        else ask for another (a few times) or give the subgoal up."""
        if sub.transactional and after_failure and sub.relax:
            slot, value = sub.relax[0]
            if slot in offered and (value == "dontcare" or _same(offered[slot], value)):
                sub.relax.pop(0)
                sub.relaxed += 1
                for s, v in offered.items():
                    if s in sub.constraints:
                        sub.constraints[s] = v
                for a in self._offer_acts:
                    self._accept(sub.service, a)
                out.append((sub.service, "AFFIRM", "", None))
                return False
        if after_failure:
            return self._failed(out, sub, False)
        if sub.alts < self.max_alts + 2:
            sub.alts += 1
            out.append((sub.service, "REQUEST_ALTS", "", None))
            return False
        sub.reason = "every offer contradicted the user's constraints"
        return self._failed(out, sub, False)

    def _decide_offer(self, out: list, sub: _Sub) -> bool:
        """With the offer's details known: ask for alternatives now and then, else select it."""
        more = sub.count is None or sub.alts + 1 < sub.count  # are there other results to hear?
        if more and sub.alts < self.max_alts and self._chance(self.alts_rate, _wants_alts):
            sub.alts += 1
            sub.offered = None
            out.append((sub.service, "REQUEST_ALTS", "", None))
            return False
        svc = sub.service
        sub.selected = True
        sub.row.update(sub.offered or {})
        for a in self._offer_acts:
            self._accept(svc, a)
        out.append((svc, "SELECT", "", None))
        if not sub.transactional:
            sub.fulfilled = True
            sub.claim = self._claim(sub, dict(sub.offered or {}))
        if sub.pending:
            if self._chance(0.5, _asks):
                self._ask(out, sub, 1)
            return False
        if not sub.done:
            return False
        nxt = self.subs[self.idx + 1] if self.idx + 1 < len(self.subs) else None
        if nxt is not None and nxt.service == svc and self._chance(0.5, _opens):
            return self._open_next(out)
        if nxt is None and self._chance(0.35, _leaves):
            self.idx = len(self.subs)
            out.append((svc, "GOODBYE", "", None))
            return True
        return False

    # -- state and annotation ---------------------------------------------------------------------

    def _held(self, service: str) -> _Held:
        held = self.held.get(service)
        if held is None:
            held = self.held[service] = _Held(self._service(service).args)
        return held

    def _said(self, service: str) -> dict[str, str]:
        """The canonical values the user holds for ``service`` (read only)."""
        held = self.held.get(service)
        return held.canon if held is not None else _EMPTY

    def _accept(self, service: str, act: Act) -> None:
        """The user takes on a value the system said (a confirmed, proposed or selected one) into the state."""
        held = self._held(service)
        if act.slot in held.args and act.canonical_values and act.values:
            _hold(held, act.slot, act.canonical_values[0], act.values[0])

    def _say(self, service: str, slot: str, canon: str) -> str:
        """The spoken variant of ``canon`` this user uses (chosen once, then repeated)."""
        key = (service, slot, canon)
        spoken = self.spoken.get(key)
        if spoken is None:
            if canon == "dontcare" or slot in self._service(service).categorical:
                spoken = canon
            else:
                spoken = self.pack.spoken(service, slot, canon, self.rng)
            self.spoken[key] = spoken
        return spoken

    def _reply(self, out: list, end: bool, slips: bool = True) -> UserReply:
        """The turn saying ``out`` (maybe with slips): realized and annotated per service, the state folded in."""
        if end:
            self.ended = True
        noisy = out
        if self.noise is not None and out and slips:
            noisy, repair = self.noise.corrupt(out, self, self.rng)
            if repair:
                self.repair = repair
        frames: list[Frame] = []
        texts: list[str] = []
        offset = 0
        realize = self.pack.realizer.realize
        speaker = "USER" if self.turns else OPENING  # the opening turn leans on nothing said before
        for service, items, meant in _by_service(noisy, out):
            acts, requested, stateful = _PLAIN.get(tuple(items)) or self._acts(items)
            held = self._held(service)
            if stateful or meant is not items:
                self._update_state(held, meant)
            text, spans = realize(speaker, service, acts, self.rng)
            if offset:
                spans = _shifted(spans, offset)
            frames.append(Frame(service=service, actions=acts, slots=spans, state=held.annotation(requested)))
            texts.append(text)
            offset += len(text) + 1
        return UserReply(utterance=" ".join(texts), frames=frames, end=end)

    def _acts(self, items: list) -> tuple[list[Act], list[str], bool]:
        """The acts saying one service's ``items`` (in the order the realizer plans by), the slots they request,
        and whether any of them changes the state. Items without a spoken value are said alike in every
        dialogue: those turns are kept in _PLAIN."""
        acts: list[Act] = []
        requested: list[str] = []
        said = self.spoken
        plain = True
        stateful = False
        for service, act, slot, value in items:
            if act == "INFORM_INTENT":
                acts.append(Act(act=act, slot="intent", values=[value], canonical_values=[value]))
            elif value is not None:
                plain = False
                spoken = said.get((service, slot, value))
                if spoken is None:
                    spoken = self._say(service, slot, value)
                acts.append(Act(act=act, slot=slot, values=[spoken], canonical_values=[value]))
            else:
                acts.append(Act(act=act, slot=slot))
                if act == "REQUEST":
                    requested.append(slot)
            stateful = stateful or act in _STATEFUL
        if len(acts) > 1:
            acts.sort(key=_act_key)  # one order per signature (the realizer caches plans by signature)
        got = (acts, requested, stateful)
        if plain:
            if len(_PLAIN) > 100_000:  # a bound on memory; a pack's services say a few thousand such turns
                _PLAIN.clear()
            _PLAIN[tuple(items)] = got
        return got

    def _update_state(self, held: _Held, items: Any) -> None:
        """Fold the acts the user meant about one service into its state: intent, informed values (true, not
        noisy)."""
        for service, act, slot, value in items:
            if act not in _STATEFUL:
                continue
            if act == "INFORM_INTENT":
                held.active = value
            elif act == "NEGATE_INTENT" or (act == "NEGATE" and _closing(items)):
                held.active = "NONE"  # as SGD annotates a refused intent or "no, thanks"
            elif act == "AFFIRM_INTENT":
                sub = self._cur()
                if sub is not None and sub.service == service:
                    held.active = sub.intent
            elif act == "INFORM" and value is not None and slot in held.args:
                spoken = self.spoken.get((service, slot, value))  # said already when the turn was realized
                _hold(held, slot, value, spoken if spoken is not None else self._say(service, slot, value))


def _hold(held: _Held, slot: str, canon: str, spoken: str) -> None:
    """Put a value in the state: a new one replaces the slot's variants, the same one adds its variant."""
    cur = held.canon.get(slot)
    if cur is not None and (cur == canon or cur.lower() == canon.lower()):  # _same, inlined: a hot path
        variants = held.variants[slot]
        if spoken in variants:
            return
        variants.append(spoken)
    else:
        held.canon[slot] = canon
        held.variants[slot] = [spoken]
    held.changed[slot] = None


class _Services(dict):
    """Service name -> _Service, one per pack (``pack.derive(_Services)``) shared by every user over it:
    schemas and entity tables do not change, so the indexes built on demand (``rows_with``) are built once."""

    def __init__(self, pack: Any) -> None:
        super().__init__()


_OPTIONS = {"patience": int, "verbosity": float, "alts_rate": float, "max_alts": int, "request_first": float}


def make_factory(arg: str | None, scenarios: Any, options: dict[str, Any]) -> Any:
    """Registry factory for ``--user agenda``: options patience, verbosity, alts_rate, max_alts,
    request_first, and the noise model's slot_error, intent_error, noise_mode (strings are converted)."""
    from ..engine.errors import UserError
    from .noise import from_options

    kwargs: dict[str, Any] = {}
    noise_keys = {"slot_error", "intent_error", "noise_mode"}
    for key, value in options.items():
        if key in noise_keys:
            continue
        if key not in _OPTIONS:
            raise UserError(f"agenda user: unknown option {key!r} (known: {', '.join(sorted(_OPTIONS) + sorted(noise_keys))})")
        try:
            kwargs[key] = _OPTIONS[key](value)
        except (TypeError, ValueError):
            raise UserError(f"agenda user: option {key}={value!r} is not a valid {_OPTIONS[key].__name__}") from None
    try:
        noise = from_options(options)
    except ValueError as exc:
        raise UserError(f"agenda user: {exc}") from None
    pack = getattr(scenarios, "pack", None)
    if pack is None:
        raise UserError("agenda user: needs SGD scenarios (--scenarios sgd or a pack directory), "
                        f"not {getattr(scenarios, 'name', type(scenarios).__name__)!r}")
    services = pack.derive(_Services)

    def make() -> AgendaUser:
        return AgendaUser(pack, noise=noise, services=services, **kwargs)

    return make
