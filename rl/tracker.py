"""The TC-Bot-style dialogue state tracker: one act at a time in, the dialogue state out.

An act is a TC-Bot dialogue act, a dict ``{diaact, request_slots, inform_slots, speaker}`` (other keys are
kept as they are). The state, as the seed converter writes it (FORMATS.md section 3)::

    {"user_action": last user act + "turn" (null before the first),
     "current_slots": {"inform_slots", "request_slots", "proposed_slots", "agent_request_slots"},
     "turn": acts seen so far,
     "history": every act so far (user acts with their "turn"; agent acts as given, without one),
     "agent_action": last agent act (the greeting act before the first)}

Update rules. A user act: each inform slot is set in inform_slots and leaves request_slots; each request
slot not yet in request_slots is added there as "UNK". An agent act: each inform slot is set in
proposed_slots and in inform_slots and leaves request_slots; each request slot is set to "UNK" in
agent_request_slots. Every act counts one turn. The tracker keeps the JSON of what it has seen, so a state
costs one concatenation (``state_json``); ``state`` decodes it, which gives a deep, independent copy.
"""

from __future__ import annotations

from typing import Any

import msgspec

GREETING: dict[str, Any] = {"diaact": "greeting", "inform_slots": {}, "request_slots": {}}
BYE: dict[str, Any] = {"diaact": "bye", "inform_slots": {}, "request_slots": {}}
UNK = "UNK"

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.decode
_GREETING_JSON = _encode(GREETING)


class StateTracker:
    """The dialogue state of one episode, updated act by act (an environment steps it the same way)."""

    __slots__ = ("inform_slots", "request_slots", "proposed_slots", "agent_request_slots", "turn",
                 "_history", "_user_json", "_agent_json")

    def __init__(self) -> None:
        self.inform_slots: dict[str, Any] = {}
        self.request_slots: dict[str, Any] = {}
        self.proposed_slots: dict[str, Any] = {}
        self.agent_request_slots: dict[str, Any] = {}
        self.turn = 0
        self._history: list[bytes] = []  # each act's JSON as the history holds it
        self._user_json = b"null"
        self._agent_json = _GREETING_JSON

    def update(self, act: dict[str, Any]) -> bytes:
        """Apply one act; its ``speaker`` ("user" or "agent") says whose. Returns its JSON as in the history."""
        speaker = act.get("speaker")
        if speaker == "user":
            return self.update_user(act)
        if speaker == "agent":
            return self.update_agent(act)
        raise ValueError(f"act speaker must be 'user' or 'agent', not {speaker!r}")

    def update_user(self, act: dict[str, Any]) -> bytes:
        """Apply a user act; returns its JSON as the history holds it (with its "turn")."""
        inform, request = self.inform_slots, self.request_slots
        for slot, value in act["inform_slots"].items():
            inform[slot] = value
            request.pop(slot, None)
        for slot in act["request_slots"]:
            if slot not in request:
                request[slot] = UNK
        if "turn" in act or not act:
            entry = dict(act)
            entry["turn"] = self.turn
            data = _encode(entry)
        else:  # the same bytes as encoding a copy with "turn" added last, without the copy
            data = b"%b,\"turn\":%d}" % (_encode(act)[:-1], self.turn)
        self._user_json = data
        self._history.append(data)
        self.turn += 1
        return data

    def update_agent(self, act: dict[str, Any]) -> bytes:
        """Apply an agent act; returns its JSON as the history holds it (the act as given)."""
        inform, request, proposed = self.inform_slots, self.request_slots, self.proposed_slots
        for slot, value in act["inform_slots"].items():
            proposed[slot] = value
            inform[slot] = value
            request.pop(slot, None)
        asked = self.agent_request_slots
        for slot in act["request_slots"]:
            asked[slot] = UNK
        self._agent_json = data = _encode(act)
        self._history.append(data)
        self.turn += 1
        return data

    def current_slots(self) -> dict[str, dict[str, Any]]:
        """The four slot dicts, live (not copies)."""
        return {"inform_slots": self.inform_slots, "request_slots": self.request_slots,
                "proposed_slots": self.proposed_slots, "agent_request_slots": self.agent_request_slots}

    def state_json(self) -> bytes:
        """The current state as compact JSON."""
        return b"".join((b'{"user_action":', self._user_json, b',"current_slots":', _encode(self.current_slots()),
                         b',"turn":', str(self.turn).encode(), b',"history":[', b",".join(self._history),
                         b'],"agent_action":', self._agent_json, b"}"))

    def state(self) -> dict[str, Any]:
        """The current state as a new JSON-ready dict (sharing nothing with the tracker)."""
        return _decode(self.state_json())
