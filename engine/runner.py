"""The episode loop and the batch: users meet agents on simpy's clock and every step becomes an event.

An episode: the user opens; the agent answers (its tool calls run against the scenario's world and are
logged); and so on until the user leaves, the agent ends, the turn limit, or an error. Resuming an
episode replays it against its logged prefix (the tape): deterministic users and agents are run again
and must reproduce the tape; live agents' replies are taken from it; new events continue the episode.

Time: an episode keeps its own clock (``_Recorder.t``) while it touches nothing shared, and brings
simpy's clock up to it (one timeout) before anything that is shared: a call to a live agent or user,
a concurrency slot, the episode's end. Every event carries its exact virtual time; simpy still orders
everything that interacts; and a batch of in-process episodes costs one simpy step per episode instead
of one per turn (the engine-overhead benchmark in bench/ measures this).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import simpy

from .contracts import (AgentFailure, AgentReply, EpisodeContext, FaultReport, Observation, Scenario, ScenarioSet,
                        ToolCall, ToolResult, UserReply, Verdict)
from .driver import Driver
from .events import AgentTurn, EpisodeEnded, EpisodeStarted, Event, Fault, ToolCalled, ToolReturned, UserTurn
from .seeding import episode_seed, episode_streams, stream
from .timing import Arrivals, Delay


class RunSettings(msgspec.Struct, kw_only=True):
    """Everything that shapes a batch besides the user, the agent and the scenarios."""

    seed: int = 0
    episodes: int = 10
    concurrency: int = 32
    max_turns: int = 50
    max_tool_rounds: int = 8
    think: Delay = Delay("fixed", 0.0)
    latency: Delay = Delay("fixed", 0.0)
    arrivals: Arrivals = Arrivals("all")


class Sink:
    """Where events go: the log writer, or a list in tests. A sink of your own subclasses this and
    defines ``append``; the rest have defaults."""

    def append(self, event: Event) -> None:
        """Append one event; raise if it cannot be taken (the episode then ends with an engine fault)."""
        raise NotImplementedError

    def append_many(self, events: list[Event]) -> None:
        """Append events in order, all or none: if one is refused, none is appended.

        This default appends one by one, which is all or none only when ``append`` refuses nothing or
        refuses the first event; a sink that can refuse a later one overrides it.
        """
        for event in events:
            self.append(event)

    def episode_done(self) -> None:
        """An episode ended (a durable sink may commit)."""

    def commit(self) -> None:
        """Make ended episodes durable now (called before the engine waits on a live call)."""


_now_ns = time.time_ns


class Divergence(Exception):
    """A re-run of a logged episode prefix produced a different event than the log holds."""


class Job(msgspec.Struct):
    """One episode to run: its index in the run, and its logged prefix when resuming."""

    index: int
    tape: list[Event] = []


def episode_id(index: int) -> str:
    """The id of the ``index``-th episode of a run."""
    return "e" + str(index).zfill(6)  # f"e{index:06d}", for less


class _Recorder:
    """Stamps one episode's events with the envelope, checks them against the tape, and sinks them.

    The episode loop's turn events wait in ``pending`` and reach the sink together (one call instead of
    one per event) when the loop hands over to the slow paths (``take``): before anything else is recorded
    and before the episode waits on anything, so the log keeps simpy's order of events.
    """

    __slots__ = ("run", "ep", "env", "sink", "tape", "seq", "t", "pending")

    def __init__(self, run: str, ep: str, env: simpy.Environment, sink: Sink, tape: list[Event]) -> None:
        self.run, self.ep, self.env, self.sink, self.tape, self.seq = run, ep, env, sink, tape, 0
        self.t = env.now
        self.pending: list[Event] = []  # the same list throughout: the episode loop appends to it

    def take(self, seq: int, t: float) -> None:
        """Take over from the episode loop: its seq and t, and its pending events, which are sunk now."""
        self.seq, self.t = seq, t
        if self.pending:
            self.flush()

    def flush(self) -> None:
        """Sink the pending events; if the sink refuses one (it cannot be encoded), the events before it are
        kept, it and those after it dropped, seq and t go back to it, and _Unlogged says why."""
        pending = self.pending
        try:
            self.sink.append_many(pending)
        except Exception as exc:
            events = pending[:]
            pending.clear()
            for event in events:  # one by one, to find it
                try:
                    self.sink.append(event)
                except Exception as cause:
                    self.seq, self.t = event.seq, event.t
                    raise _Unlogged(cause, event) from None
            raise exc
        pending.clear()

    def sync(self) -> Generator[Any, Any, None]:
        """Bring simpy's clock up to this episode's clock before touching anything shared."""
        if self.t > self.env.now:
            yield self.env.timeout(self.t - self.env.now)

    def catch_up(self, seq: int, t: float) -> None:
        """After an exception: take the hot loop's seq and t if they ran ahead of this recorder's.

        Both only grow, and whichever side (hot loop or slow path) raised holds the latest values.
        """
        if seq > self.seq:
            self.seq = seq
        if t > self.t:
            self.t = t

    @property
    def replaying(self) -> bool:
        return self.seq < len(self.tape)

    def emit(self, cls: type[Event], **payload: Any) -> Any:
        """Build an event of ``cls`` stamped with this episode's envelope, and record it."""
        return self.record(cls(run=self.run, ep=self.ep, seq=self.seq, t=self.t, wall=_now_ns(), **payload))

    def record(self, event: Event) -> Any:
        """Sink ``event`` (built with this recorder's seq and t), or check it against the tape."""
        if self.seq < len(self.tape):
            logged = self.tape[self.seq]
            if msgspec.structs.replace(event, t=logged.t, wall=logged.wall) != logged:
                raise Divergence(f"event {self.seq} differs from the log: expected {type(logged).__name__}, "
                                 f"re-run gave {type(event).__name__}")
            event = logged
        else:
            assert not self.pending, "the episode loop hands its events over before anything else is recorded"
            self.sink.append(event)
        self.seq += 1
        return event

    def taped_agent_step(self) -> AgentReply | None:
        """The agent's next step read back from the tape (for agents that cannot be re-run)."""
        tape, i = self.tape, self.seq
        faults = []
        while i < len(tape) and isinstance(tape[i], Fault) and tape[i].who == "agent":
            faults.append(FaultReport(kind=tape[i].kind, detail=tape[i].detail, attempt=tape[i].attempt))
            i += 1
        calls = []
        while i < len(tape) and isinstance(tape[i], (ToolCalled, ToolReturned)):
            if isinstance(tape[i], ToolCalled):
                calls.append(ToolCall(service=tape[i].service, method=tape[i].method,
                                      parameters=tape[i].parameters, call_id=tape[i].call_id))
            i += 1
        if calls:
            return AgentReply(tool_calls=calls, faults=faults)
        if i < len(tape) and isinstance(tape[i], AgentTurn):
            turn = tape[i]
            return AgentReply(utterance=turn.utterance, frames=turn.frames, state=turn.state, end=turn.end,
                              usage=turn.usage, cost=turn.cost, action=turn.action, latency=turn.latency,
                              faults=faults)
        if i < len(tape) and isinstance(tape[i], EpisodeEnded) and faults:
            raise AgentFailure(faults[-1].detail, faults)
        return None


