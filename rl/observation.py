"""The environment's observation: the TC-Bot state tracker of an episode as a fixed-size vector (TC-Bot-like).

The tracker (rl/tracker.py) takes every turn as a TC-Bot act (rl/acts.py); the vector, float32 in [0, 1],
concatenates these blocks (S = the services' slot names, sorted, then the pseudo-slots "count" and "intent";
I = their intent names, sorted):

=====================  ============  ============================================================================
block                  size          1 where
=====================  ============  ============================================================================
``user_act``           9             the last user act's diaact: inform, request, confirm_answer, deny, select,
                                     request_alts, thanks, bye, none (anything else counts as none)
``user_inform``        len(S)        a slot the last user act informs
``user_request``       len(S)        a slot the last user act requests
``agent_act``          11            the last agent act's diaact: greeting (before any), inform, request,
                                     confirm_question, offer, offer_intent, notify_success, notify_failure,
                                     req_more, bye, none
``agent_inform``       len(S)        a slot the last agent act informs
``agent_request``      len(S)        a slot the last agent act requests
``known``              len(S)        a slot in the state's inform_slots (informed so far, by either side)
``requested``          len(S)        a slot in the state's request_slots (asked by the user, not yet answered)
``intent``             len(I) + 1    the agent's tracked active intent of the service in focus (last: none)
``results``            6             results of that service's last search: none yet, 0, 1, 2, 3-5, 6 or more
``call``               5             the call made this turn: none, a search with results, a search without,
                                     a booking made, a booking failed (an error counts as failed)
``turn``               1             turns so far (both sides) / max_turns
=====================  ============  ============================================================================

``Layout.blocks()`` gives each block's name, start and size; ``Observer.state()`` the tracker's state as a
dict (the dict form the environment puts in ``info["state"]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..agents.schema_agent import SchemaAgent
from ..engine.contracts import ToolResult
from ..engine.events import Frame
from .acts import turn_act
from .tracker import StateTracker

USER_DIAACTS = ("inform", "request", "confirm_answer", "deny", "select", "request_alts", "thanks", "bye", "none")
AGENT_DIAACTS = ("greeting", "inform", "request", "confirm_question", "offer", "offer_intent", "notify_success",
                 "notify_failure", "req_more", "bye", "none")
PSEUDO_SLOTS = ("count", "intent")
RESULT_BUCKETS = ("none yet", "0", "1", "2", "3-5", "6+")
CALLS = ("none", "search with results", "search without results", "booking made", "booking failed")
_BUCKET = (1, 2, 3, 4, 4, 4)  # results bucket by number of rows, for 0..5; 6 or more: 5


class Layout:
    """Where each block of the vector starts, for some services' schemas."""

    def __init__(self, schemas: list[dict[str, Any]]) -> None:
        names = sorted({s["name"] for schema in schemas for s in schema["slots"]} - set(PSEUDO_SLOTS))
        self.slots = names + list(PSEUDO_SLOTS)
        self.intents = sorted({i["name"] for schema in schemas for i in schema["intents"]})
        self.transactional = {(schema["service_name"], i["name"]): bool(i.get("is_transactional"))
                              for schema in schemas for i in schema["intents"]}
        n = len(self.slots)
        sizes = [("user_act", len(USER_DIAACTS)), ("user_inform", n), ("user_request", n),
                 ("agent_act", len(AGENT_DIAACTS)), ("agent_inform", n), ("agent_request", n), ("known", n),
                 ("requested", n), ("intent", len(self.intents) + 1), ("results", len(RESULT_BUCKETS)),
                 ("call", len(CALLS)), ("turn", 1)]
        self.start: dict[str, int] = {}
        offset = 0
        for name, size in sizes:
            self.start[name] = offset
            offset += size
        self._sizes = dict(sizes)
        self.size = offset
        self.slot_index = {slot: i for i, slot in enumerate(self.slots)}
        self.intent_index = {intent: i for i, intent in enumerate(self.intents)}
        self.user_act_index = {act: i for i, act in enumerate(USER_DIAACTS)}
        self.agent_act_index = {act: i for i, act in enumerate(AGENT_DIAACTS)}

    def blocks(self) -> list[tuple[str, int, int]]:
        """(name, start, size) of every block, in order."""
        return [(name, self.start[name], self._sizes[name]) for name in self.start]


class Observer:
    """One episode's TC-Bot tracker, fed the turns as they are said, and its vector."""

    def __init__(self, layout: Layout, max_turns: int) -> None:
        self.layout = layout
        self.max_turns = max_turns
        self.reset()

    def reset(self) -> None:
        """Forget the episode."""
        self.tracker = StateTracker()
        self.user_act: dict[str, Any] | None = None
        self.agent_act: dict[str, Any] | None = None
        self.call = 0  # the kind of the call made this turn (an index into CALLS)
        self.searched: set[str] = set()  # services a search of which has returned

    def user_turn(self, frames: list[Frame]) -> None:
        """A user turn was said."""
        self.user_act = act = turn_act(frames, "user")
        self.tracker.update_user(act)
        self.call = 0

    def tool_result(self, service: str, intent: str, result: ToolResult) -> None:
        """The agent's call of ``intent`` of ``service`` returned ``result``."""
        ok = bool(result.results) and result.error is None
        if self.layout.transactional.get((service, intent), False):
            self.call = 3 if ok else 4
        else:
            self.call = 1 if ok else 2
            self.searched.add(service)

    def agent_turn(self, frames: list[Frame]) -> None:
        """An agent turn was said."""
        self.agent_act = act = turn_act(frames, "agent")
        self.tracker.update_agent(act)

    def state(self) -> dict[str, Any]:
        """The tracker's state, a new dict."""
        return self.tracker.state()

    def vector(self, voice: SchemaAgent) -> np.ndarray:
        """The observation now, ``voice`` holding the agent's belief."""
        lay = self.layout
        start, slot_index = lay.start, lay.slot_index
        out = np.zeros(lay.size, dtype=np.float32)
        user = self.user_act
        if user is not None:
            out[start["user_act"] + lay.user_act_index.get(user["diaact"], len(USER_DIAACTS) - 1)] = 1.0
            _bits(out, start["user_inform"], slot_index, user["inform_slots"])
            _bits(out, start["user_request"], slot_index, user["request_slots"])
        agent = self.agent_act
        if agent is None:
            out[start["agent_act"]] = 1.0  # the greeting
        else:
            out[start["agent_act"] + lay.agent_act_index.get(agent["diaact"], len(AGENT_DIAACTS) - 1)] = 1.0
            _bits(out, start["agent_inform"], slot_index, agent["inform_slots"])
            _bits(out, start["agent_request"], slot_index, agent["request_slots"])
        tracker = self.tracker
        _bits(out, start["known"], slot_index, tracker.inform_slots)
        _bits(out, start["requested"], slot_index, tracker.request_slots)
        track = voice.tracks.get(voice.current) if voice.current else None
        intent = track.intent if track is not None else None
        out[start["intent"] + (lay.intent_index.get(intent, len(lay.intents)) if intent else len(lay.intents))] = 1.0
        if track is None or voice.current not in self.searched:
            bucket = 0
        else:
            n = len(track.results)
            bucket = _BUCKET[n] if n < 6 else 5
        out[start["results"] + bucket] = 1.0
        out[start["call"] + self.call] = 1.0
        out[start["turn"]] = min(1.0, tracker.turn / self.max_turns)
        return out


def _bits(out: np.ndarray, start: int, index: dict[str, int], slots: dict[str, Any]) -> None:
    for slot in slots:
        i = index.get(slot)
        if i is not None:
            out[start + i] = 1.0
