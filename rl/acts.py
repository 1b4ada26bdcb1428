"""TC-Bot dialogue acts from dialogsim turns: SGD acts mapped to TC-Bot diaacts, imported acts kept as they are.

A TC-Bot act is one dict per turn, ``{"diaact", "request_slots", "inform_slots", "speaker"}``. An SGD turn
holds any number of acts over one or more service frames; it becomes one TC-Bot act whose diaact is the
highest-ranked of its acts' diaacts (``DIAACT_RANK``) and whose slots are the union of theirs, frames in
order, a later frame's value winning on a repeated slot name. The table (docs/rl.md has it with reasons):

=================  =========  ===============  ===================================
SGD act            speaker    TC-Bot diaact    slot goes to
=================  =========  ===============  ===================================
INFORM             both       inform           inform_slots[slot] = first value
REQUEST            both       request          request_slots[slot] = "UNK"
CONFIRM            system     confirm_question inform_slots[slot] = first value
OFFER              system     offer            inform_slots[slot] = first value
NOTIFY_SUCCESS     system     notify_success   -
NOTIFY_FAILURE     system     notify_failure   -
INFORM_COUNT       system     inform           inform_slots["count"] = the count
OFFER_INTENT       system     offer_intent     inform_slots["intent"] = the intent
REQ_MORE           system     req_more         -
GOODBYE            both       bye              -
INFORM_INTENT      user       inform           inform_slots["intent"] = the intent
NEGATE_INTENT      user       deny             -
AFFIRM_INTENT      user       confirm_answer   -
AFFIRM             user       confirm_answer   -
NEGATE             user       deny             -
SELECT             user       select           inform_slots[slot] = first value, if any
REQUEST_ALTS       user       request_alts     -
THANK_YOU          user       thanks           -
=================  =========  ===============  ===================================

An act outside SGD's set becomes its lower-cased name, ranked last, its slot (if any) an inform slot. A
turn without acts (a text-only reply) is diaact "none".
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from ..engine.events import AgentTurn, EpisodeEnded, Frame, UserTurn
from .tracker import UNK

INFORM, REQUEST, NONE = "inform", "request", "none"

# SGD act -> (TC-Bot diaact, where its slot goes: INFORM, REQUEST or None for nowhere)
SGD_TO_TCBOT: dict[str, tuple[str, str | None]] = {
    "INFORM": ("inform", INFORM),
    "REQUEST": ("request", REQUEST),
    "CONFIRM": ("confirm_question", INFORM),
    "OFFER": ("offer", INFORM),
    "NOTIFY_SUCCESS": ("notify_success", None),
    "NOTIFY_FAILURE": ("notify_failure", None),
    "INFORM_COUNT": ("inform", INFORM),
    "OFFER_INTENT": ("offer_intent", INFORM),
    "REQ_MORE": ("req_more", None),
    "GOODBYE": ("bye", None),
    "INFORM_INTENT": ("inform", INFORM),
    "NEGATE_INTENT": ("deny", None),
    "AFFIRM_INTENT": ("confirm_answer", None),
    "AFFIRM": ("confirm_answer", None),
    "NEGATE": ("deny", None),
    "SELECT": ("select", INFORM),
    "REQUEST_ALTS": ("request_alts", None),
    "THANK_YOU": ("thanks", None),
}

# A turn's diaact is the first of these among its acts': closing the dialogue, reporting the outcome,
# asking something of the other side, proposing, choosing, answering yes/no, informing, then small talk.
DIAACT_RANK: dict[str, int] = {name: rank for rank, name in enumerate((
    "bye", "notify_failure", "notify_success", "confirm_question", "request", "offer_intent", "offer", "select",
    "request_alts", "deny", "confirm_answer", "inform", "req_more", "thanks"))}


# act name -> (diaact, slot place, rank): one lookup per act in turn_act
_MAPPED: dict[str, tuple[str, str | None, int]] = {
    act: (diaact, place, DIAACT_RANK[diaact]) for act, (diaact, place) in SGD_TO_TCBOT.items()}
_UNKNOWN_RANK = len(DIAACT_RANK)


def turn_act(frames: list[Frame], speaker: str) -> dict[str, Any]:
    """One turn's SGD frames as a TC-Bot act (see the table above)."""
    diaact, rank = NONE, _UNKNOWN_RANK + 1
    request_slots: dict[str, Any] = {}
    inform_slots: dict[str, Any] = {}
    for frame in frames:
        for act in frame.actions:
            mapped = _MAPPED.get(act.act)
            if mapped is None:
                name, place, act_rank = act.act.lower(), INFORM, _UNKNOWN_RANK
            else:
                name, place, act_rank = mapped
            if act_rank < rank:
                diaact, rank = name, act_rank
            slot = act.slot
            if slot and place is not None:
                if place == REQUEST:
                    request_slots[slot] = UNK
                elif act.values:
                    inform_slots[slot] = act.values[0]
                elif mapped is not None:
                    inform_slots[slot] = ""  # SGD never leaves these empty; a live agent might
    return {"diaact": diaact, "request_slots": request_slots, "inform_slots": inform_slots, "speaker": speaker}


class EpisodeActs(msgspec.Struct):
    """One episode as the RL projections fold it: its TC-Bot acts in order and its judged outcome."""

    episode: str
    acts: list[dict[str, Any]]
    outcome: str


def episode_acts(events: list[Any]) -> EpisodeActs | None:
    """An episode's turns as TC-Bot acts (an imported act as recorded, else mapped from the frames)."""
    if not events:
        return None
    acts: list[dict[str, Any]] = []
    outcome = ""
    for event in events:
        kind = type(event)
        if kind is UserTurn or kind is AgentTurn:
            act = event.raw_act
            if act is UNSET:
                act = turn_act(event.frames, "user" if kind is UserTurn else "agent")
            acts.append(act)
        elif kind is EpisodeEnded:
            outcome = event.outcome
    return EpisodeActs(episode=events[0].ep, acts=acts, outcome=outcome)


def agent_action(act: dict[str, Any]) -> dict[str, Any]:
    """An agent act as an action: the act without its ``speaker``."""
    return {key: value for key, value in act.items() if key != "speaker"}


def placeholder_action(act: dict[str, Any]) -> dict[str, Any]:
    """An agent act as a feasible action: no ``speaker``, every inform value "PLACEHOLDER" (the converter's edit)."""
    action = agent_action(act)
    action["inform_slots"] = dict.fromkeys(act["inform_slots"], "PLACEHOLDER")
    return action
