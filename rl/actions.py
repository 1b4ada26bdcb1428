"""The environment's action space: the schema agent's dialogue moves over a pack's services, as ids.

An action is a move whose values the environment fills in from what the agent has heard and what the world
has returned, as TC-Bot's acts with placeholders are filled from its database. The agent's belief and voice
are the rule-based schema agent's (agents/schema_agent.py): it tracks the user's acts, and it realizes the
acts with the pack's templates, so every turn is SGD-annotated. Ids, for services S1..Sn in the given order:

======================================  =======================================================================
action                                  what is said or done
======================================  =======================================================================
``REQ_MORE``                            REQ_MORE about the service in focus ("How can I help you?" before any)
``GOODBYE``                             GOODBYE; ends the dialogue
then for each service ``S``:
``S:REQUEST(slot)``                     REQUEST the slot, for every slot an intent of S takes (schema order)
``S:CONFIRM``                           CONFIRM the active intent's values and defaults (needs an active intent)
``S:CALL(intent)``                      call the intent with the tracked values (a transaction with its
                                        defaults): a tool round inside the turn, not a turn; the next step
                                        sees the result
``S:OFFER``                             OFFER the next result of the last search (the first one after a new
                                        search, with INFORM_COUNT as often as the schema agent says it),
                                        with INFORMs answering the slots the user requested (needs results)
``S:INFORM(slot)``                      INFORM the slot of the entity talked about (booked, selected or
                                        offered), for every slot an intent of S returns (needs the value)
``S:ANSWER``                            INFORM every slot the user requested this turn that the entity holds
                                        (needs one)
``S:OFFER_INTENT(intent)``              OFFER_INTENT, for every transactional intent of S
``S:NOTIFY_SUCCESS``                    NOTIFY_SUCCESS, with INFORMs answering the user's requests from the
                                        booking
``S:NOTIFY_FAILURE``                    NOTIFY_FAILURE and REQ_MORE
======================================  =======================================================================

An action that cannot be filled now (``mask`` says which can) is said as ``REQ_MORE`` instead, a wasted
turn. Nothing stops a false NOTIFY_SUCCESS: the judge fails an episode whose user believes one that no
logged call backs. ``action_of`` maps any schema-agent reply to the id of its move, so the rule-based agent
is a policy over these ids (rl/policies.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..agents.schema_agent import SchemaAgent
from ..engine.contracts import AgentReply

REQ_MORE, GOODBYE = "REQ_MORE", "GOODBYE"
_CONDITIONAL = frozenset(("CONFIRM", "OFFER", "INFORM", "ANSWER"))  # kinds that need the belief to be filled
# a reply's move is its first act kind in this order (closing, the outcome, asking, proposing, informing)
_MOVE_RANK = ("GOODBYE", "NOTIFY_FAILURE", "NOTIFY_SUCCESS", "CONFIRM", "REQUEST", "OFFER_INTENT", "OFFER",
              "INFORM", "REQ_MORE")


class Action(msgspec.Struct, frozen=True):
    """One action: its kind (an SGD act, CALL or ANSWER), the service and the slot or intent it is about."""

    kind: str
    service: str = ""
    arg: str = ""

    @property
    def name(self) -> str:
        """``S:KIND(arg)``, ``S:KIND`` or ``KIND``."""
        text = f"{self.kind}({self.arg})" if self.arg else self.kind
        return f"{self.service}:{text}" if self.service else text


def service_actions(schema: dict[str, Any]) -> list[Action]:
    """The actions about one service, in id order (see the table above)."""
    name = schema["service_name"]
    intents = schema["intents"]
    taken = {s for i in intents for s in [*i["required_slots"], *(i.get("optional_slots") or {})]}
    returned = {s for i in intents for s in i.get("result_slots", ())}
    slots = [s["name"] for s in schema["slots"]]
    return [*(Action("REQUEST", name, s) for s in slots if s in taken),
            Action("CONFIRM", name),
            *(Action("CALL", name, i["name"]) for i in intents),
            Action("OFFER", name),
            *(Action("INFORM", name, s) for s in slots if s in returned),
            Action("ANSWER", name),
            *(Action("OFFER_INTENT", name, i["name"]) for i in intents if i.get("is_transactional")),
            Action("NOTIFY_SUCCESS", name),
            Action("NOTIFY_FAILURE", name)]


class ActionSet:
    """The numbered actions over some services of a pack, and how the environment fills and recognizes them."""

    def __init__(self, schemas: list[dict[str, Any]]) -> None:
        self.services = [s["service_name"] for s in schemas]
        self.actions: list[Action] = [Action(REQ_MORE), Action(GOODBYE)]
        for schema in schemas:
            self.actions += service_actions(schema)
        self.ids = {action: i for i, action in enumerate(self.actions)}
        # the mask: ids that can always be filled, and per service the ids that need its belief
        self._always = bytes(a.kind not in _CONDITIONAL for a in self.actions)
        self._conditional = {
            name: (self.ids[Action("CONFIRM", name)], self.ids[Action("OFFER", name)], self.ids[Action("ANSWER", name)],
                   [(a.arg, i) for i, a in enumerate(self.actions) if a.kind == "INFORM" and a.service == name])
            for name in self.services}

    def __len__(self) -> int:
        return len(self.actions)

    def names(self) -> list[str]:
        """Every action's name, in id order."""
        return [a.name for a in self.actions]

    def mask(self, voice: SchemaAgent) -> bytearray:
        """Which actions can be filled from ``voice``'s belief now: 1 or 0 per id."""
        out = bytearray(self._always)
        conditional = self._conditional
        for name, track in voice.tracks.items():
            ids = conditional.get(name)
            if ids is None:
                continue
            confirm, offer, answer, informs = ids
            if track.intent is not None:
                out[confirm] = 1
            if track.results:
                out[offer] = 1
            entity = track.entity()
            if entity is not None:
                for slot, i in informs:
                    if entity.get(slot) not in (None, ""):
                        out[i] = 1
                if track.answers():
                    out[answer] = 1
        return out

    def realize(self, action_id: int, voice: SchemaAgent) -> tuple[AgentReply, bool]:
        """The reply saying (or the call making) action ``action_id`` with ``voice``, and whether it could be
        filled (if not, REQ_MORE is said instead)."""
        action = self.actions[action_id]
        reply = _fill(action, voice)
        if reply is None:
            return voice.say(voice.current, [(REQ_MORE, "", None)], end=False), False
        return reply, True

    def action_of(self, reply: AgentReply) -> int | None:
        """The id of the move a schema-agent reply makes (None when it is none of these actions): a call is
        CALL, else the reply's first act kind in the order GOODBYE, NOTIFY_FAILURE, NOTIFY_SUCCESS, CONFIRM,
        REQUEST (of its first slot), OFFER_INTENT, OFFER, INFORM (ANSWER when it informs several slots),
        REQ_MORE; a reply without acts is REQ_MORE (the open question)."""
        if reply.tool_calls:
            call = reply.tool_calls[0]
            return self.ids.get(Action("CALL", call.service, call.method))
        if not reply.frames:
            return self.ids[Action(REQ_MORE)]
        service = reply.frames[0].service
        acts = [a for f in reply.frames if f.service == service for a in f.actions]
        kinds = {a.act for a in acts}
        kind = next((k for k in _MOVE_RANK if k in kinds), None)
        if kind in (GOODBYE, REQ_MORE):
            return self.ids[Action(kind)]
        if kind == "REQUEST":
            return self.ids.get(Action(kind, service, next(a.slot for a in acts if a.act == kind)))
        if kind == "OFFER_INTENT":
            act = next(a for a in acts if a.act == kind)
            return self.ids.get(Action(kind, service, (act.canonical_values or act.values or [""])[0]))
        if kind == "INFORM":
            informed = [a.slot for a in acts if a.act == kind]
            return self.ids.get(Action(kind, service, informed[0]) if len(informed) == 1 else Action("ANSWER", service))
        if kind is None:
            return None
        return self.ids.get(Action(kind, service))


