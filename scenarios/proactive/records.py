"""Trajectory records, the original's JSONL format, to and from the events of one episode.

A record is one episode: ``{state, action, action_prompt, assistant_msg, persona, user_reaction{user_reply,
meta}, is_mainline, decision_point, mainline_action_selected_by | mainline_action}``. In the log:

- ``episode_started``: the state is the scenario snapshot's ``data``; a branch has ``branch`` = its action
  and ``parent`` = (the mainline's episode, 2), the seq of the decision point it replaces;
- ``user_turn`` 0: the state's query; ``agent_turn`` (seq 2, the decision point): ``action``, ``prompt``
  (action_prompt), ``action_by`` (mainline_action_selected_by), utterance = assistant_msg;
- the next ``user_turn``: utterance = user_reply, ``reaction`` = meta, ``persona``.

A branch's ``mainline_action`` is its mainline's action (filled in when records are put in order). An
imported record that does not fit this shape exactly (other keys, another key order, values of other
types, a branch without its mainline) keeps what does not fit in the snapshot's ``layout``
(``{"keys": [...], "extra": {...}}``), so that it is written back byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
from msgspec import UNSET

from ...engine.events import AgentTurn, EpisodeEnded, EpisodeRef, EpisodeStarted, Event, UserTurn
from .prompts import ACTIONS

SCENARIO_KIND = "proactive"
DECISION_SEQ = 2  # episode_started 0, the query 1, the agent's turn 2


class Trajectory(msgspec.Struct, kw_only=True):
    """One episode's record (the fold output), with what putting records in order needs."""

    ep: str
    root: str  # the episode of its mainline (its own for a mainline, or a branch without one)
    rank: int  # 0 for a mainline; branches 1, 2, 3 in LOW, MID, HIGH order
    action: str
    record: dict[str, Any]
    mainline_action_from_root: bool = False


class Parts(msgspec.Struct, kw_only=True):
    """The pieces of a record that the events hold."""

    state: dict[str, Any]
    action: str
    assistant_msg: str
    user_reply: str
    meta: dict[str, Any] | None
    mainline: bool
    prompt: Any = UNSET
    persona: Any = UNSET
    action_by: Any = UNSET
    linked: bool = False  # a branch whose parent is in the run (its mainline_action comes from there)


def branch_rank(branch: str | None) -> int:
    """0 for a mainline; 1 + the position of the action among LOW, MID, HIGH; 4 for any other label."""
    if branch is None:
        return 0
    return ACTIONS.index(branch) + 1 if branch in ACTIONS else len(ACTIONS) + 1


def canonical_record(parts: Parts) -> dict[str, Any]:
    """The record the parts make, keys in the format's order (a linked branch's mainline_action is None)."""
    record: dict[str, Any] = {"state": parts.state, "action": parts.action}
    if parts.prompt is not UNSET:
        record["action_prompt"] = parts.prompt
    record["assistant_msg"] = parts.assistant_msg
    if parts.persona is not UNSET:
        record["persona"] = parts.persona
    record["user_reaction"] = {"user_reply": parts.user_reply, "meta": parts.meta}
    record["is_mainline"] = parts.mainline
    record["decision_point"] = 0
    if parts.mainline and parts.action_by is not UNSET:
        record["mainline_action_selected_by"] = parts.action_by
    elif not parts.mainline and parts.linked:
        record["mainline_action"] = None
    return record


# -- events -> record ------------------------------------------------------------------------------------


def trajectory_of(events: list[Any]) -> Trajectory | None:
    """The record of one episode, or None for an episode without a decision and a reaction to it."""
    started = next((e for e in events if isinstance(e, EpisodeStarted)), None)
    decided = next((i for i, e in enumerate(events) if isinstance(e, AgentTurn) and e.action is not None), None)
    if started is None or decided is None:
        return None
    agent = events[decided]
    reply = next((e for e in events[decided + 1:] if isinstance(e, UserTurn)), None)
    snapshot = started.scenario
    state = snapshot.get("data")
    if reply is None or not isinstance(state, dict):
        return None
    parts = Parts(state=state, action=agent.action, assistant_msg=agent.utterance, user_reply=reply.utterance,
                  meta=reply.reaction, mainline=started.branch is None, prompt=agent.prompt,
                  persona=reply.persona, action_by=agent.action_by, linked=started.parent is not None)
    derived = canonical_record(parts)
    layout = snapshot.get("layout")
    if isinstance(layout, dict):
        extra = layout.get("extra", {})
        record = {key: extra[key] if key in extra else derived.get(key) for key in layout.get("keys", [])}
        from_root = parts.linked and "mainline_action" in record and "mainline_action" not in extra
    else:
        record = derived
        from_root = "mainline_action" in record
    root = started.ep
    if started.parent is not None:  # a mainline's, or one in another run (a fork run's, a replay's): named apart
        root = started.parent.ep if started.parent_run is UNSET else f"{started.parent_run}/{started.parent.ep}"
    return Trajectory(ep=started.ep, root=root, rank=branch_rank(started.branch), action=agent.action,
                      record=record, mainline_action_from_root=from_root)


