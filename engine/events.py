"""The event catalogue: every fact a run records, as msgspec Structs in one tagged union.

Every event carries the envelope ``run, ep, seq, t, wall, v``: run id, episode id ("" for run-level
events), a gapless per-episode sequence number from 0, virtual time in seconds, the unix time in
nanoseconds at which it happened, and the schema version of its type. Tags are never renamed; a
change to a type's payload bumps its ``v`` and registers an upcaster in ``engine.codec``.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec
from msgspec import UNSET, UnsetType

# -- payload pieces (SGD-shaped so that the sgd projection is a plain copy) -------------------------


class Act(msgspec.Struct, kw_only=True):
    """One dialogue act: SGD's action, e.g. INFORM(cuisine=["Thai"]); slot is "" when there is none."""

    act: str
    slot: str = ""
    values: list[str] = []
    canonical_values: list[str] = []


class SlotSpan(msgspec.Struct, kw_only=True):
    """A non-categorical slot value located in the utterance: ``utterance[start:exclusive_end]``."""

    slot: str
    start: int
    exclusive_end: int


class DialogueState(msgspec.Struct, kw_only=True):
    """SGD dialogue state of one service: active intent, slots requested this turn, cumulative values."""

    active_intent: str = "NONE"
    requested_slots: list[str] = []
    slot_values: dict[str, list[str]] = {}


class Frame(msgspec.Struct, kw_only=True):
    """The annotations of one turn for one service: acts, slot spans and (user turns) the true state."""

    service: str
    actions: list[Act] = []
    slots: list[SlotSpan] = []
    state: DialogueState | None = None


class Usage(msgspec.Struct, kw_only=True):
    """Token usage of one turn (summed over its model calls) or of one model call."""

    input_tokens: int = 0
    output_tokens: int = 0


class RoleUsage(msgspec.Struct, kw_only=True):
    """What one role (user, agent, judge...) used over an episode or a run: model calls, tokens and cost.

    ``calls`` counts the logged model calls (0 for a participant that reports usage without them, an HTTP
    agent say); ``cost`` is None when no price was given; ``cached`` counts the calls answered by the llm
    cache (their tokens are counted, their cost is not: nothing was spent on them in this run).
    """

    calls: int = 0
    cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None


class ModelToolCall(msgspec.Struct, kw_only=True):
    """A function call in a model's answer, as chat completions give it: id, function name, JSON arguments."""

    id: str = ""
    name: str
    arguments: str = "{}"


class EpisodeRef(msgspec.Struct, array_like=True):
    """A point in another episode's history: (episode id, seq) - where a fork branched off: the parent's events
    before ``seq`` (its ``episode_started`` aside) are the fork's first events."""

    ep: str
    seq: int


# -- the envelope ---------------------------------------------------------------------------------


class Event(msgspec.Struct, tag_field="type", kw_only=True):
    """Envelope shared by every event type."""

    run: str
    ep: str
    seq: int
    t: float
    wall: int
    v: int = 1


# -- run level -------------------------------------------------------------------------------------


class RunStarted(Event, tag="run_started", kw_only=True):
    """A run (or a resumption of it) began: its configuration, code version and master seed."""

    config: dict[str, Any]
    code_version: str
    seed: int
    resumed: bool = False


class RunEnded(Event, tag="run_ended", kw_only=True):
    """A run stopped: completed, interrupted, failed, or stopped (its budget was spent: ``reason`` says so),
    with outcome counts.

    ``usage`` is the run's model usage and cost per role, summed over its ended episodes (their
    ``episode_ended.usage``); ``reason`` says why a run stopped early. Both are left out of the encoding
    when unset, so runs without model usage log the same events as before.
    """

    status: Literal["completed", "interrupted", "failed", "stopped"]
    counts: dict[str, int] = {}
    usage: dict[str, RoleUsage] | UnsetType = UNSET
    reason: str | UnsetType = UNSET


# -- episode level ---------------------------------------------------------------------------------


class EpisodeStarted(Event, tag="episode_started", kw_only=True):
    """An episode began: the scenario snapshot (so the log is self-contained), specs and seed.

    An episode made from another's log (a fork, a replay: see docs/prefix.md) names it in ``parent``, where
    it branched off, and ``parent_run``, the run id of the parent when it is in another run (left out of the
    encoding when unset, so other logs do not change); a fork has a ``branch`` name.
    """

    scenario_id: str
    trial: int = 0
    seed: int
    scenario: dict[str, Any] = {}
    user: str = ""
    agent: str = ""
    parent: EpisodeRef | None = None
    branch: str | None = None
    parent_run: str | UnsetType = UNSET


class UserTurn(Event, tag="user_turn", kw_only=True):
    """The user spoke: utterance, per-service frames with acts, spans and the user's true state.

    ``raw_act`` is the turn's act as an imported corpus recorded it when its acts are not SGD-shaped (a
    TC-Bot act dict, kept verbatim so that exports of that format reproduce it); unset otherwise, and then
    absent from the JSON, so logs without such acts are unchanged.

    A persona user's reaction turn carries ``reaction`` (its signals) and ``persona`` (the profile it
    reacted as); ``persona`` is left out of the encoding when unset, so other users' logs do not change.

    A model-driven user's turn carries ``usage`` and ``cost`` (summed over its model calls, as on agent
    turns) and ``inferred``: true when its acts and slot spans were read from its words by the project's
    text understanding rather than known (its frames' ``state`` is still the true one, from the user's
    goal). All three are left out of the encoding when unset.
    """

    turn: int
    utterance: str
    frames: list[Frame] = []
    end: bool = False
    reaction: dict[str, Any] | None = None
    raw_act: dict[str, Any] | UnsetType = UNSET
    persona: dict[str, Any] | UnsetType = UNSET
    inferred: bool | UnsetType = UNSET
    usage: Usage | UnsetType = UNSET
    cost: float | UnsetType = UNSET