def _fill(action: Action, voice: SchemaAgent) -> AgentReply | None:
    """The reply for ``action`` from ``voice``'s belief, or None when the belief cannot fill it."""
    kind, name = action.kind, action.service
    if kind == REQ_MORE:
        return voice.say(voice.current, [(REQ_MORE, "", None)], end=False)
    if kind == GOODBYE:
        return voice.say(voice.current or voice.names[0], [(GOODBYE, "", None)], end=True)
    if kind == "REQUEST":
        return voice.say(name, [("REQUEST", action.arg, None)], end=False)
    if kind == "CALL":
        return voice.call(name, action.arg, [])
    if kind == "OFFER_INTENT":
        voice.offered_intent = (name, action.arg)
        return voice.say(name, [("OFFER_INTENT", "intent", action.arg)], end=False)
    if kind == "NOTIFY_FAILURE":
        return voice.say(name, [("NOTIFY_FAILURE", "", None), (REQ_MORE, "", None)], end=False)
    track = voice.tracks.get(name)
    if kind == "NOTIFY_SUCCESS":
        booked = track.booked if track is not None else None
        told = [("INFORM", s, booked[s]) for s in track.requested if s in booked] if booked else []
        return voice.say(name, told + [("NOTIFY_SUCCESS", "", None)], end=False)
    if track is None:
        return None
    if kind == "CONFIRM":
        return voice.confirm(name) if track.intent is not None else None
    if kind == "OFFER":
        return _offer(voice, name) if track.results else None
    if kind == "INFORM":
        entity = track.entity()
        value = entity.get(action.arg) if entity is not None else None
        return voice.say(name, [("INFORM", action.arg, value)], end=False) if value not in (None, "") else None
    if kind == "ANSWER":
        answers = track.answers()
        return voice.say(name, answers, end=False) if answers else None
    raise ValueError(f"unknown action kind {kind!r}")


def _offer(voice: SchemaAgent, name: str) -> AgentReply:
    """OFFER the first result of a new search (with its count as often as the schema agent gives it), else the
    next one; with INFORMs answering what the user requested of it."""
    track = voice.tracks[name]
    if track.offered is None:  # a new search: its first result, as the schema agent offers it after the call
        rows = track.results
        acts = voice.offer(name, rows[0])
        if len(rows) > 1 and voice.rng.random() < voice.count_rate:
            acts.append(("INFORM_COUNT", "count", str(len(rows))))
    else:
        acts = voice.next_offer(name)
    said = {a[1] for a in acts}
    return voice.say(name, acts + [a for a in track.answers() if a[1] not in said], end=False)
