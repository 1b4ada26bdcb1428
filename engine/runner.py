"""The episode loop and the batch: users meet agents on simpy's clock and every step becomes an event.

An episode: the user opens; the agent answers (its tool calls run against the scenario's world and are
logged); and so on until the user leaves, the agent ends, the turn limit, or an error. Resuming an
episode runs it through its logged prefix (``engine.tape``) before it continues live.

Time: an episode keeps its own clock (``_Recorder.t``) while it touches nothing shared, and brings
simpy's clock up to it (one timeout) before anything that is shared: a call to a live agent or user,
a concurrency slot, the episode's end. Every event carries its exact virtual time; simpy still orders
everything that interacts; and a batch of in-process episodes costs one simpy step per episode instead
of one per turn (the engine-overhead benchmark in bench/ measures this).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from random import Random
from typing import Any

import msgspec
import simpy

from msgspec import UNSET

from .calls import UsageMeter, recorded_calls
from .contracts import (Agent, AgentFailure, AgentReply, EpisodeContext, FaultReport, ModelCall, Observation, Scenario,
                        ScenarioSet, ToolCall, ToolResult, ToolSpec, User, UserReply, Verdict, World)
from .driver import Driver
from .events import (AgentTurn, EpisodeEnded, EpisodeStarted, Event, Fault, ModelCalled, ToolCalled, ToolReturned,
                     UserTurn)
from .seeding import episode_seed, episode_streams, stream
from .tape import Divergence, Tape
from .timing import Arrivals, Delay

Outcome = tuple[str, str, dict[str, Any]]  # an episode's outcome, reason and reward, as episode_ended logs them


class BatchSettings(msgspec.Struct, kw_only=True):
    """The knobs a ``Batch`` runs with, parsed: the master seed, limits, timing models and arrivals.

    A run's ``session.RunConfig`` is what its user asked for, as typed and recorded in the manifest and in
    ``run_started``; ``session.validate`` parses it into these. Which episodes to run is not a setting:
    they are the jobs given to ``Batch.run``.
    """

    seed: int = 0
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


class Job(msgspec.Struct):
    """One episode to run: its index in the run, and its logged prefix when resuming (see ``engine.tape``)."""

    index: int
    tape: list[Event] = []


def episode_id(index: int) -> str:
    """The id of the ``index``-th episode of a run."""
    return "e" + str(index).zfill(6)  # f"e{index:06d}", for less


class _Recorder:
    """One episode's side of the log: its envelope (run, episode, ``seq`` and the episode's own clock ``t``), its
    tape, and the turns waiting for the sink.

    The episode loop stamps each turn with ``seq`` and ``t``, hands it to the recorder's ``turn_taker()`` and
    advances ``seq``. Pending turns reach the sink together, one call instead of one per turn: before anything
    else is recorded and before the episode waits on anything, so the log keeps simpy's order.
    """

    __slots__ = ("run", "ep", "env", "sink", "tape", "seq", "t", "pending", "usage")

    def __init__(self, run: str, ep: str, env: simpy.Environment, sink: Sink, tape: Tape) -> None:
        self.run, self.ep, self.env, self.sink, self.tape, self.seq = run, ep, env, sink, tape, 0
        self.t = env.now
        self.pending: list[Event] = []
        self.usage: Any = UNSET  # the episode's model usage per role, for its episode_ended (unset: none)

    def turn_taker(self) -> Callable[[UserTurn | AgentTurn], None]:
        """What takes the episode loop's turns: for a new episode the pending list's own append (a turn then
        costs no Python call), for a resumed one ``retake``."""
        return self.retake if self.tape.end else self.pending.append

    def retake(self, event: UserTurn | AgentTurn) -> None:
        """Take a turn of a resumed episode: checked against the tape while it lasts, else pending."""
        if event.seq < self.tape.end:
            self.tape.check(event)
        else:
            self.pending.append(event)

    def record(self, event: Event) -> Any:
        """Record any other event built with this recorder's seq and t: checked against the tape while it
        lasts, else sunk after the pending turns."""
        if self.seq < self.tape.end:
            self.tape.check(event)
        else:
            self.flush()
            self.sink.append(event)
        self.seq += 1
        return event

    def emit(self, cls: type[Event], **payload: Any) -> Any:
        """Build an event of ``cls`` stamped with this episode's envelope, and record it."""
        return self.record(cls(run=self.run, ep=self.ep, seq=self.seq, t=self.t, wall=_now_ns(), **payload))

    def flush(self) -> None:
        """Sink the pending turns; if the sink refuses one (it cannot be encoded), the turns before it are
        kept, it and those after it dropped, seq and t go back to it, and _Unlogged says why."""
        pending = self.pending
        if not pending:
            return
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


