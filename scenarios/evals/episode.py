"""One episode's events as exchanges (a user turn, the tool calls it led to, the agent's answer), plus the
run-level facts the eval projections need; the common fold of the golden, eval_csv and otel projections."""

from __future__ import annotations

from typing import Any

import msgspec

from ...engine.codec import CorruptEvent, decode
from ...engine.events import (AgentTurn, DialogueState, EpisodeEnded, EpisodeStarted, ModelCalled, RunStarted,
                              ToolCalled, ToolReturned, UserTurn)
from ...engine.log import RunDir


def tool_name(service: str, method: str) -> str:
    """The name a tool goes by in eval traces: ``Service__Intent`` (the OpenAI agent's function name), or
    the one part an agent-declared tool has (``access_cart_information``)."""
    if service and method:
        return f"{service}__{method}"
    return service or method


class ToolCallRecord(msgspec.Struct, kw_only=True):
    """A tool call and what it returned (None results and error: it never returned)."""

    seq: int
    t: float
    call_id: str
    name: str
    arguments: dict[str, Any]
    results: list[dict[str, Any]] | None = None
    error: str | None = None
    returned: bool = False
    latency: float = 0.0


class Exchange(msgspec.Struct, kw_only=True):
    """A user turn, the tool calls made before the answer, the agent's model calls (a chat agent logs each), and
    the agent's turn (None if none came)."""

    user: UserTurn
    calls: list[ToolCallRecord]
    agent: AgentTurn | None = None
    model_calls: list[ModelCalled] = []


class EpisodeRecord(msgspec.Struct, kw_only=True):
    """Everything the eval projections read from one finished episode."""

    run: str
    ep: str
    scenario_id: str
    trial: int
    seed: int
    scenario: dict[str, Any]
    user_spec: str
    agent_spec: str
    start_t: float
    end_t: float
    outcome: str
    exchanges: list[Exchange]

    @property
    def data(self) -> dict[str, Any]:
        """The scenario snapshot's data."""
        data = self.scenario.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def golden(self) -> dict[str, Any]:
        """The golden question this episode played (its ``agents_evaluated``, ``metadata``,
        ``reference_data``), or {} for other scenarios."""
        golden = self.data.get("golden")
        return golden if isinstance(golden, dict) else {}

    def calls(self) -> list[ToolCallRecord]:
        """Every tool call of the episode, in order."""
        return [c for x in self.exchanges for c in x.calls]

    def agent_turns(self) -> list[AgentTurn]:
        """The agent's turns, in order."""
        return [x.agent for x in self.exchanges if x.agent is not None]


def episode_record(events: list[Any]) -> EpisodeRecord | None:
    """Fold one episode's events (seq order); None for an episode without a start or an end."""
    started = next((e for e in events if isinstance(e, EpisodeStarted)), None)
    ended = events[-1] if events and isinstance(events[-1], EpisodeEnded) else None
    if started is None or ended is None:
        return None
    exchanges: list[Exchange] = []
    pending: dict[str, ToolCallRecord] = {}
    for event in events:
        if isinstance(event, UserTurn):
            exchanges.append(Exchange(user=event, calls=[]))
        elif not exchanges:
            continue  # nothing the agent does before the user opens is part of an exchange
        elif isinstance(event, AgentTurn):
            if exchanges[-1].agent is None:
                exchanges[-1].agent = event
        elif isinstance(event, ModelCalled):
            if event.role == "agent" and exchanges[-1].agent is None:
                exchanges[-1].model_calls.append(event)
        elif isinstance(event, ToolCalled):
            call = ToolCallRecord(seq=event.seq, t=event.t, call_id=event.call_id,
                                  name=tool_name(event.service, event.method), arguments=dict(event.parameters))
            pending[event.call_id] = call
            exchanges[-1].calls.append(call)
        elif isinstance(event, ToolReturned):
            call = pending.pop(event.call_id, None)
            if call is not None:
                call.results, call.error, call.returned, call.latency = (event.results, event.error, True,
                                                                          event.latency)
    return EpisodeRecord(run=started.run, ep=started.ep, scenario_id=started.scenario_id, trial=started.trial,
                         seed=started.seed, scenario=started.scenario, user_spec=started.user,
                         agent_spec=started.agent, start_t=started.t, end_t=ended.t, outcome=ended.outcome,
                         exchanges=exchanges)


def flatten_state(state: dict[str, DialogueState]) -> dict[str, Any]:
    """A dialogue state as state variables: ``Service.active_intent`` and ``Service.slot`` -> its values."""
    out: dict[str, Any] = {}
    for service, s in state.items():
        if s.active_intent and s.active_intent != "NONE":
            out[f"{service}.active_intent"] = s.active_intent
        for slot, values in s.slot_values.items():
            out[f"{service}.{slot}"] = list(values)
    return out


def agent_state(record: EpisodeRecord) -> dict[str, Any] | None:
    """The agent's memory at the end: its last reported tracked state, flattened; None if it never reported one."""
    for turn in reversed(record.agent_turns()):
        if turn.state is not None:
            return flatten_state(turn.state)
    return None


def true_state(record: EpisodeRecord) -> dict[str, Any] | None:
    """The user's true dialogue state at the end (the last state each service had), flattened; None if the
    user's turns carried no state (scripted users)."""
    last: dict[str, DialogueState] = {}
    for x in record.exchanges:
        for frame in x.user.frames:
            if frame.state is not None:
                last[frame.service] = frame.state
    return flatten_state(last) if last else None


class RunFacts(msgspec.Struct, kw_only=True):
    """Run-level facts spans and rows need: the wall time virtual time 0 maps to, and the run's config."""

    epoch_ns: int = 0
    model: str | None = None  # the agent's model (--agent-model), when the run names one
    scenarios: str = ""


def run_facts(run: RunDir) -> RunFacts:
    """The facts of ``run``: the wall clock of its first ``run_started`` (0 for imported logs, which have
    none: their times stay virtual seconds from the epoch) and its recorded config."""
    config = run.manifest.get("config") if isinstance(run.manifest.get("config"), dict) else {}
    options = config.get("agent_options") if isinstance(config.get("agent_options"), dict) else {}
    model = options.get("model")
    epoch = 0
    shards = run.shards()
    if shards:
        with open(shards[0], "rb") as f:
            first = f.readline()  # a run's first line is its run_started
        try:
            event = decode(first) if first.strip() else None
        except CorruptEvent:
            event = None
        if isinstance(event, RunStarted):
            epoch = event.wall
    return RunFacts(epoch_ns=epoch, model=str(model) if model else None, scenarios=str(config.get("scenarios") or ""))


class EpisodeProjection:
    """What the eval projections share: the run's facts, read when the run is bound, and each ended episode folded
    as its ``EpisodeRecord`` by ``fold_record``; no fold options."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.facts = RunFacts()

    def bind_run(self, run: RunDir) -> None:
        """Read the run's wall start, model and scenario spec, which rows, spans and questions need."""
        self.facts = run_facts(run)

    def fold_options(self) -> dict[str, Any]:
        return {}

    def fold(self, events: list[Any]) -> Any:
        record = episode_record(events)
        return None if record is None else self.fold_record(record)

    def fold_record(self, record: EpisodeRecord) -> Any:
        """One episode's output (None: nothing for it)."""
        raise NotImplementedError