class Batch:
    """Runs a list of jobs on one simpy clock with at most ``concurrency`` episodes at a time."""

    def __init__(self, *, run_id: str, scenarios: ScenarioSet, make_user: Callable[[], Any],
                 make_agent: Callable[[], Any], settings: RunSettings, sink: Sink, user_spec: str = "",
                 agent_spec: str = "", on_episode_end: Callable[[EpisodeEnded], None] | None = None) -> None:
        self.run_id = run_id
        self.scenarios = scenarios
        self.make_user = make_user
        self.make_agent = make_agent
        self.settings = settings
        self.sink = sink
        self.user_spec = user_spec
        self.agent_spec = agent_spec
        self.on_episode_end = on_episode_end
        self.timed = settings.think.draws or settings.latency.draws  # the episodes need a timing stream
        # a scenario set's optional parts, with the defaults engine/contracts.py documents
        self.world = getattr(scenarios, "world", None) or _no_world
        self.tools = getattr(scenarios, "tools", None) or _no_tools
        self.env = simpy.Environment(initial_time=0.0)  # a float clock: t is always encoded as a float
        self.driver = Driver(self.env, before_wait=getattr(sink, "commit", None))

    async def run(self, jobs: Iterable[Job]) -> None:
        """Run every job to its ``episode_ended``; raises Interrupted when stopped."""
        jobs = sorted(jobs, key=lambda j: (not j.tape, j.tape[0].t if j.tape else 0.0, j.index))
        if self.settings.arrivals.kind == "poisson":
            self.env.process(self._poisson(jobs))
        else:
            queue = iter(jobs)
            for _ in range(min(self.settings.concurrency, len(jobs))):
                self.env.process(self._worker(queue))
        with _collector_tuned():
            await self.driver.run()

    def _worker(self, queue: Iterable[Job]) -> Generator[Any, Any, None]:
        for job in queue:
            yield from self._episode(job)

    def _poisson(self, jobs: list[Job]) -> Generator[Any, Any, None]:
        slots = simpy.Resource(self.env, capacity=self.settings.concurrency)
        rng = stream(self.settings.seed, "arrivals")
        for job in jobs:
            if not job.tape:
                yield self.env.timeout(rng.expovariate(self.settings.arrivals.rate))
            self.env.process(self._queued(job, slots))

    def _queued(self, job: Job, slots: simpy.Resource) -> Generator[Any, Any, None]:
        with slots.request() as slot:
            yield slot
            yield from self._episode(job)

    def _call(self, rec: _Recorder, awaitable: Any, due: float) -> Generator[Any, Any, Any]:
        """Start an awaitable at this episode's virtual time and take its result at virtual time ``due``."""
        yield from rec.sync()
        future, wake = self.driver.start(awaitable, due)
        yield wake
        return future.result()

    def _episode(self, job: Job) -> Generator[Any, Any, None]:
        env, settings = self.env, self.settings
        if job.tape and job.tape[0].t > env.now:
            yield env.timeout(job.tape[0].t - env.now)
        scenario, trial = self.scenarios.draw(job.index, settings.seed)
        seed = episode_seed(settings.seed, scenario.id, trial)
        run_id, ep, sink = self.run_id, episode_id(job.index), self.sink
        rec = _Recorder(run_id, ep, env, sink, job.tape)
        rec.record(EpisodeStarted(run=run_id, ep=ep, seq=rec.seq, t=rec.t, wall=_now_ns(), scenario_id=scenario.id,
                                  trial=trial, seed=seed, user=self.user_spec, agent=self.agent_spec,
                                  scenario={"id": scenario.id, "kind": scenario.kind, "data": scenario.data}))
        # The dialogue is a generator of its own so that its user, agent, world, streams and history are
        # freed when it returns: an episode waiting for the clock to reach its end holds next to nothing,
        # and the next episode reuses memory that is still in the cache.
        (kind, reason, reward), turns = yield from self._dialogue(rec, scenario, seed)
        if rec.t > env.now:  # rec.sync(), without a generator of its own
            yield env.timeout(rec.t - env.now)
        ended = rec.record(EpisodeEnded(run=run_id, ep=ep, seq=rec.seq, t=rec.t, wall=_now_ns(), outcome=kind,
                                        reason=reason, turns=turns, reward=reward))
        sink.episode_done()
        if self.on_episode_end is not None:
            self.on_episode_end(ended)

    def _dialogue(self, rec: _Recorder, scenario: Scenario,
                  seed: int) -> Generator[Any, Any, tuple[tuple[str, str, dict[str, Any]], int]]:
        """The episode between its start and end events: its outcome and the number of turns taken."""
        env, settings = self.env, self.settings
        run_id, ep = rec.run, rec.ep
        user_rng, agent_rng, world_rng, timing = episode_streams(seed, self.timed)
        tools = self.tools(scenario)
        outcome: tuple[str, str, dict[str, Any]] | None = None
        turn = 0
        user = None
        seq, t = rec.seq, rec.t
        try:
            user = self.make_user()
            agent = self.make_agent()
            world = self.world(scenario, world_rng)
            start = getattr(user, "start", None)
            if start is not None:
                start(EpisodeContext(episode_id=ep, scenario=scenario, tools=tools, rng=user_rng, seed=seed))
            start = getattr(agent, "start", None)
            if start is not None:
                start(EpisodeContext(episode_id=ep, scenario=scenario.agent_view(), tools=tools, rng=agent_rng,
                                     seed=seed))
            history: list[Event] = []
            remember = history.append
            think, latency_model, max_turns = settings.think.sample, settings.latency.sample, settings.max_turns
            user_respond, agent_respond = user.respond, agent.respond
            replay_agent = not getattr(agent, "deterministic", True)  # the protocol default
            pend, tape_len = rec.pending.append, len(rec.tape)
            start_call = self.driver.start
            # The hot path: seq and t live in locals and go back to rec (the slow paths' state) around
            # every slow-path call and when the loop ends (rec.take, which also sinks the turns built here).
            spoken: AgentTurn | None = None  # what the user answers: nothing, to open the episode
            while True:
                try:
                    reply = user_respond(spoken)
                except Exception as exc:
                    reply = _Raised(exc)
                if reply is not None and type(reply) is not UserReply:
                    rec.take(seq, t)
                    reply = yield from self._user_step(rec, user, reply)
                    seq, t = rec.seq, rec.t
                if reply is None:
                    outcome = _verdict(user, "abandoned", "the user left without a word")
                    break
                t += reply.think if reply.think is not None else think(timing)
                said = UserTurn(run=run_id, ep=ep, seq=seq, t=t, wall=_now_ns(), turn=turn,
                                utterance=reply.utterance, frames=reply.frames, end=reply.end,
                                reaction=reply.reaction)
                if seq < tape_len:
                    rec.seq, rec.t = seq, t
                    said = rec.record(said)
                else:
                    pend(said)
                seq += 1
                remember(said)
                turn += 1
                # Sampled before the call: a live agent's reply is due at a fixed virtual time.
                latency = latency_model(timing)
                # Fast path: a plain reply without tool calls or faults needs no generator of its own.
                obs = Observation(user=said, history=history, tool_results=[], turn_index=turn)
                if replay_agent and seq < tape_len:
                    first = _MISSING
                else:
                    try:
                        first = agent_respond(obs)
                    except Exception as exc:
                        first = _Raised(exc)
                due = t + latency
                if type(first) is not AgentReply and hasattr(first, "__await__"):
                    # A live call, started and taken as _call does but without its generators; whatever the
                    # answer is (tool calls, faults, an error) goes on to the slow path already resolved.
                    try:
                        rec.take(seq, t)
                    except _Unlogged:
                        _abandon(first)
                        raise
                    if t > env._now:  # env._now is env.now without its property, as the driver reads it
                        yield env.timeout(t - env._now)
                    future, wake = start_call(first, due)
                    yield wake
                    due = env._now
                    try:
                        first = future.result()
                    except Exception as exc:
                        first = _Raised(exc)
                if type(first) is AgentReply and not first.tool_calls and not first.faults:
                    answer = first
                else:
                    rec.take(seq, t)
                    answer = yield from self._agent_turn(rec, agent, world, obs, history, first, due)
                    seq, t, tape_len = rec.seq, rec.t, len(rec.tape)
                if answer.latency is not None:  # a live agent's measured latency, when it reports one
                    latency = answer.latency
                t += latency
                spoken = AgentTurn(run=run_id, ep=ep, seq=seq, t=t, wall=_now_ns(), turn=turn,
                                   utterance=answer.utterance, frames=answer.frames, state=answer.state,
                                   tagged_slots=answer.tagged_slots, end=answer.end, latency=latency,
                                   usage=answer.usage, cost=answer.cost, action=answer.action)
                if seq < tape_len:
                    rec.seq, rec.t = seq, t
                    spoken = rec.record(spoken)
                else:
                    pend(spoken)
                seq += 1
                remember(spoken)
                turn += 1
                if said.end or spoken.end:
                    outcome = _verdict(user, judge=self._judge(scenario, history))
                    break
                if turn >= max_turns:
                    outcome = ("max_turns", f"reached the limit of {max_turns} turns", {})
                    break
            rec.take(seq, t)
        except _EpisodeError as exc:
            outcome = ("error", exc.reason, {})
        except Divergence as exc:
            rec.catch_up(seq, t)
            rec.tape = rec.tape[: rec.seq]  # stop checking: record what happened from here on
            rec.emit(Fault, who="engine", kind="divergence", detail=str(exc))
            outcome = ("error", f"resume diverged from the log: {exc}", {})
        except Exception as exc:  # a bug in a user, agent or world must not sink the batch
            if type(exc) is not _Unlogged:  # first the turns built before the error
                rec.catch_up(seq, t)
                try:
                    rec.flush()
                except _Unlogged as unlogged:  # one of them the log cannot take: that failure came first
                    exc = unlogged
            if type(exc) is _Unlogged:  # the episode ends in place of that turn (rec went back to it)
                exc, turn = exc.cause, exc.event.turn
            rec.emit(Fault, who="engine", kind="exception", detail=_describe(exc))
            outcome = ("error", f"engine error: {_describe(exc)}", {})
        return outcome, turn

    def _judge(self, scenario: Scenario, history: list[Event]) -> Callable[[list], str | None] | None:
        """The scenario set's judge of a user's claims against this episode's events, if it has one."""
        judge = getattr(self.scenarios, "judge", None)
        if judge is None:
            return None
        return lambda claims: judge(scenario, claims, history)

    def _user_step(self, rec: _Recorder, user: Any, first: Any) -> Generator[Any, Any, Any]:
        """Finish a user step whose first result was not a plain reply: an awaitable or an exception."""
        try:
            reply = _unwrap(first)
            if hasattr(reply, "__await__"):
                reply = yield from self._call(rec, reply, rec.t)
            return reply
        except Exception as exc:
            rec.emit(Fault, who="user", kind="exception", detail=_describe(exc))
            raise _EpisodeError(f"user failed: {_describe(exc)}") from None

    def _agent_turn(self, rec: _Recorder, agent: Any, world: Any, obs: Observation, history: list[Event],
                    first: Any, due: float) -> Generator[Any, Any, AgentReply]:
        """The agent's turn with everything the fast path skips: awaitables, tool rounds, faults, replay.

        The first live call of the turn is due when the turn's modelled latency has passed; calls after
        tool rounds are due at once (the engine's virtual time stands still for them).
        """
        for _ in range(self.settings.max_tool_rounds + 1):
            try:
                if first is _MISSING:
                    replay = rec.seq < len(rec.tape) and not getattr(agent, "deterministic", True)
                    answer = rec.taped_agent_step() if replay else None
                    if answer is None:
                        answer = agent.respond(obs)
                else:
                    answer, first = _unwrap(first), _MISSING
                if hasattr(answer, "__await__"):
                    answer = yield from self._call(rec, answer, due)
                    due = self.env.now
            except AgentFailure as exc:
                for f in exc.faults:
                    rec.emit(Fault, who="agent", kind=f.kind, detail=f.detail, attempt=f.attempt)
                raise _EpisodeError(f"agent failed: {exc.detail}") from None
            except Exception as exc:
                rec.emit(Fault, who="agent", kind="exception", detail=_describe(exc))
                raise _EpisodeError(f"agent failed: {_describe(exc)}") from None
            for f in answer.faults:
                rec.emit(Fault, who="agent", kind=f.kind, detail=f.detail, attempt=f.attempt)
            if not answer.tool_calls:
                return answer
            results: list[ToolResult] = []
            for n, call in enumerate(answer.tool_calls):
                call_id = call.call_id or f"{rec.ep}-{rec.seq}-{n}"
                history.append(rec.emit(ToolCalled, call_id=call_id, service=call.service, method=call.method,
                                        parameters=call.parameters))
                try:
                    rows, error = world.call(call.service, call.method, call.parameters)
                except Exception as exc:
                    rec.emit(Fault, who="tool", kind="exception", detail=_describe(exc))
                    rows, error = None, f"tool failed: {_describe(exc)}"
                history.append(rec.emit(ToolReturned, call_id=call_id, results=rows, error=error))
                results.append(ToolResult(call_id=call_id, results=rows, error=error))
            obs = Observation(user=obs.user, history=history, tool_results=results, turn_index=obs.turn_index)
        rec.emit(Fault, who="agent", kind="limit",
                 detail=f"more than {self.settings.max_tool_rounds} tool rounds in one turn")
        raise _EpisodeError(f"agent exceeded {self.settings.max_tool_rounds} tool rounds in one turn")


