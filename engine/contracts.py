"""The contracts between the engine and its plug-ins: every type the runner exchanges with users, agents,
scenario sets and worlds, and the protocols they implement.

The engine owns these types so that it imports none of its implementers. An implementation needs only its
one essential method; everything else has a default, documented on the protocol:

- an agent: ``respond(obs)``; ``start(ctx)`` is optional, ``deterministic`` defaults to True;
- a user: ``respond(agent_turn)``; ``start(ctx)`` is optional; without ``verdict()`` an episode the user
  ends is a success and one it leaves without a word is abandoned;
- a scenario set: ``draw``; ``world``, ``tools``, ``judge`` and the default user and agent are optional.

``respond`` may be a plain method or return an awaitable (live users and agents); only awaitables cost an
event-loop hop. An agent reply that carries ``tool_calls`` is not spoken: the engine runs the calls
against the scenario's world, logs them, and asks again with the results in ``Observation.tool_results``.
"""

from __future__ import annotations

import random
from typing import Any, Awaitable, Mapping, Protocol

import msgspec
from msgspec import UNSET, UnsetType

from .events import (AgentTurn, DialogueState, Event, Frame, ModelToolCall, Outcome, SlotSpan, ToolCalled, ToolReturned,
                     Usage, UserTurn)

# -- scenarios and worlds ----------------------------------------------------------------------------


class Scenario(msgspec.Struct, kw_only=True):
    """One thing to simulate: an id, a kind ("scripted", "sgd", ...) and the data users and agents read.

    ``data`` is snapshotted into ``episode_started`` so that a log never needs the pack it came from.
    """

    id: str
    kind: str
    data: dict[str, Any] = {}

    def agent_view(self) -> "Scenario":
        """The scenario as an agent may see it: without the parts only the user knows (its goal, its lines)."""
        if USER_ONLY_KEYS.isdisjoint(self.data):
            return self
        return Scenario(id=self.id, kind=self.kind,
                        data={k: v for k, v in self.data.items() if k not in USER_ONLY_KEYS})


# The user's goal and script are the answer key of an episode: an agent that saw them could "track" the
# user's state by copying it, so no agent, in process or over HTTP, is ever handed these keys. Nor the golden
# question an episode plays (its reference tool calls, trajectory and state: scenarios/evals).
USER_ONLY_KEYS = frozenset({"goal", "user", "golden"})


class ToolSpec(msgspec.Struct, kw_only=True):
    """A tool the agent may call: an SGD service intent, its parameters as a JSON Schema object."""

    service: str
    method: str
    description: str = ""
    parameters: dict[str, Any] = {}
    transactional: bool = False


class ToolResult(msgspec.Struct, kw_only=True):
    """What a tool call gave back: result rows, or an error message."""

    call_id: str
    results: list[dict[str, Any]] | None = None
    error: str | None = None


class Call(msgspec.Struct, kw_only=True):
    """A tool call an episode made and what it returned: the evidence a judge checks claims against."""

    service: str
    method: str
    parameters: dict[str, Any] = {}
    results: list[dict[str, Any]] | None = None
    error: str | None = None


def completed_calls(events: list[Any]) -> list[Call]:
    """The tool calls the world answered among an episode's events, each with what it returned (those the agent
    ran itself are its word, not evidence)."""
    called: dict[str, ToolCalled] = {}
    out: list[Call] = []
    for event in events:
        if type(event) is ToolCalled and event.executed_by is UNSET:
            called[event.call_id] = event
        elif type(event) is ToolReturned and event.call_id in called:
            c = called.pop(event.call_id)
            out.append(Call(service=c.service, method=c.method, parameters=c.parameters, results=event.results,
                            error=event.error))
    return out


class Claim(msgspec.Struct, kw_only=True):
    """What a user believes it achieved for one goal intent: the values it holds and the entity it took."""

    service: str
    intent: str
    transactional: bool = False
    constraints: dict[str, str] = {}  # canonical values the user holds at the end (after any relaxation)
    entity: dict[str, str] | None = None  # a search: the offered values of the entity the user selected