class AgentTurn(Event, tag="agent_turn", kw_only=True):
    """The agent spoke: utterance, frames with acts, its tracked state, latency, usage and cost.

    ``tagged_slots`` are the non-categorical slot spans the agent found in the user's last utterance, per
    service (scored as slot tagging F1); None when the agent did not tag the text (it read the user's acts).
    ``raw_act``: as in UserTurn, an imported act that is not SGD-shaped, verbatim.

    A policy-style agent's turn has its ``action`` label, ``action_by`` (who chose it: "persona", "manual",
    ...) and ``prompt`` (the instructions the turn was generated under, e.g. the action's system prompt);
    those two are left out of the encoding when unset, so other agents' logs do not change. ``agent_name``: the
    agent (or sub-agent) that answered, when the agent names it (left out when unset, likewise).
    """

    turn: int
    utterance: str
    frames: list[Frame] = []
    state: dict[str, DialogueState] | None = None
    tagged_slots: dict[str, list[SlotSpan]] | None = None
    end: bool = False
    latency: float = 0.0
    usage: Usage | None = None
    cost: float | None = None
    action: str | None = None
    raw_act: dict[str, Any] | UnsetType = UNSET
    action_by: str | UnsetType = UNSET
    prompt: str | UnsetType = UNSET
    agent_name: str | UnsetType = UNSET


class ModelCalled(Event, tag="model_called", kw_only=True):
    """A participant's model answered one chat-completions request: logged before the step it produced.

    ``role`` is who asked (``user``, ``agent``, or another role such as ``judge``); ``digest`` is
    ``sha256:`` and the hex SHA-256 of the request body as canonical JSON (sorted keys, no spaces, without
    the transport field ``stream``; headers, and so API keys, are never part of it); ``content`` and
    ``tool_calls`` are the answer's message; ``usage`` what the server reported and ``cost`` its price (None
    without a price table); ``attempt`` the attempt that succeeded (the failed ones before it are ``fault``
    events); ``cached`` true when the answer came from the llm cache (``--llm-cache``), or in a replay from
    the source episode's log, instead of the network. A resumed or verified episode answers a request whose
    digest its log holds from this event, never from the model (docs/llm.md).
    """

    role: str
    model: str
    digest: str
    content: str | None = None
    tool_calls: list[ModelToolCall] = []
    finish_reason: str | None = None
    usage: Usage | None = None
    cost: float | None = None
    attempt: int = 1
    cached: bool = False


class ToolCalled(Event, tag="tool_called", kw_only=True):
    """The agent called a tool (an SGD service intent): the engine will run it against the world; or, with
    ``executed_by`` "agent", the agent ran the tool itself and reported the call with what it gave back (the
    ``tool_returned`` after it), and no world was called."""

    call_id: str
    service: str
    method: str
    parameters: dict[str, Any] = {}
    executed_by: str | UnsetType = UNSET


class ToolReturned(Event, tag="tool_returned", kw_only=True):
    """A tool call finished: its results, or the error it raised."""

    call_id: str
    results: list[dict[str, Any]] | None = None
    error: str | None = None
    latency: float = 0.0


FaultWho = Literal["user", "agent", "tool", "engine"]
FaultKind = Literal["timeout", "http_status", "protocol", "exception", "limit", "divergence"]


class Fault(Event, tag="fault", kw_only=True):
    """Something failed outside the dialogue itself: who failed, how, and on which attempt."""

    who: FaultWho
    kind: FaultKind
    detail: str = ""
    attempt: int = 0


Outcome = Literal["success", "failure", "abandoned", "max_turns", "error"]


class EpisodeEnded(Event, tag="episode_ended", kw_only=True):
    """An episode ended, exactly once: outcome, reason, turn count and the inputs of rewards.

    ``usage``: the episode's model usage and cost per role (from its ``model_called`` events, and from the
    usage its turns report for a role that logged no model calls); left out of the encoding when no one
    reported any, so such logs are unchanged.
    """

    outcome: Outcome
    reason: str = ""
    turns: int = 0
    reward: dict[str, Any] = {}
    usage: dict[str, RoleUsage] | UnsetType = UNSET


AnyEvent = Union[
    RunStarted,
    RunEnded,
    EpisodeStarted,
    UserTurn,
    AgentTurn,
    ModelCalled,
    ToolCalled,
    ToolReturned,
    Fault,
    EpisodeEnded,
]

EVENT_TYPES: dict[str, type[Event]] = {cls.__struct_config__.tag: cls for cls in AnyEvent.__args__}
EVENT_TAGS: dict[type[Event], str] = {cls: tag for tag, cls in EVENT_TYPES.items()}  # the inverse, for lookups


class OpaqueEvent(msgspec.Struct, kw_only=True):
    """An event of a type this version does not know: the envelope plus the raw payload, kept intact."""

    type: str
    run: str = ""
    ep: str = ""
    seq: int = 0
    t: float = 0.0
    wall: int = 0
    v: int = 1
    data: dict[str, Any] = {}


def event_type(event: Event | OpaqueEvent) -> str:
    """The tag of an event ("user_turn", ...), also for opaque events."""
    if isinstance(event, OpaqueEvent):
        return event.type
    return EVENT_TAGS[type(event)]