class _Raised:
    """An exception a user or agent raised on the fast path, carried to the slow path that reports it."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


_MISSING = object()


def _abandon(call: Any) -> None:
    """Drop a live call that will not be waited for: cancel a future, close a coroutine."""
    stop = getattr(call, "cancel", None) or getattr(call, "close", None)
    if stop is not None:
        stop()


def _unwrap(result: Any) -> Any:
    if type(result) is _Raised:
        raise result.exc
    return result


class _Unlogged(Exception):
    """A turn event the sink refused (it cannot be encoded): the episode ends with a fault in its place."""

    def __init__(self, cause: Exception, event: UserTurn | AgentTurn) -> None:
        super().__init__(str(cause))
        self.cause, self.event = cause, event


class _EpisodeError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _verdict(user: Any, default: str | None = None, reason: str = "",
             judge: Callable[[list], str | None] | None = None) -> tuple[str, str, dict[str, Any]]:
    """The user's verdict; a success the judge finds unbacked by the episode's events is a failure."""
    judged = getattr(user, "verdict", None)
    verdict: Verdict = judged() if judged is not None else _ENDED
    if default is not None and verdict.outcome == "success":
        return (default, reason, verdict.reward)
    if verdict.outcome == "success" and judge is not None:
        unbacked = judge(verdict.claims)
        if unbacked:
            return ("failure", unbacked, verdict.reward)
    return (verdict.outcome, verdict.reason, verdict.reward)


_ENDED = Verdict(outcome="success", reason="the user ended the dialogue")  # a user without verdict()


class _NoWorld:
    """The world of a scenario set that has none: every call fails, naming the tool."""

    def call(self, service: str, method: str, parameters: dict[str, Any]) -> tuple[None, str]:
        return None, f"no world behind the tool {service}.{method}"


def _no_world(scenario: Scenario, rng: Any) -> _NoWorld:
    return _NoWorld()


def _no_tools(scenario: Scenario) -> list[Any]:
    return []


_GC_YOUNG = 20_000  # allocations between young-generation collections while a batch runs


@contextmanager
def _collector_tuned() -> Iterator[None]:
    """Tune the cyclic garbage collector for a batch, and restore it after."""
    # What exists before the batch (a scenario pack's tables and templates: millions of objects) lives as
    # long as it: frozen, the collector stops re-scanning it (about 10% of an SGD run's CPU). Episodes and
    # requests in flight keep thousands of young objects alive for a moment: with the default young
    # generation (700) the collector runs hundreds of times per 10,000 live-agent requests, ~0.5 ms each
    # at 64 in flight; a larger one rarely fills.
    threshold = gc.get_threshold()
    gc.freeze()
    if threshold[0]:  # 0: collection is off, leave it so
        gc.set_threshold(max(threshold[0], _GC_YOUNG), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]