def ordered_records(trajectories: Iterable[Trajectory]) -> Iterator[dict[str, Any]]:
    """Records in file order: by mainline (in episode order: the run's states in order), the mainline, then its
    branches LOW, MID, HIGH."""
    groups: dict[str, list[Trajectory]] = {}
    actions: dict[str, str] = {}
    for trajectory in trajectories:
        groups.setdefault(trajectory.root, []).append(trajectory)
        actions[trajectory.ep] = trajectory.action
    for root in sorted(groups, key=lambda ep: (len(ep), ep)):  # e000009 before e000010, e999999 before e1000000
        members = groups[root]
        members.sort(key=lambda t: (t.ep != root, t.rank))
        for member in members:
            record = member.record
            if member.mainline_action_from_root:
                if root in actions:
                    record["mainline_action"] = actions[root]
                else:  # the mainline never reached its reaction: nothing to name
                    del record["mainline_action"]
            yield record


def record_line(record: dict[str, Any]) -> str:
    """One record as the original writes it: ``json.dumps(record, ensure_ascii=False)`` and a newline."""
    return json.dumps(record, ensure_ascii=False) + "\n"


# -- record -> events ------------------------------------------------------------------------------------


def record_parts(record: dict[str, Any], linked: bool) -> tuple[Parts, dict[str, Any] | None]:
    """What the events of a (validated) record hold, and the layout of what they cannot (None if nothing)."""
    reaction = record["user_reaction"]
    mainline = record.get("is_mainline") is not False
    parts = Parts(state=record["state"], action=record["action"], assistant_msg=record["assistant_msg"],
                  user_reply=reaction.get("user_reply") if isinstance(reaction.get("user_reply"), str) else "",
                  meta=reaction["meta"], mainline=mainline, linked=linked and not mainline)
    extra: dict[str, Any] = {}
    for key, value in record.items():
        if key in ("state", "action", "assistant_msg"):
            continue
        if key == "action_prompt" and type(value) is str:
            parts.prompt = value
        elif key == "persona" and type(value) is dict:
            parts.persona = value
        elif key == "mainline_action_selected_by" and mainline and type(value) is str:
            parts.action_by = value
        elif not _derived(key, value, parts):
            extra[key] = value
    if list(record) == list(canonical_record(parts)) and not extra:
        return parts, None
    return parts, {"keys": list(record), "extra": extra}


def _derived(key: str, value: Any, parts: Parts) -> bool:
    """Whether the events give ``value`` back for ``key`` by themselves."""
    if key == "user_reaction":
        return list(value) == ["user_reply", "meta"] and type(value["user_reply"]) is str
    if key == "is_mainline":
        return type(value) is bool
    if key == "decision_point":
        return type(value) is int and value == 0
    if key == "mainline_action":
        return parts.linked  # the importer links a branch only to a mainline of the same action
    return False


def record_events(record: dict[str, Any], run_id: str, ep: str, parent: EpisodeRef | None) -> list[Event]:
    """The events of one imported record (a branch's ``parent`` is its mainline's decision point, or None)."""
    parts, layout = record_parts(record, linked=parent is not None)
    state = parts.state
    state_id = state.get("id", "unknown")
    snapshot: dict[str, Any] = {"id": state_id if isinstance(state_id, str) else json.dumps(state_id),
                                "kind": SCENARIO_KIND, "data": state}
    if layout is not None:
        snapshot["layout"] = layout
    query = state.get("query")
    return [
        EpisodeStarted(run=run_id, ep=ep, seq=0, t=0.0, wall=0, scenario_id=snapshot["id"], seed=0,
                       scenario=snapshot, user="trajectories", agent="trajectories",
                       parent=parent if not parts.mainline else None,
                       branch=None if parts.mainline else parts.action),
        UserTurn(run=run_id, ep=ep, seq=1, t=0.0, wall=0, turn=0, utterance=query if isinstance(query, str) else ""),
        AgentTurn(run=run_id, ep=ep, seq=DECISION_SEQ, t=1.0, wall=0, turn=1, utterance=parts.assistant_msg,
                  action=parts.action, action_by=parts.action_by, prompt=parts.prompt),
        UserTurn(run=run_id, ep=ep, seq=3, t=2.0, wall=0, turn=2, utterance=parts.user_reply, end=True,
                 reaction=parts.meta, persona=parts.persona),
        EpisodeEnded(run=run_id, ep=ep, seq=4, t=3.0, wall=0, outcome="success", reason="imported", turns=3),
    ]