class FaultReport(msgspec.Struct, kw_only=True):
    """A failure a user or agent met and survived (a retried request, say), logged as a ``fault`` event."""

    kind: str
    detail: str = ""
    attempt: int = 0


class ModelCall(msgspec.Struct, kw_only=True):
    """One model call a user or agent made, as its reply reports it: logged as a ``model_called`` event.

    The fields are the event's (see ``events.ModelCalled``); ``faults`` are the failed attempts before the
    answer, logged as ``fault`` events just before it. A participant whose episode is resumed finds the
    calls its log holds in ``EpisodeContext.recorded`` and answers a request with a recorded digest from
    there instead of asking the model again.
    """

    model: str
    digest: str
    content: str | None = None
    tool_calls: list[ModelToolCall] = []
    finish_reason: str | None = None
    usage: Usage | None = None
    cost: float | None = None
    attempt: int = 1
    cached: bool = False
    faults: list[FaultReport] = []


class EpisodeContext(msgspec.Struct, kw_only=True):
    """What a user or agent is told when its episode starts; ``rng`` is its own random stream.

    ``recorded``: the model calls the episode's log already holds for this participant (a resumed or
    re-run episode), by request digest; empty for a new episode.
    """

    episode_id: str
    scenario: Scenario
    tools: list[ToolSpec]
    rng: random.Random
    seed: int
    recorded: Mapping[str, ModelCall] = {}


class World(Protocol):
    """The simulated backend of one episode: executes service calls, deterministically per seed."""

    def call(self, service: str, method: str,
             parameters: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None]:
        """Run one call: (results, None) on success or (None, error message) when it fails."""
        ...


class ScenarioSet(Protocol):
    """A named source of scenarios with the user and agent it runs by default.

    Optional, with their defaults: ``default_user`` and ``default_agent`` ("scripted");
    ``world(scenario, rng)`` (a world without services: every call fails, naming the service);
    ``tools(scenario)`` (none); ``judge(scenario, claims, events) -> str | None`` (none): why the episode's
    events so far (its turns, tool calls and returns, in order) do not back a user's claimed success, None
    when they do (the runner then fails an unbacked episode); ``check_user(spec)`` (any user may play): raise UserError for a user spec that
    cannot play the set (evalsets need a model-driven user), asked before the user is built; ``branches(events)``
    (none): the forks (``runner.Branch``) to make of an episode that just ended, given its events, run next in
    its slot (docs/prefix.md).
    """

    name: str

    def draw(self, index: int, seed: int) -> tuple[Scenario, int]:
        """The scenario of the ``index``-th episode of a run with master seed ``seed``, and its trial."""
        ...


# -- agents ------------------------------------------------------------------------------------------


class ToolCall(msgspec.Struct, kw_only=True):
    """A call the agent asks the engine to make: service, method (intent) and parameters."""

    service: str
    method: str
    parameters: dict[str, Any] = {}
    call_id: str = ""


