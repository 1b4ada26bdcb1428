"""The episode loop and the batch: users meet agents on simpy's clock and every step becomes an event.

An episode: the user opens; the agent answers (its tool calls run against the scenario's world and are
logged); and so on until the user leaves or has its last word, the agent ends, the turn limit, or an error.
An episode may start from a logged prefix (``engine.tape``): resumed, verified, forked or replayed, it runs
through it before it continues live (docs/prefix.md).

Time: an episode keeps its own clock (``_Recorder.t``) while it touches nothing shared, and brings
simpy's clock up to it (one timeout) before anything that is shared: a call to a live agent or user,
a concurrency slot, the episode's end. Every event carries its exact virtual time; simpy still orders
everything that interacts; and a batch of in-process episodes costs one simpy step per episode instead
of one per turn (the engine-overhead benchmark in bench/ measures this). Each agent call has its own
modelled latency, so a tool round takes virtual time.

Schedule: episodes take the slots in the order of their jobs, so an episode starts when the one before it
in its slot ends; a batch given what a log already holds (``Logged``) lets ended episodes hold their slot
from their logged start to their logged end without running (phantoms), so a resumed run starts every
episode at the virtual time the uninterrupted run would have.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from random import Random
from typing import Any

import msgspec
import simpy
from msgspec import UNSET

from .calls import RecordedCalls, UsageMeter
from .collector import tuned_collector
from .contracts import (Agent, AgentFailure, AgentReply, EpisodeContext, ExecutedCall, FaultReport, ModelCall,
                        Observation, Scenario, ScenarioSet, ToolCall, ToolResult, ToolSpec, User, UserReply, Verdict,
                        World)
from .driver import Driver
from .events import (AgentTurn, EpisodeEnded, EpisodeStarted, Event, Fault, ModelCalled, ToolCalled, ToolReturned,
                     UserTurn)
from .seeding import episode_seed, episode_streams, stream
from .tape import (EMPTY, MISSING, Divergence, Fork, Tape, TapedFailure, TapedReply, TapedUserReply,
                   fork_at_turn)
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


class Cast:
    """Who plays an episode: the makers of its user and agent, and their specs as ``episode_started`` records them."""

    __slots__ = ("make_user", "make_agent", "user", "agent")

    def __init__(self, make_user: Callable[[], User], make_agent: Callable[[], Agent], user: str = "",
                 agent: str = "") -> None:
        self.make_user, self.make_agent, self.user, self.agent = make_user, make_agent, user, agent


class Job(msgspec.Struct):
    """One episode to run: its index in the run and, optionally, its logged events (resuming it), its id (else
    ``episode_id(index)``), where it comes from (a fork or a replay: ``engine.tape.Fork``) and who plays it
    (else the batch's user and agent)."""

    index: int
    tape: list[Event] = []
    ep: str = ""
    fork: Fork | None = None
    cast: Any = None


class Branch(msgspec.Struct, kw_only=True):
    """A fork of an episode to run after it ends, in the same run: ``name``, the number of turns it copies,
    and who plays it from there ("" and {}: the run's user and agent; options are added to the run's)."""

    name: str
    at_turn: int
    agent: str = ""
    user: str = ""
    agent_options: dict[str, Any] = {}
    user_options: dict[str, Any] = {}


class Logged:
    """What a run's log already holds: the end time of each ended episode, and the events of the episodes to
    go through again (unfinished ones, ended ones to verify in ``check``, mainlines whose branches may be
    due; anything with ``get(ep, default)``). An ended episode that is not to be checked is a phantom: it
    holds its slot until its logged end. Without ``run_new``, episodes the log does not hold are not run."""

    __slots__ = ("ends", "events", "check", "run_new")

    def __init__(self, ends: Mapping[str, float], events: Any, check: Iterable[str] = (),
                 run_new: bool = True) -> None:
        self.ends, self.events, self.check, self.run_new = ends, events, frozenset(check), run_new


def episode_id(index: int) -> str:
    """The id of the ``index``-th episode of a run."""
    return "e" + str(index).zfill(6)  # f"e{index:06d}", for less


def branch_id(ep: str, branch: str) -> str:
    """The id of the fork ``branch`` of episode ``ep``."""
    return f"{ep}-{branch}"


class _Recorder:
    """One episode's side of the log: its envelope (run, episode, ``seq`` and the episode's own clock ``t``), its
    tape, and the turns waiting for the sink.

    The episode loop stamps each turn with ``seq`` and ``t``, hands it to the recorder's ``turn_taker()`` and
    advances ``seq``. Pending turns reach the sink together, one call instead of one per turn: before anything
    else is recorded and before the episode waits on anything, so the log keeps simpy's order. Events with
    seq < ``taken`` are the tape's (copied or read back), those up to the tape's end are checked against it.
    """

    __slots__ = ("run", "ep", "env", "sink", "tape", "seq", "t", "pending", "taken", "kept", "usage")

    def __init__(self, run: str, ep: str, env: simpy.Environment, sink: Sink) -> None:
        self.run, self.ep, self.env, self.sink, self.tape, self.seq = run, ep, env, sink, EMPTY, 0
        self.t = env.now
        self.pending: list[Event] = []
        self.taken = 0
        self.kept: list[Event] | None = None  # every event of the episode, when its branches will need them
        self.usage: Any = UNSET  # the episode's model usage per role, for its episode_ended (unset: none)

    def turn_taker(self) -> Callable[[UserTurn | AgentTurn], None]:
        """What takes the episode loop's turns: for a new episode the pending list's own append (a turn then
        costs no Python call), for one with a tape ``retake``."""
        return self.retake if self.seq < self.tape.end or self.kept is not None else self.pending.append

    def retake(self, event: UserTurn | AgentTurn) -> None:
        """Take a turn of an episode with a tape: the tape's own while taken, checked while it lasts, else pending."""
        seq = event.seq
        if seq < self.taken:
            if seq >= self.tape.logged:
                self.pending.append(self.tape.events[seq])
        elif seq < self.tape.end:
            self.tape.check(event)
        else:
            self.pending.append(event)

    def start(self, started: EpisodeStarted, copies: list[Event]) -> None:
        """Record ``episode_started``; a fork resumed from its own log checks that it starts with ``copies`` (as
        far as the log holds them)."""
        tape = self.tape
        if tape.logged:
            tape.check(started)
            for event in copies:
                if event.seq < tape.logged:
                    tape.check(event)
        else:
            self.flush()
            self.sink.append(started)
            if self.kept is not None:
                self.kept.append(started)
        self.seq = 1

    def record(self, event: Event) -> Any:
        """Record any other event built with this recorder's seq and t: the tape's while taken, checked while
        the tape lasts, else sunk after the pending turns. Returns the event as the log holds it."""
        seq = self.seq
        if seq < self.taken:
            event = self.tape.events[seq]
            if seq >= self.tape.logged:
                self.flush()
                self.sink.append(event)
        elif seq < self.tape.end:
            self.tape.check(event)
        else:
            self.flush()
            self.sink.append(event)
            if self.kept is not None:
                self.kept.append(event)
        self.seq = seq + 1
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
        if self.kept is not None:
            self.kept.extend(pending)
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

    def diverged(self) -> None:
        """Stop checking after a divergence: what happens from here on is recorded after the logged events."""
        tape = self.tape
        if self.seq < tape.end:
            self.seq, self.t = tape.end, max(self.t, tape.events[-1].t)
        self.taken = min(self.taken, self.seq)
        self.pending.clear()


class Batch:
    """Runs a list of jobs on one simpy clock with at most ``concurrency`` episodes at a time.

    Optional: ``logged``, what the log already holds (resume, verify); ``plan``, the branches to fork an
    episode into when it ends (given its events), each made with ``cast_of(branch)``.

    ``stop_starting()`` (a spent budget) stops new episodes: a job whose episode the log does not hold (a new
    mainline, fork, replay or branch) is passed over and counted in ``left``; episodes in flight, unfinished
    ones the log holds and phantoms go on as usual, so a later resume still runs the schedule exactly.
    """

    def __init__(self, *, run_id: str, scenarios: ScenarioSet, make_user: Callable[[], User],
                 make_agent: Callable[[], Agent], settings: BatchSettings, sink: Sink, user_spec: str = "",
                 agent_spec: str = "", on_episode_end: Callable[[EpisodeEnded], None] | None = None,
                 logged: Logged | None = None, plan: Callable[[list[Event]], list[Branch]] | None = None,
                 cast_of: Callable[[Branch], Cast] | None = None) -> None:
        self.run_id = run_id
        self.scenarios = scenarios
        self.cast = Cast(make_user, make_agent, user_spec, agent_spec)
        self.settings = settings
        self.sink = sink
        self.on_episode_end = on_episode_end
        self.logged = logged
        self.plan = plan
        self.cast_of = cast_of or (lambda branch: self.cast)
        self.diverged: dict[str, Divergence] = {}  # episode id -> how its re-run differed from its log
        self.timed = settings.think.draws or settings.latency.draws  # the episodes need a timing stream
        # a scenario set's optional parts, with the defaults engine/contracts.py documents
        self.world: Callable[[Scenario, Random], World] = getattr(scenarios, "world", None) or _no_world
        self.tools: Callable[[Scenario], list[ToolSpec]] = getattr(scenarios, "tools", None) or _no_tools
        self.judge: Callable[[Scenario, list, list[Event]], str | None] | None = getattr(scenarios, "judge", None)
        self.env = simpy.Environment(initial_time=0.0)  # a float clock: t is always encoded as a float
        self.driver = Driver(self.env, before_wait=getattr(sink, "commit", None))
        self.stopping = False  # set by stop_starting
        self.left = 0  # new episodes passed over since then

    def stop_starting(self) -> None:
        """Start no new episodes (a budget is spent): those in flight and those the log holds finish."""
        self.stopping = True

    async def run(self, jobs: Iterable[Job]) -> None:
        """Run every job to its ``episode_ended``, in order; raises Interrupted when stopped."""
        jobs = list(jobs)
        if self.settings.arrivals.kind == "poisson":
            self.env.process(self._poisson(jobs))
        else:
            queue = iter(jobs)
            for _ in range(min(self.settings.concurrency, len(jobs))):
                self.env.process(self._worker(queue))
        with tuned_collector():
            await self.driver.run()

    def _worker(self, queue: Iterable[Job]) -> Generator[Any, Any, None]:
        for job in queue:
            yield from self._episode(job)

    def _poisson(self, jobs: list[Job]) -> Generator[Any, Any, None]:
        slots = simpy.Resource(self.env, capacity=self.settings.concurrency)
        rng = stream(self.settings.seed, "arrivals")
        for job in jobs:
            yield self.env.timeout(rng.expovariate(self.settings.arrivals.rate))
            self.env.process(self._queued(job, slots))

    def _queued(self, job: Job, slots: simpy.Resource) -> Generator[Any, Any, None]:
        with slots.request() as slot:
            yield slot
            yield from self._episode(job)

    def _episode(self, job: Job) -> Generator[Any, Any, None]:
        """One episode from its ``episode_started`` to its ``episode_ended``, then its branches (if any)."""
        env, run_id = self.env, self.run_id
        ep = job.ep or episode_id(job.index)
        own = job.tape or None
        logged = self.logged
        if logged is not None:
            end = logged.ends.get(ep)
            if end is None and not logged.run_new and ep not in logged.events:
                return
            if end is not None and ep not in logged.check:  # a phantom: it ended, it only holds its slot
                if end > env._now:
                    yield env.timeout(end - env._now)
                if self.plan is not None and job.fork is None:
                    yield from self._branches(job.index, ep, logged.events.get(ep) or [])
                return
            own = logged.events.get(ep, own)
        if own is None and self.stopping:  # a new episode: the run starts no more
            self.left += 1
            return
        cast = job.cast or self.cast
        rec = _Recorder(run_id, ep, env, self.sink)
        fork = job.fork
        copies: list[Event] = []
        if fork is None:
            scenario, trial = self.scenarios.draw(job.index, self.settings.seed)
            seed = episode_seed(self.settings.seed, scenario.id, trial)
            snapshot = {"id": scenario.id, "kind": scenario.kind, "data": scenario.data}
            parent = parent_run = branch = None
        else:
            # the snapshot as any reader of the log sees it (a mainline's is still the scenario's own objects)
            snapshot = msgspec.json.decode(msgspec.json.encode(fork.started.scenario))
            scenario = Scenario(id=snapshot.get("id", fork.started.scenario_id), kind=snapshot.get("kind", ""),
                                data=snapshot.get("data", {}))
            trial, seed, branch = fork.started.trial, fork.started.seed, fork.branch
            parent, parent_run = fork.ref(run_id)
            copies = fork.copies(run_id, ep, rec.t)
        # Built here rather than by rec.emit, whose **payload costs a few thousand instructions more.
        started = EpisodeStarted(run=run_id, ep=ep, seq=0, t=rec.t, wall=_now_ns(), scenario_id=scenario.id,
                                 trial=trial, seed=seed, user=cast.user, agent=cast.agent, scenario=snapshot,
                                 parent=parent, branch=branch)
        if parent_run is not None:
            started.parent_run = parent_run
        if own is not None:  # resumed or verified: its own log, its copied prefix (if a fork) taken as it is
            copied = len(copies) + 1 if copies else 0
            if len(own) < copied:  # a crash cut the fork's copied prefix: the rest of it is written again
                rec.tape = Tape([*own, *copies[len(own) - 1:]], copied=copied, logged=len(own))
            else:
                rec.tape = Tape(own, copied=copied)
        elif copies:  # a fork: its prefix is copied into the log
            rec.tape = Tape([started, *copies], copied=len(copies) + 1, logged=0)
        rec.taken = rec.tape.copied
        if self.plan is not None and fork is None:
            rec.kept = list(own) if own is not None else []
        offered = fork.calls if fork is not None else None
        (kind, reason, reward), turns = yield from self._dialogue(rec, scenario, seed, cast, started, copies, offered)
        if rec.t > env._now:  # simpy's clock up to the episode's end (env._now is env.now without its property)
            yield env.timeout(rec.t - env._now)
        try:
            ended = rec.record(EpisodeEnded(run=run_id, ep=ep, seq=rec.seq, t=rec.t, wall=_now_ns(), outcome=kind,
                                            reason=reason, turns=turns, reward=reward, usage=rec.usage))
        except Divergence as exc:  # the re-run ended otherwise than its log: that end, after a divergence fault
            ended = self._diverged_end(rec, exc, turns)
        self.sink.episode_done()
        if self.on_episode_end is not None:
            self.on_episode_end(ended)
        if rec.kept is not None:
            kept, rec.kept = rec.kept, None
            yield from self._branches(job.index, ep, kept)

    def _diverged_end(self, rec: _Recorder, exc: Divergence, turns: int) -> EpisodeEnded:
        """Record the end of an episode whose re-run reached its end otherwise than the log did, after the log."""
        self.diverged[rec.ep] = exc
        rec.diverged()
        error = _episode_error(exc)
        for f in error.faults:
            rec.emit(Fault, who=error.who, kind=f.kind, detail=f.detail, attempt=f.attempt)
        return rec.record(EpisodeEnded(run=rec.run, ep=rec.ep, seq=rec.seq, t=rec.t, wall=_now_ns(), outcome="error",
                                       reason=error.reason, turns=turns, usage=rec.usage))

    def _branches(self, index: int, ep: str, events: list[Event]) -> Generator[Any, Any, None]:
        """The branches ``plan`` forks an ended episode into, one after the other in its slot."""
        if not events or type(events[-1]) is not EpisodeEnded:
            return
        for branch in self.plan(events):
            fork = fork_at_turn(events, branch.at_turn, branch.name)
            if fork is not None:
                yield from self._episode(Job(index, ep=branch_id(ep, branch.name), fork=fork,
                                             cast=self.cast_of(branch)))

    def _dialogue(self, rec: _Recorder, scenario: Scenario, seed: int, cast: Cast, started: EpisodeStarted,
                  copies: list[Event],
                  offered: Mapping[str, ModelCall] | None) -> Generator[Any, Any, tuple[Outcome, int]]:
        """The episode between its start and end events: its outcome and the number of turns taken."""
        # A generator of its own so that the dialogue's user, agent, world, streams and history are freed
        # when it returns: an episode waiting for the clock to reach its end holds next to nothing, and the
        # next episode reuses memory that is still in the cache.
        dialogue = _Dialogue(self, rec, scenario, seed)
        try:
            rec.start(started, copies)
            dialogue.start(cast, offered)
            if rec.tape.copied > 1 and not (dialogue.user_asked or dialogue.agent_asked):
                dialogue.take_copied()
            outcome, turns = yield from dialogue.turns()
            rec.flush()
        except Exception as exc:  # a bug in a user, agent or world must not sink the batch
            outcome, turns = dialogue.failed(exc)
        if dialogue.meter is not None:  # a model call or a turn's usage was reported (read back ones too)
            rec.usage = dialogue.usage()
        return outcome, turns


class _Dialogue:
    """One episode's dialogue: its user, agent and world, the turns so far, and the steps of a turn.

    With a tape, a participant is *read back* where the tape holds its steps and it is not deterministic, or
    everywhere in the copied prefix; a deterministic one is then also asked (*warmed*), its answer dropped.
    A participant that was read back gets the episode so far (``warm(history)``, if it has it) before it is
    first asked live. Model calls are logged before the step they made (``log_calls``) and counted by role
    (``meter``), those of a copied prefix aside (its parent paid for them).
    """

    __slots__ = ("batch", "rec", "scenario", "seed", "streams", "timing", "tools", "user", "agent", "world",
                 "history", "user_asked", "agent_asked", "user_rerun", "agent_rerun", "user_taped", "agent_taped",
                 "warm_user", "warm_agent", "turn", "spoken", "said", "meter")

    def __init__(self, batch: Batch, rec: _Recorder, scenario: Scenario, seed: int) -> None:
        self.batch, self.rec, self.scenario, self.seed = batch, rec, scenario, seed
        self.streams = episode_streams(seed, batch.timed)  # user, agent, world, timing
        self.timing = self.streams[3]
        self.tools = batch.tools(scenario)
        self.history: list[Event] = []  # the turns and tool events so far: what the agent observes
        self.turn, self.spoken, self.said = 0, None, None  # where the turns start: past a prefix taken whole, if any
        self.meter: UsageMeter | None = None  # usage by role: made at the first model call or reported usage

    def start(self, cast: Cast, offered: Mapping[str, ModelCall] | None = None) -> None:
        """Make the user, the agent and the world, and tell the user and the agent that the episode starts: with
        the model calls the tape holds for each (``EpisodeContext.recorded``; the user's also ``offered``)."""
        batch, ep, scenario, seed, tools = self.batch, self.rec.ep, self.scenario, self.seed, self.tools
        user_rng, agent_rng, world_rng, _ = self.streams
        self.user = user = cast.make_user()
        self.agent = agent = cast.make_agent()
        self.world = batch.world(scenario, world_rng)
        tape = self.rec.tape
        start = getattr(user, "start", None)
        if start is not None:
            ctx = EpisodeContext(episode_id=ep, scenario=scenario, tools=tools, rng=user_rng, seed=seed)
            if tape.end or offered:
                ctx.recorded = RecordedCalls(tape.events, "user", offered)
            start(ctx)
        start = getattr(agent, "start", None)
        if start is not None:
            ctx = EpisodeContext(episode_id=ep, scenario=scenario.agent_view(), tools=tools, rng=agent_rng, seed=seed)
            if tape.end:
                ctx.recorded = RecordedCalls(tape.events, "agent")
            start(ctx)
        self.user_rerun = getattr(user, "deterministic", True)  # the protocol's default
        self.agent_rerun = getattr(agent, "deterministic", True)
        self.user_taped = bool(tape.end) and (bool(tape.copied) or not self.user_rerun)
        self.agent_taped = bool(tape.end) and (bool(tape.copied) or not self.agent_rerun)
        # In a copied prefix a deterministic participant is asked (its answers dropped) unless it can take the
        # episode so far in one warm(history) call; one that was not asked is warmed before it goes on live.
        self.user_asked = self.user_rerun and not hasattr(user, "warm")
        self.agent_asked = self.agent_rerun and not hasattr(agent, "warm")
        self.warm_user = self.user_taped and not (self.user_rerun and (self.user_asked or not tape.copied))
        self.warm_agent = self.agent_taped and not (self.agent_rerun and (self.agent_asked or not tape.copied))

    def turns(self) -> Generator[Any, Any, tuple[Outcome, int]]:
        """User and agent take turns until the user leaves or ends, the agent ends, or the turn limit: the
        outcome, and the number of turns taken."""
        # The hot path: the steps of a turn are written out, as a method called per turn would add about 4%
        # to the instructions of an episode of bench/bench_engine.py; only a live call, an answer with tool
        # calls or faults, or a step read from the tape, hands over to a method. seq and t live in locals,
        # written through to the recorder, so that the recorder is current whenever a method (or an error)
        # takes over.
        rec, history, timing = self.rec, self.history, self.timing
        run, ep, remember = rec.run, rec.ep, history.append
        taped = rec.seq < rec.tape.end  # past a prefix taken whole, the turns are as in a new episode
        ask_user = self.ask_user if self.user_taped and taped else self.user.respond  # a deterministic user directly
        ask_agent = self.ask_agent if self.agent_taped and taped else self.agent.respond
        settings = self.batch.settings
        think, latency_of, max_turns = settings.think.sample, settings.latency.sample, settings.max_turns
        take, seq, t, turn = rec.turn_taker(), rec.seq, rec.t, self.turn
        spoken: AgentTurn | None = self.spoken  # what the user answers: nothing, to open the episode
        said: UserTurn | None = self.said  # a user turn a copied prefix ended with: the agent answers it first
        while True:
            if said is None:
                # The user's turn: its reply (a live user's awaited), spoken after its thinking time. The think
                # time is drawn even when the user gives its own, so that a reply read back from the tape leaves
                # the timing stream where the logged one did.
                try:
                    reply = ask_user(spoken)
                except Exception as exc:
                    raise _failure("user", exc) from None
                pause = think(timing)
                if type(reply) is not UserReply:  # a live user's call, a reply from the tape, or None (it leaves)
                    reply = yield from self.user_reply(reply, t, pause)
                    if reply is None:
                        return self.verdict("abandoned", "the user left without a word"), turn
                    rec.t = t = reply.t
                    seq = rec.seq  # past the model calls logged before a reply read back
                else:
                    rec.t = t = t + (pause if reply.think is None else reply.think)
                said = UserTurn(run=run, ep=ep, seq=seq, t=t, wall=_now_ns(), turn=turn, utterance=reply.utterance,
                                frames=reply.frames, end=reply.end, reaction=reply.reaction, persona=reply.persona)
                if reply.model_calls or reply.inferred:  # a model-driven user
                    seq = self.model_user_turn(reply, said)
                take(said)
                rec.seq = seq = seq + 1
                remember(said)
                turn += 1
                if reply.final:  # the user's last word: the agent does not answer it
                    return self.verdict(), turn
            # The agent's turn: its latency is drawn first, as a live agent's answer is due when it has passed.
            latency = latency_of(timing)
            obs = Observation(user=said, history=history, tool_results=[], turn_index=turn)
            try:
                answer = ask_agent(obs)
            except Exception as exc:
                raise _failure("agent", exc) from None
            if (type(answer) is not AgentReply or answer.tool_calls or answer.faults or answer.model_calls
                    or answer.executed):
                answer, latency = yield from self.agent_step(obs, answer, latency)
                seq, t = rec.seq, rec.t  # after the tool and model-call events, at the answer's time
            else:
                if answer.latency is not None:  # the agent's own (a measured latency)
                    latency = answer.latency
                rec.t = t = t + latency
            if answer.usage is not None and self.meter is None:  # the episode's end sums the turns' usage
                self.meter = UsageMeter()
            spoken = AgentTurn(run=run, ep=ep, seq=seq, t=t, wall=_now_ns(), turn=turn, utterance=answer.utterance,
                               frames=answer.frames, state=answer.state, tagged_slots=answer.tagged_slots,
                               end=answer.end, latency=latency, usage=answer.usage, cost=answer.cost,
                               action=answer.action)
            if answer.action is not None:  # set apart: msgspec takes more than 16 keywords a few times slower
                spoken.action_by, spoken.prompt = answer.action_by, answer.prompt
            if answer.agent_name is not None:
                spoken.agent_name = answer.agent_name
            take(spoken)
            rec.seq = seq = seq + 1
            remember(spoken)
            turn += 1
            if said.end or spoken.end:
                return self.verdict(), turn
            if turn >= max_turns:
                return ("max_turns", f"reached the limit of {max_turns} turns", {}), turn
            said = None

    def take_copied(self) -> None:
        """Take a copied prefix in one pass when no participant is asked about it (each reads its steps back or
        warms up in one call): its events are logged (a fork's) and observed, the world is called as logged, the
        timing stream draws what the turns drew, and the participants are warmed; the turns go on from there."""
        rec, history, world = self.rec, self.history, self.world
        events, end = rec.tape.events, rec.tape.copied
        think, latency = self.batch.settings.think.sample, self.batch.settings.latency.sample
        timing, round_t, answering = self.timing, None, False  # round_t: the time of the tool round being taken
        for seq in range(1, end):
            event = events[seq]
            kind = type(event)
            if kind is UserTurn:
                think(timing)
                answering, round_t = False, None
            elif kind is ModelCalled and event.role == "user" or kind is Fault and event.who == "user":
                pass  # the user's calls before its turn: drawn with the turn
            elif not answering:  # the agent's first call after a user turn
                latency(timing)
                answering = True
            if kind is ToolCalled and event.executed_by is UNSET:  # a tool the agent ran itself drew nothing
                if event.t != round_t:  # a round: the agent is called again after it (rounds differ in time)
                    round_t = event.t
                    latency(timing)
                try:
                    world.call(event.service, event.method, event.parameters)
                except Exception:
                    pass  # the log says what the tool gave
            if kind is UserTurn or kind is AgentTurn or kind is ToolCalled or kind is ToolReturned:
                history.append(event)
        if rec.tape.logged < end:
            rec.pending.extend(events[max(1, rec.tape.logged):end])
        rec.seq, rec.t, rec.taken = end, events[end - 1].t, max(rec.taken, end)
        turns = [e for e in history if type(e) is UserTurn or type(e) is AgentTurn]
        self.turn = len(turns)
        if turns and type(turns[-1]) is UserTurn:  # the agent answers it first
            self.said = turns[-1]
            turns.pop()
        self.spoken = turns[-1] if turns else None
        for participant, due in ((self.user, self.warm_user), (self.agent, self.warm_agent)):
            if due:
                _warm(participant, history)
        self.warm_user = self.warm_agent = False

    def ask_user(self, spoken: AgentTurn | None) -> UserReply | None | Awaitable[UserReply | None]:
        """The user's answer to ``spoken``; read back from the tape where the user is taped (and, when it is
        deterministic, asked as well, its answer dropped)."""
        rec = self.rec
        tape, seq = rec.tape, rec.seq
        if seq < tape.end and (seq < tape.copied or not self.user_rerun):
            taped = tape.user_step(seq)
            if taped is not MISSING:  # else the tape ends inside the user's step: it answers again
                rec.taken = max(rec.taken, seq + 1 if taped is None else taped.step_end)
                if self.user_asked:
                    warming = self.user.respond(spoken)
                    if warming is not None and type(warming) is not UserReply and hasattr(warming, "__await__"):
                        return _then(warming, taped)
                return taped
        if self.warm_user:
            self.warm_user = False
            _warm(self.user, self.history)
        return self.user.respond(spoken)

    def user_reply(self, reply: Any, t: float, pause: float) -> Generator[Any, Any, TapedUserReply | None]:
        """A user's reply that is not a plain one, as a reply read from the tape (its time is when it is
        spoken): a live user's call awaited, or None when the user leaves."""
        if reply is not None and hasattr(reply, "__await__"):
            reply = yield from self.call(reply, t, "user")
        if reply is None:
            return reply
        if type(reply) is TapedUserReply:
            if reply.step_end:  # read back: the events before its turn are taken as logged
                self.take_logged(reply.step_end - 1, "user", reply.model_calls)
                reply.model_calls = []
            return reply
        return TapedUserReply(utterance=reply.utterance, frames=reply.frames, end=reply.end, reaction=reply.reaction,
                              model_calls=reply.model_calls, usage=reply.usage, cost=reply.cost,
                              inferred=reply.inferred, persona=reply.persona, final=reply.final,
                              t=t + (pause if reply.think is None else reply.think))

    def ask_agent(self, obs: Observation) -> AgentReply | Awaitable[AgentReply]:
        """The agent's answer to ``obs`` as it comes (a reply or a live call); read back from the tape where the
        agent is taped (and, when it is deterministic, asked as well, its answer dropped)."""
        rec = self.rec
        tape, seq = rec.tape, rec.seq
        if seq < tape.end and (seq < tape.copied or not self.agent_rerun):
            try:
                taped = tape.agent_step(seq)
            except TapedFailure as failure:
                rec.t = failure.t
                raise
            if taped is not None:  # else the tape ends inside the agent's answer: it answers again
                copied = seq < tape.copied
                rec.taken = max(rec.taken, taped.step_end if copied or not taped.tool_calls else taped.after_faults)
                if self.agent_asked:
                    warming = self.agent.respond(obs)
                    if type(warming) is not AgentReply and hasattr(warming, "__await__"):
                        return _then(warming, taped)
                return taped
        if self.warm_agent:
            self.warm_agent = False
            _warm(self.agent, self.history)
        return self.agent.respond(obs)

    def agent_step(self, obs: Observation, answer: Any,
                   latency: float) -> Generator[Any, Any, tuple[AgentReply, float]]:
        """The agent's turn from an answer that is not a plain reply (a live call, an answer from the tape, tool
        calls or faults): each call is answered after its own modelled latency; reported faults are logged,
        tool calls run and the agent asked again, until it answers without tool calls.

        Returns that answer and the turn's latency (the sum of its calls'; a turn read back keeps the logged
        one); the recorder's clock is then when the agent speaks.
        """
        rec, batch = self.rec, self.batch
        total, calls, limit = 0.0, 0, batch.settings.max_tool_rounds
        while True:
            calls += 1
            if type(answer) is not AgentReply and hasattr(answer, "__await__"):
                answer = yield from self.call(answer, rec.t + latency, "agent")
            if type(answer) is TapedReply:  # its time as logged; its latency the model's (a measured one is not logged)
                total += latency
                rec.t = answer.t
            else:
                spent = latency if answer.latency is None else answer.latency
                total += spent
                rec.t += spent
            if type(answer) is TapedReply:  # its faults and model calls are taken as logged
                self.take_logged(answer.after_faults, "agent", answer.model_calls)
            else:
                for f in answer.faults:
                    rec.emit(Fault, who="agent", kind=f.kind, detail=f.detail, attempt=f.attempt)
                if answer.model_calls:
                    self.log_calls("agent", answer.model_calls)
                if answer.executed:
                    self.log_executed(answer.executed)
            if not answer.tool_calls:
                break
            if rec.seq < rec.taken:  # a round copied from the tape
                obs = self.take_tools(obs, answer.step_end)
            else:
                obs = self.run_tools(obs, answer.tool_calls)
            if calls > limit:
                raise _EpisodeError(f"agent exceeded {limit} tool rounds in one turn", "agent",
                                    [FaultReport(kind="limit", detail=f"more than {limit} tool rounds in one turn")])
            latency = batch.settings.latency.sample(self.timing)
            try:
                answer = self.ask_agent(obs) if self.agent_taped else self.agent.respond(obs)
            except Exception as exc:
                raise _failure("agent", exc) from None
        if type(answer) is TapedReply:
            return answer, answer.latency
        return answer, total

    def model_user_turn(self, reply: UserReply, said: UserTurn) -> int:
        """Log a model-driven user's model calls (each after its failed attempts) before its turn ``said``, which
        moves past them and takes the reply's usage, cost and ``inferred`` mark: the turn's seq."""
        rec = self.rec
        if reply.model_calls:
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
        for call in calls:
            for f in call.faults:
                rec.emit(Fault, who=who, kind=f.kind, detail=f.detail, attempt=f.attempt)
            rec.emit(ModelCalled, role=who, model=call.model, digest=call.digest, content=call.content,
                     tool_calls=call.tool_calls, finish_reason=call.finish_reason, usage=call.usage, cost=call.cost,
                     attempt=call.attempt, cached=call.cached)
        self.count(who, calls)

    def log_executed(self, calls: list[ExecutedCall]) -> None:
        """Log the tool calls the agent ran itself, each with what it gave back; the agent observes them."""
        rec, history = self.rec, self.history
        for n, call in enumerate(calls):
            call_id = call.call_id or f"{rec.ep}-{rec.seq}-{n}"
            history.append(rec.emit(ToolCalled, call_id=call_id, service=call.service, method=call.method,
                                    parameters=call.parameters, executed_by="agent"))
            history.append(rec.emit(ToolReturned, call_id=call_id, results=call.results, error=call.error,
                                    latency=call.latency))

    def take_logged(self, end: int, who: str, calls: list[ModelCall]) -> None:
        """Take the tape's events up to seq ``end`` as logged (a read-back step's faults, model calls and tools the
        agent ran itself, and any event this version does not know); the calls of ``who`` count for the episode
        unless they were copied."""
        rec, history = self.rec, self.history
        events = rec.tape.events
        while rec.seq < end:
            event = rec.record(events[rec.seq])
            if type(event) is ToolCalled or type(event) is ToolReturned:  # tools the agent ran: it observes them
                history.append(event)
        if calls and end > rec.tape.copied:
            self.count(who, calls)

    def count(self, who: str, calls: list[ModelCall]) -> None:
        """Count the usage of model calls of ``who`` for the episode."""
        meter = self.meter
        if meter is None:
            meter = self.meter = UsageMeter()
        for call in calls:
            meter.call(who, call)

    def usage(self) -> Any:
        """The episode's model usage per role (its calls', and its turns' for roles that logged no calls; a copied
        prefix's aside), or UNSET when no one reported any."""
        copied, history = self.rec.tape.copied, self.history
        if copied:
            history = [e for e in history if e.seq >= copied]
        return (self.meter or UsageMeter()).turns(history) or UNSET

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
            returned = rec.emit(ToolReturned, call_id=call_id, results=rows, error=error)
            history.append(returned)
            results.append(ToolResult(call_id=call_id, results=returned.results, error=returned.error))
        return Observation(user=obs.user, history=history, tool_results=results, turn_index=obs.turn_index)

    def take_tools(self, obs: Observation, end: int) -> Observation:
        """A round of tool calls copied from the tape (its events up to seq ``end``): the world is called as
        logged (so that its state is what the log implies), its answers dropped; ``obs`` with the logged results."""
        rec, history, events = self.rec, self.history, self.rec.tape.events
        results: list[ToolResult] = []
        while rec.seq < end:
            event = rec.record(events[rec.seq])
            if type(event) is ToolCalled:
                try:
                    self.world.call(event.service, event.method, event.parameters)
                except Exception:
                    pass  # the log says what the tool gave
                history.append(event)
            elif type(event) is ToolReturned:
                history.append(event)
                results.append(ToolResult(call_id=event.call_id, results=event.results, error=event.error))
        return Observation(user=obs.user, history=history, tool_results=results, turn_index=obs.turn_index)

    def call(self, call: Awaitable[Any], due: float, who: str) -> Generator[Any, Any, Any]:
        """The answer of a live user or agent (``who``): the call starts at the episode's virtual time, and
        its answer is taken at virtual time ``due`` (see engine/driver.py); a failure is logged at ``due``."""
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
            rec.t = max(rec.t, env._now)  # the slot was held until then: a resumed run must hold it as long
            raise _failure(who, exc) from None

    def judge(self) -> Callable[[list], str | None] | None:
        """The scenario set's judge of the user's claims against this episode's events, if it has one."""
        judge, scenario, history = self.batch.judge, self.scenario, self.history
        if judge is None:
            return None
        return lambda claims: judge(scenario, claims, history)

    def verdict(self, default: str | None = None, reason: str = "") -> Outcome:
        """How the episode ended by the user's verdict (see ``_verdict``); a user read back to the end of its
        log is not asked: the logged outcome stands."""
        tape, seq = self.rec.tape, self.rec.seq
        if not self.user_rerun and seq < tape.end and type(tape.events[seq]) is EpisodeEnded:
            ended = tape.events[seq]
            return (ended.outcome, ended.reason, ended.reward)
        return _verdict(self.user, default, reason, judge=self.judge())

    def failed(self, exc: Exception) -> tuple[Outcome, int]:
        """Log the faults of an episode that ``exc`` ended: its outcome, and the number of turns taken."""
        rec = self.rec
        if type(exc) is Divergence:
            self.batch.diverged[rec.ep] = exc
            rec.diverged()
        elif type(exc) is not _Unlogged:
            try:
                rec.flush()  # the turns taken before the error
            except _Unlogged as unlogged:  # one of them the log cannot take: that failure came first
                exc = unlogged
        if type(exc) is _Unlogged:  # the episode ends in place of that turn (the recorder went back to it)
            turns = exc.event.turn
        else:
            turns = sum(1 for e in self.history if type(e) is UserTurn or type(e) is AgentTurn)
        error = _episode_error(exc)
        try:
            for f in error.faults:
                rec.emit(Fault, who=error.who, kind=f.kind, detail=f.detail, attempt=f.attempt)
        except Divergence as diverged:  # the log does not hold this failure (a re-run failed where the log did not)
            return self.failed(diverged)
        return ("error", error.reason, {}), turns


async def _then(call: Awaitable[Any], value: Any) -> Any:
    """Await a warming call (its answer dropped), then give ``value``."""
    await call
    return value


def _warm(participant: Any, history: list[Event]) -> None:
    """Tell a participant that was read back from the tape the episode so far, if it can take it."""
    warm = getattr(participant, "warm", None)
    if warm is not None:
        warm(list(history))


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


def _failure(who: str, exc: Exception) -> Exception:
    """The error of an episode whose user or agent raised ``exc``; a live participant that gave up reports its
    faults, a participant read back fails as logged, and a tape that does not fit the re-run is a divergence."""
    if type(exc) is Divergence:
        return exc
    if type(exc) is TapedFailure:
        return _EpisodeError(exc.reason, who, exc.faults)
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


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]

