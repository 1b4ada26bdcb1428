"""Annotating a model-driven user's turns: its acts and slot spans read from its words, its true state from its goal.

A model speaks text only, yet the SGD and RL projections need every user turn's acts, spans and dialogue
state. The acts and spans are read with the project's own understanding of user text (``agents/nlu.py``, the
schema agent's reader), in the light of the goal's current service and the agent's last acts, and are marked
inferred on the turn. The state is the true one, from the goal the user was given: a slot's value enters it
when the user's words are read as informing a value the goal gives for that slot (a constraint, an optional
or carried value, a relaxation), and it holds the goal's canonical value with every way the user said it;
a value the reading finds that the goal does not give (a misreading, or the model improvising) stays out. As
in SGD (and the agenda user), values the agent put to the user and the user took join the state too: an
entity the agent offered (OFFER acts) when the user is read as selecting it, values the agent asked to confirm
(CONFIRM acts) when the user is read as affirming them; only slots the service's intents take as arguments.
Taking them needs the agent's acts (an agent that reports none, text only, adds nothing this way). The active
intent is the goal's intent the user is read as asking for, else the service's first goal intent once the
user speaks about it; requested slots are the goal's requested slots the user is read as asking for, this
turn only (as in SGD). Services are those of the goal; a turn nothing is read from gets a frame of the
current service with the state so far, so that every user turn carries a state.
"""

from __future__ import annotations

from typing import Any

from ..agents.nlu import ValueMatcher
from ..engine.contracts import Claim
from ..engine.events import Act, AgentTurn, DialogueState, Frame, SlotSpan


class TurnReader:
    """One episode's reading of a model user's turns against its SGD goal (see the module docstring)."""

    def __init__(self, pack: Any, goal: dict[str, Any], schemas: dict[str, Any]) -> None:
        self.matcher = ValueMatcher(pack, list(goal["services"]))
        self.subgoals = goal["subgoals"]
        self.schemas = schemas
        self.allowed: dict[tuple[str, str], dict[str, str]] = {}  # (service, slot) -> lower-cased value -> canonical
        self.intents: dict[str, list[str]] = {}
        self.requested: dict[str, set[str]] = {}
        self.args = {name: {s for i in schema.get("intents", ()) for s in [*i["required_slots"],
                                                                          *(i.get("optional_slots") or {})]}
                     for name, schema in schemas.items()}  # the slots SGD tracks in a service's state
        for sg in self.subgoals:
            service = sg["service"]
            self.intents.setdefault(service, []).append(sg["intent"])
            self.requested.setdefault(service, set()).update(sg.get("requested") or ())
            values = [*(sg.get("constraints") or {}).items(), *(sg.get("optional") or {}).items(),
                      *((s, v) for s, v in sg.get("relax") or ())]
            for slot, value in values:
                self.allowed.setdefault((service, slot), {})[value.lower()] = value
        self.current = self.subgoals[0]["service"]
        self.active: dict[str, str] = {}
        self.canon: dict[str, dict[str, str]] = {}  # service -> slot -> the goal's canonical value held
        self.spoken: dict[str, dict[str, list[str]]] = {}  # service -> slot -> the ways it was said

    def read(self, text: str, agent: AgentTurn | None) -> list[Frame]:
        """The frames of the user's turn ``text`` after the agent's turn ``agent`` (None: the opening turn)."""
        last: set[str] = set()
        expecting: list[str] = []
        put: dict[str, dict[str, list[Act]]] = {}  # service -> OFFER / CONFIRM -> the agent's acts
        for frame in agent.frames if agent is not None else ():
            for act in frame.actions:
                last.add(act.act)
                if act.act == "REQUEST":
                    expecting.append(act.slot)
                elif act.act in ("OFFER", "CONFIRM") and act.values:
                    put.setdefault(frame.service, {}).setdefault(act.act, []).append(act)
        spans: list[tuple[str, SlotSpan]] = []
        pairs = self.matcher.parse(text, self.current, self.active.get(self.current), last, expecting, spans)
        groups: dict[str, list[Act]] = {}
        for service, act in pairs:
            groups.setdefault(service, []).append(act)
        if not groups:
            groups[self.current] = []
        frames = []
        for service, acts in groups.items():
            requested = self._hold(service, acts)
            kinds = {a.act for a in acts}
            for taken in (("OFFER", "SELECT"), ("CONFIRM", "AFFIRM")):
                if taken[1] in kinds:
                    self._take(service, put.get(service, {}).get(taken[0], ()))
            if service not in self.active and service in self.intents:
                self.active[service] = self.intents[service][0]
            state = DialogueState(active_intent=self.active.get(service, "NONE"), requested_slots=requested,
                                  slot_values={k: sorted(v) for k, v in self.spoken.get(service, {}).items()})
            frames.append(Frame(service=service, actions=acts, slots=[s for name, s in spans if name == service],
                                state=state))
        if pairs:
            self.current = pairs[-1][0]
        return frames

    def _hold(self, service: str, acts: list[Act]) -> list[str]:
        """Take the turn's acts about ``service`` into the true state: the slots requested this turn."""
        requested = []
        for act in acts:
            if act.act == "INFORM_INTENT" and act.values and act.values[0] in self.intents.get(service, ()):
                self.active[service] = act.values[0]
            elif act.act == "INFORM" and act.slot:
                said = (act.canonical_values or act.values or [""])[0]
                canon = self.allowed.get((service, act.slot), {}).get(said.lower())
                if canon is None:
                    continue
                held = self.canon.setdefault(service, {})
                spoken = self.spoken.setdefault(service, {})
                variant = act.values[0] if act.values else canon
                if held.get(act.slot) == canon:
                    if variant not in spoken[act.slot]:
                        spoken[act.slot] = [*spoken[act.slot], variant]
                else:
                    held[act.slot] = canon
                    spoken[act.slot] = [variant]
            elif act.act == "REQUEST" and act.slot in self.requested.get(service, ()) and act.slot not in requested:
                requested.append(act.slot)
        return requested

    def _take(self, service: str, acts: Any) -> None:
        """Hold the values of the agent's acts the user took (an offer selected, a confirmation affirmed)."""
        args = self.args.get(service, ())
        for act in acts:
            if act.slot in args:
                canon = (act.canonical_values or act.values)[0]
                self.canon.setdefault(service, {})[act.slot] = canon
                self.spoken.setdefault(service, {})[act.slot] = [act.values[0]]

    def claims(self) -> list[Claim]:
        """What the user believes it got when it ends: each transactional part, with the values it holds for
        that intent's slots (the judge checks them against the calls made)."""
        out = []
        for sg in self.subgoals:
            intent = next((i for i in (self.schemas.get(sg["service"]) or {}).get("intents", ())
                           if i["name"] == sg["intent"]), None)
            if intent is None or not intent.get("is_transactional"):
                continue
            args = set(intent["required_slots"]) | set(intent.get("optional_slots") or {})
            held = self.canon.get(sg["service"], {})
            out.append(Claim(service=sg["service"], intent=sg["intent"], transactional=True,
                             constraints={k: v for k, v in held.items() if k in args}))
        return out