class ExecutedCall(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A tool call the agent ran itself, with what it gave back (rows or an error) and the seconds it took."""

    service: str
    method: str
    parameters: dict[str, Any] = {}
    call_id: str = ""
    results: list[dict[str, Any]] | None = None
    error: str | None = None
    latency: float = 0.0


class AgentReply(msgspec.Struct, kw_only=True):
    """An agent's answer: either tool calls to run, or its turn (utterance, acts, tracked state)."""

    utterance: str = ""
    frames: list[Frame] = []
    state: dict[str, DialogueState] | None = None
    tagged_slots: dict[str, list[SlotSpan]] | None = None  # spans found in the user's utterance, per service
    end: bool = False
    tool_calls: list[ToolCall] = []
    usage: Usage | None = None
    cost: float | None = None
    action: str | None = None
    latency: float | None = None  # virtual seconds; None lets the engine's latency model decide
    faults: list[FaultReport] = []
    model_calls: list[ModelCall] = []  # logged before the step, each after its own faults
    executed: list[ExecutedCall] = []  # tools the agent ran itself for this answer: logged before it, no world called
    action_by: str | UnsetType = UNSET  # who chose ``action`` ("persona", "manual", ...), logged when set
    prompt: str | UnsetType = UNSET  # the instructions the turn was made under (an action's system prompt)
    agent_name: str | None = None  # the (sub-)agent that answered, when the agent names it (traces, evals)


class AgentFailure(Exception):
    """The agent (or a live user) could not answer at all (retries exhausted): the episode ends with outcome
    error, and its faults are logged as the failing participant's."""

    def __init__(self, detail: str, faults: list[FaultReport] | None = None) -> None:
        # Both in args: simpy re-raises a failed event's exception as type(exc)(*exc.args).
        super().__init__(detail, faults or [])
        self.detail = detail
        self.faults = faults or []

    def __str__(self) -> str:
        return self.detail


class Observation(msgspec.Struct, kw_only=True):
    """What the agent sees when asked: the new user turn, the episode so far, and tool results."""

    user: UserTurn
    history: list[Event]
    tool_results: list[ToolResult] = []
    turn_index: int = 0


class Agent(Protocol):
    """A dialogue agent: ``respond`` is all it must have.

    Optional, with their defaults: ``start(ctx)``, called when an episode begins (nothing);
    ``deterministic`` (True): a deterministic agent is re-run when an episode is resumed or verified,
    any other agent's replies are read back from the log; ``warm(history)`` (nothing): an agent whose
    replies were read back is told the episode so far (its turns and tool events) before it is first
    asked live. An agent is also asked, its answers dropped, about the turns a fork copies, so that its
    state is what the log implies (docs/prefix.md).
    """

    def respond(self, obs: Observation) -> AgentReply | Awaitable[AgentReply]:
        """Answer the user turn in ``obs`` (or continue after tool results)."""
        ...


# -- users -------------------------------------------------------------------------------------------


class UserReply(msgspec.Struct, kw_only=True):
    """A user's turn; ``end`` means the user closes the dialogue with it (the agent answers once more), ``final``
    that it is the user's last word (the episode ends with it: the agent is not asked to answer it).

    A model-driven user also reports its model calls (logged before the turn, each after the failed attempts
    it carries), the turn's usage and cost, and ``inferred`` when its frames' acts and spans were read from its
    words.
    """

    utterance: str
    frames: list[Frame] = []
    end: bool = False
    think: float | None = None  # virtual seconds before speaking; None lets the engine's model decide
    reaction: dict[str, Any] | None = None
    model_calls: list[ModelCall] = []
    usage: Usage | None = None
    cost: float | None = None
    inferred: bool = False
    persona: dict[str, Any] | UnsetType = UNSET  # the profile the user plays, logged when set
    final: bool = False


class Verdict(msgspec.Struct, kw_only=True):
    """How the user judges the episode: outcome, reason, and the inputs of rewards."""

    outcome: Outcome
    reason: str = ""
    reward: dict[str, Any] = {}
    claims: list[Claim] = []  # on success: what the user believes was done, for the scenario set's judge


class User(Protocol):
    """A user simulator: ``respond`` is all it must have; ``respond(None)`` opens the episode, returning None
    leaves without a word, and a reply marked ``final`` is the user's last word (the agent does not answer it).

    Optional, with their defaults: ``start(ctx)`` (nothing); ``deterministic`` (True, as for agents);
    ``warm(history)`` (as for agents: a user whose turns were read back from the log, a model-driven one
    say, takes the episode so far as its own past before it goes on live); ``verdict()``, asked once when
    the episode ends (success when the user ended the dialogue, abandoned when it left without a word).
    """

    def respond(self, agent: AgentTurn | None) -> UserReply | None | Awaitable[UserReply | None]:
        """The next user turn after ``agent`` (None: the opening turn)."""
        ...