class Batch:
    """Runs a list of jobs on one simpy clock with at most ``concurrency`` episodes at a time."""

    def __init__(self, *, run_id: str, scenarios: ScenarioSet, make_user: Callable[[], User],
                 make_agent: Callable[[], Agent], settings: BatchSettings, sink: Sink, user_spec: str = "",
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
        self.world: Callable[[Scenario, Random], World] = getattr(scenarios, "world", None) or _no_world
        self.tools: Callable[[Scenario], list[ToolSpec]] = getattr(scenarios, "tools", None) or _no_tools
        self.judge: Callable[[Scenario, list, list[Event]], str | None] | None = getattr(scenarios, "judge", None)
        self.env = simpy.Environment(initial_time=0.0)  # a float clock: t is always encoded as a float
        self.driver = Driver(self.env, before_wait=getattr(sink, "commit", None))
        self.stopping = False  # set by stop_starting: the jobs not started yet are left

    def stop_starting(self) -> None:
        """Start no new episodes (a budget is spent): those in flight, and resumed ones, finish; the run ends."""
        self.stopping = True

    async def run(self, jobs: Iterable[Job]) -> None:
        """Run every job to its ``episode_ended``; raises Interrupted when stopped."""
        # Resumed episodes first, in the order they started, so that each starts at its logged time.
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
            if self.stopping and not job.tape:  # resumed episodes, started before, are sorted first
                return
            yield from self._episode(job)

    def _poisson(self, jobs: list[Job]) -> Generator[Any, Any, None]:
        slots = simpy.Resource(self.env, capacity=self.settings.concurrency)
        rng = stream(self.settings.seed, "arrivals")
        for job in jobs:
            if not job.tape:
                yield self.env.timeout(rng.expovariate(self.settings.arrivals.rate))
            if self.stopping and not job.tape:
                return
            self.env.process(self._queued(job, slots))

    def _queued(self, job: Job, slots: simpy.Resource) -> Generator[Any, Any, None]:
        with slots.request() as slot:
            yield slot
            if job.tape or not self.stopping:
                yield from self._episode(job)

    def _episode(self, job: Job) -> Generator[Any, Any, None]:
        """One episode from its ``episode_started`` to its ``episode_ended``."""
        env, seed = self.env, self.settings.seed
        tape = Tape(job.tape)
        if tape.start > env.now:  # a resumed episode starts when its log says it did
            yield env.timeout(tape.start - env.now)
        scenario, trial = self.scenarios.draw(job.index, seed)
        seed = episode_seed(seed, scenario.id, trial)
        run_id, ep = self.run_id, episode_id(job.index)
        rec = _Recorder(run_id, ep, env, self.sink, tape)
        # Built here rather than by rec.emit, whose **payload costs a few thousand instructions more.
        rec.record(EpisodeStarted(run=run_id, ep=ep, seq=rec.seq, t=rec.t, wall=_now_ns(), scenario_id=scenario.id,
                                  trial=trial, seed=seed, user=self.user_spec, agent=self.agent_spec,
                                  scenario={"id": scenario.id, "kind": scenario.kind, "data": scenario.data}))
        (kind, reason, reward), turns = yield from self._dialogue(rec, scenario, seed)
        if rec.t > env._now:  # simpy's clock up to the episode's end (env._now is env.now without its property)
            yield env.timeout(rec.t - env._now)
        ended = rec.record(EpisodeEnded(run=run_id, ep=ep, seq=rec.seq, t=rec.t, wall=_now_ns(), outcome=kind,
                                        reason=reason, turns=turns, reward=reward, usage=rec.usage))
        self.sink.episode_done()
        if self.on_episode_end is not None:
            self.on_episode_end(ended)

    def _dialogue(self, rec: _Recorder, scenario: Scenario, seed: int) -> Generator[Any, Any, tuple[Outcome, int]]:
        """The episode between its start and end events: its outcome and the number of turns taken."""
        # A generator of its own so that the dialogue's user, agent, world, streams and history are freed
        # when it returns: an episode waiting for the clock to reach its end holds next to nothing, and the
        # next episode reuses memory that is still in the cache.
        dialogue = _Dialogue(self, rec, scenario, seed)
        try:
            dialogue.start()
            outcome, turns = yield from dialogue.turns()
            rec.flush()
        except Exception as exc:  # a bug in a user, agent or world must not sink the batch
            outcome, turns = dialogue.failed(exc)
        if dialogue.meter is not None or rec.tape.end:  # usage reported, or a resumed episode: its usage, if any
            rec.usage = dialogue.usage()
        return outcome, turns


class _Dialogue:
    """One episode's dialogue: its user, agent and world, the turns so far, and the steps of a turn."""

    __slots__ = ("batch", "rec", "scenario", "seed", "streams", "timing", "tools", "user", "agent", "read_back",
                 "world", "history", "meter")

    def __init__(self, batch: Batch, rec: _Recorder, scenario: Scenario, seed: int) -> None:
        self.batch, self.rec, self.scenario, self.seed = batch, rec, scenario, seed
        self.streams = episode_streams(seed, batch.timed)  # user, agent, world, timing
        self.timing = self.streams[3]
        self.tools = batch.tools(scenario)
        self.history: list[Event] = []  # the turns and tool events so far: what the agent observes
        self.meter: UsageMeter | None = None  # usage by role: made at the first model call or reported usage

    def start(self) -> None:
        """Make the user, the agent and the world, and tell the user and the agent that the episode starts."""
        batch, ep, scenario, seed, tools = self.batch, self.rec.ep, self.scenario, self.seed, self.tools
        user_rng, agent_rng, world_rng, _ = self.streams
        self.user = user = batch.make_user()
        self.agent = agent = batch.make_agent()
        self.world = batch.world(scenario, world_rng)
        tape = self.rec.tape
        start = getattr(user, "start", None)
        if start is not None:
            ctx = EpisodeContext(episode_id=ep, scenario=scenario, tools=tools, rng=user_rng, seed=seed)
            if tape.end:  # a resumed episode: the model calls its log holds
                ctx.recorded = recorded_calls(tape.events, "user")
            start(ctx)
        start = getattr(agent, "start", None)
        if start is not None:
            ctx = EpisodeContext(episode_id=ep, scenario=scenario.agent_view(), tools=tools, rng=agent_rng, seed=seed)
            if tape.end:
                ctx.recorded = recorded_calls(tape.events, "agent")
            start(ctx)
        self.read_back = not getattr(agent, "deterministic", True)  # the protocol's default

    def turns(self) -> Generator[Any, Any, tuple[Outcome, int]]:
        """User and agent take turns until the user leaves or ends, the agent ends, or the turn limit: the
        outcome, and the number of turns taken."""
        # The hot path: the steps of a turn are written out, as a method called per turn would add about 4%
        # to the instructions of an episode of bench/bench_engine.py; only a live call, or an answer with tool
        # calls or faults, hands over to a method. seq and t live in locals, written through to the recorder,
        # so that the recorder is current whenever a method (or an error) takes over.
        rec, history, timing, env = self.rec, self.history, self.timing, self.batch.env
        run, ep, remember, ask_user = rec.run, rec.ep, history.append, self.user.respond
        ask_agent = self.ask_agent if self.read_back else self.agent.respond  # a deterministic agent directly
        settings = self.batch.settings
        think, latency_of, max_turns = settings.think.sample, settings.latency.sample, settings.max_turns
        take, seq, t, turn = rec.turn_taker(), rec.seq, rec.t, 0
        spoken: AgentTurn | None = None  # what the user answers: nothing, to open the episode
        while True:
            # The user's turn: its reply (a live user's awaited), spoken after its thinking time.
            try:
                reply = ask_user(spoken)
            except Exception as exc:
                raise _failure("user", exc) from None
            if type(reply) is not UserReply and hasattr(reply, "__await__"):
                reply = yield from self.call(reply, t, "user")
            if reply is None:
                return _verdict(self.user, "abandoned", "the user left without a word"), turn
            rec.t = t = t + (reply.think if reply.think is not None else think(timing))
            said = UserTurn(run=run, ep=ep, seq=seq, t=t, wall=_now_ns(), turn=turn, utterance=reply.utterance,
                            frames=reply.frames, end=reply.end, reaction=reply.reaction)
            if reply.model_calls or reply.inferred:  # a model-driven user
                seq = self.model_user_turn(reply, said)
            take(said)
            rec.seq = seq = seq + 1
            remember(said)
            turn += 1
            # The agent's turn: its latency is drawn first, as a live agent's answer is due when it has passed.
            latency = latency_of(timing)
            obs = Observation(user=said, history=history, tool_results=[], turn_index=turn)
            try:
                answer = ask_agent(obs)
            except Exception as exc:
                raise _failure("agent", exc) from None
            due = t + latency
            if type(answer) is not AgentReply and hasattr(answer, "__await__"):
                answer = yield from self.call(answer, due, "agent")
                due = env._now  # calls after tool rounds are due at once
            if type(answer) is not AgentReply or answer.tool_calls or answer.faults or answer.model_calls:
                answer = yield from self.tool_rounds(obs, answer, due)
                seq = rec.seq  # after the tool events
            if answer.latency is not None:  # a live agent's measured latency
                latency = answer.latency
            if answer.usage is not None and self.meter is None:  # the episode's end sums the turns' usage
                self.meter = UsageMeter()
            rec.t = t = t + latency
            spoken = AgentTurn(run=run, ep=ep, seq=seq, t=t, wall=_now_ns(), turn=turn, utterance=answer.utterance,
                               frames=answer.frames, state=answer.state, tagged_slots=answer.tagged_slots,
                               end=answer.end, latency=latency, usage=answer.usage, cost=answer.cost,
                               action=answer.action)
            take(spoken)
            rec.seq = seq = seq + 1
            remember(spoken)
            turn += 1
            if said.end or spoken.end:
                return _verdict(self.user, judge=self.judge()), turn
            if turn >= max_turns:
                return ("max_turns", f"reached the limit of {max_turns} turns", {}), turn

    def ask_agent(self, obs: Observation) -> AgentReply | Awaitable[AgentReply]:
        """The agent's answer to ``obs`` as it comes (a reply or a live call); an agent that cannot be re-run is
        not asked while the tape lasts: its answer is read back from it."""
        rec = self.rec
        if self.read_back and rec.seq < rec.tape.end:
            taped = rec.tape.agent_step(rec.seq)
            if taped is not None:
                return taped
        return self.agent.respond(obs)

    def tool_rounds(self, obs: Observation, answer: Any, due: float) -> Generator[Any, Any, AgentReply]:
        """The agent's turn from an answer that is not a plain reply: its reported faults are logged, its tool
        calls run and it is asked again, until it answers without tool calls.

        A live call after a tool round is due at once: virtual time stands still for tool rounds.
        """
        limit = self.batch.settings.max_tool_rounds
        rounds = 0
        while True:
            if type(answer) is not AgentReply and hasattr(answer, "__await__"):
                answer = yield from self.call(answer, due, "agent")
                due = self.batch.env._now
            for f in answer.faults:
                self.rec.emit(Fault, who="agent", kind=f.kind, detail=f.detail, attempt=f.attempt)
            if answer.model_calls:
                self.log_calls("agent", answer.model_calls)
            if not answer.tool_calls:
                return answer
            obs = self.run_tools(obs, answer.tool_calls)
            rounds += 1
            if rounds > limit:
                raise _EpisodeError(f"agent exceeded {limit} tool rounds in one turn", "agent",
                                    [FaultReport(kind="limit", detail=f"more than {limit} tool rounds in one turn")])
            try:
                answer = self.ask_agent(obs)
            except Exception as exc:
                raise _failure("agent", exc) from None

    def model_user_turn(self, reply: UserReply, said: UserTurn) -> int:
        """Log a model-driven user's model calls (each after its failed attempts) before its turn ``said``, which
        moves past them and takes the reply's usage, cost and ``inferred`` mark: the turn's seq."""
        rec = self.rec
        self.log_calls("user", reply.model_calls)
        said.seq = rec.seq
        if reply.usage is not None:
            said.usage = reply.usage
        if reply.cost is not None:
            said.cost = reply.cost
        if reply.inferred:
            said.inferred = True
        return rec.seq

    def log_calls(self, who: str, calls: list[ModelCall]) -> None:
        """Log the model calls of ``who``, each after the failed attempts before it, and count their usage."""
        rec = self.rec
        meter = self.meter
        if meter is None:
            meter = self.meter = UsageMeter()
        for call in calls:
            for f in call.faults:
                rec.emit(Fault, who=who, kind=f.kind, detail=f.detail, attempt=f.attempt)
            rec.emit(ModelCalled, role=who, model=call.model, digest=call.digest, content=call.content,
                     tool_calls=call.tool_calls, finish_reason=call.finish_reason, usage=call.usage, cost=call.cost,
                     attempt=call.attempt, cached=call.cached)
            meter.call(who, call)

    def usage(self) -> Any:
        """The episode's model usage per role (its calls', and its turns' for roles that logged no calls), or
        UNSET when no one reported any."""
        return (self.meter or UsageMeter()).turns(self.history) or UNSET

    def run_tools(self, obs: Observation, calls: list[ToolCall]) -> Observation:
        """Run one round of tool calls against the world, logging each call and what it returned: ``obs``
        with the results."""
        rec, history = self.rec, self.history
        results: list[ToolResult] = []
        for n, call in enumerate(calls):
            call_id = call.call_id or f"{rec.ep}-{rec.seq}-{n}"
            history.append(rec.emit(ToolCalled, call_id=call_id, service=call.service, method=call.method,
                                    parameters=call.parameters))
            try:
                rows, error = self.world.call(call.service, call.method, call.parameters)
            except Exception as exc:  # the agent hears that the tool failed; the episode goes on
                rec.emit(Fault, who="tool", kind="exception", detail=_describe(exc))
                rows, error = None, f"tool failed: {_describe(exc)}"
            history.append(rec.emit(ToolReturned, call_id=call_id, results=rows, error=error))
            results.append(ToolResult(call_id=call_id, results=rows, error=error))
        return Observation(user=obs.user, history=history, tool_results=results, turn_index=obs.turn_index)

    def call(self, call: Awaitable[Any], due: float, who: str) -> Generator[Any, Any, Any]:
        """The answer of a live user or agent (``who``): the call starts at the episode's virtual time, and
        its answer is taken at virtual time ``due`` (see engine/driver.py)."""
        rec, env = self.rec, self.batch.env
        try:
            rec.flush()  # the pending turns go to the log before the episode waits
        except _Unlogged:
            _abandon(call)
            raise
        if rec.t > env._now:  # simpy's clock up to the episode's (env._now is env.now without its property)
            yield env.timeout(rec.t - env._now)
        future, wake = self.batch.driver.start(call, due)
        yield wake
        try:
            return future.result()
        except Exception as exc:
            raise _failure(who, exc) from None

    def judge(self) -> Callable[[list], str | None] | None:
        """The scenario set's judge of the user's claims against this episode's events, if it has one."""
        judge, scenario, history = self.batch.judge, self.scenario, self.history
        if judge is None:
            return None
        return lambda claims: judge(scenario, claims, history)

    def failed(self, exc: Exception) -> tuple[Outcome, int]:
        """Log the faults of an episode that ``exc`` ended: its outcome, and the number of turns taken."""
        rec = self.rec
        if type(exc) is not _Unlogged:
            try:
                rec.flush()  # the turns taken before the error
            except _Unlogged as unlogged:  # one of them the log cannot take: that failure came first
                exc = unlogged
        if type(exc) is _Unlogged:  # the episode ends in place of that turn (the recorder went back to it)
            turns = exc.event.turn
        else:
            turns = sum(1 for e in self.history if type(e) is UserTurn or type(e) is AgentTurn)
        if type(exc) is Divergence:
            rec.tape.cut(rec.seq)  # stop checking: record what happened from here on
        error = _episode_error(exc)
        for f in error.faults:
            rec.emit(Fault, who=error.who, kind=f.kind, detail=f.detail, attempt=f.attempt)
        return ("error", error.reason, {}), turns


class _EpisodeError(Exception):
    """What ends an episode with outcome error: the reason, and the faults of ``who`` that log it."""

    def __init__(self, reason: str, who: str, faults: list[FaultReport]) -> None:
        super().__init__(reason)
        self.reason, self.who, self.faults = reason, who, faults


class _Unlogged(Exception):
    """A turn event the sink refused (it cannot be encoded): the episode ends with a fault in its place."""

    def __init__(self, cause: Exception, event: UserTurn | AgentTurn) -> None:
        super().__init__(str(cause))
        self.cause, self.event = cause, event


def _failure(who: str, exc: Exception) -> _EpisodeError:
    """The error of an episode whose user or agent raised ``exc``; an agent that gave up reports its faults."""
    if isinstance(exc, AgentFailure):  # a live agent or user that gave up: its faults
        return _EpisodeError(f"{who} failed: {exc.detail}", who, exc.faults)
    return _EpisodeError(f"{who} failed: {_describe(exc)}", who, [FaultReport(kind="exception", detail=_describe(exc))])


def _episode_error(exc: Exception) -> _EpisodeError:
    """Any exception that ended an episode as an _EpisodeError: a user's or an agent's, or the engine's."""
    if type(exc) is _EpisodeError:
        return exc
    if type(exc) is Divergence:
        return _EpisodeError(f"resume diverged from the log: {exc}", "engine",
                             [FaultReport(kind="divergence", detail=str(exc))])
    if type(exc) is _Unlogged:
        exc = exc.cause
    return _EpisodeError(f"engine error: {_describe(exc)}", "engine",
                         [FaultReport(kind="exception", detail=_describe(exc))])


def _abandon(call: Any) -> None:
    """Drop a live call that will not be waited for: cancel a future, close a coroutine."""
    stop = getattr(call, "cancel", None) or getattr(call, "close", None)
    if stop is not None:
        stop()


def _verdict(user: User, default: str | None = None, reason: str = "",
             judge: Callable[[list], str | None] | None = None) -> Outcome:
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


def _no_world(scenario: Scenario, rng: Random) -> World:
    return _NoWorld()


def _no_tools(scenario: Scenario) -> list[ToolSpec]:
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

