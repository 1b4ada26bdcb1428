"""The engine: determinism, virtual time under real latency, the tool loop, faults, limits, resume."""

from __future__ import annotations

import asyncio
import random

import pytest

from dialogsim.engine.contracts import AgentFailure, AgentReply, FaultReport, ToolCall
from dialogsim.engine.events import AgentTurn, EpisodeEnded, Fault, SlotSpan, ToolCalled, ToolReturned, UserTurn
from dialogsim.engine.runner import Batch, BatchSettings, Job, Sink
from dialogsim.engine.timing import Arrivals, Delay
from dialogsim.scenarios.builtin import BuiltinScenarios
from dialogsim.testing import (MemoryLog, ScriptLine, ScriptedAgent, SleepyAgent, UserReply, capture_events, simulate,
                               strip_wall)
from dialogsim.users.scripted import ScriptedUser

THINK, LATENCY = Delay("uniform", 1, 4), Delay("lognormal", -1, 0.5)


def test_same_seed_same_events_except_wall():
    """Two runs with the same seed give identical events except wall; another seed differs."""
    a = simulate(episodes=12, seed=5, think=THINK, latency=LATENCY, concurrency=4)
    b = simulate(episodes=12, seed=5, think=THINK, latency=LATENCY, concurrency=4)
    c = simulate(episodes=12, seed=6, think=THINK, latency=LATENCY, concurrency=4)
    assert strip_wall(a) == strip_wall(b)
    assert strip_wall(a) != strip_wall(c)
    assert set(a.outcomes().values()) == {"success"}


def test_seq_is_gapless_and_time_monotonic_per_episode():
    """Within an episode seq counts from 0 without gaps and virtual time never goes back."""
    log = simulate(episodes=9, seed=1, think=THINK, latency=LATENCY, concurrency=3)
    for ep in log.outcomes():
        events = log.episode(ep)
        assert [e.seq for e in events] == list(range(len(events)))
        assert all(x.t <= y.t for x, y in zip(events, events[1:]))


@pytest.mark.slow
def test_coroutine_agents_with_random_real_latency_give_identical_logs():
    """Agents that sleep random real times still produce a byte-identical log: ordering is virtual."""
    logs = [simulate(episodes=15, seed=3, think=THINK, latency=LATENCY, concurrency=8,
                     agent=lambda: SleepyAgent(ScriptedAgent(), max_sleep=0.004, rng=random.Random()))
            for _ in range(3)]
    assert strip_wall(logs[0]) == strip_wall(logs[1]) == strip_wall(logs[2])
    # The same episodes as plain calls give; only the interleaving of episodes in the log differs.
    plain = simulate(episodes=15, seed=3, think=THINK, latency=LATENCY, concurrency=8)
    assert sorted(strip_wall(logs[0])) == sorted(strip_wall(plain))


def test_tool_calls_are_logged_between_turns():
    """A scripted tool call appears as tool_called then tool_returned before the agent's turn."""
    log = simulate(episodes=1)
    kinds = [type(e) for e in log.episode("e000000")]
    assert kinds[1:5] == [UserTurn, ToolCalled, ToolReturned, AgentTurn]
    assert log.of_type("tool_returned")[0].results[0]["temperature"] == "12"


class _Failing:
    deterministic = True

    def __init__(self, how):
        self.how = how

    def start(self, ctx):
        pass

    def respond(self, obs):
        if self.how == "raise":
            raise RuntimeError("agent bug")
        if self.how == "give_up":
            raise AgentFailure("server keeps failing", [FaultReport(kind="http_status", detail="503", attempt=i)
                                                         for i in range(3)])
        if self.how == "loop":
            return AgentReply(tool_calls=[ToolCall(service="Weather_1", method="GetWeather", parameters={})])
        return AgentReply(utterance="still here")


@pytest.mark.parametrize("how, reason", [("raise", "agent failed: RuntimeError"),
                                         ("give_up", "agent failed: server keeps failing"),
                                         ("loop", "tool rounds")])
def test_agent_failures_end_the_episode_with_error_and_faults(how, reason):
    """A failing agent gives fault events and outcome error; the rest of the batch still runs."""
    log = simulate(episodes=3, agent=lambda: _Failing(how))
    ended = log.of_type("episode_ended")
    assert len(ended) == 3 and {e.outcome for e in ended} == {"error"}
    assert all(reason in e.reason for e in ended)
    faults = log.of_type("fault")
    assert faults and all(f.who == "agent" for f in faults)
    if how == "give_up":
        assert [f.attempt for f in log.episode("e000000") if isinstance(f, Fault)] == [0, 1, 2]


def test_turn_limit_ends_with_max_turns():
    """An agent that never ends against a long script stops at the turn limit."""
    long_user = lambda: ScriptedUser([UserReply(utterance=f"again {i}") for i in range(100)])
    log = simulate(episodes=1, user=long_user, agent=lambda: _Failing("chat"), max_turns=10)
    (ended,) = log.of_type("episode_ended")
    assert (ended.outcome, ended.turns) == ("max_turns", 10)


def test_user_leaving_silently_is_abandoned():
    """A user that returns None before speaking ends the episode as abandoned."""
    log = simulate(episodes=1, user=lambda: ScriptedUser([]))
    assert log.outcomes() == {"e000000": "abandoned"}


def test_capture_events_sees_everything():
    """capture_events collects what any in-memory run emits inside the block."""
    with capture_events() as events:
        simulate(episodes=2)
    assert sum(isinstance(e, EpisodeEnded) for e in events) == 2


def _batch(log, **settings):
    return Batch(run_id="test-run", scenarios=BuiltinScenarios(), make_user=ScriptedUser, make_agent=ScriptedAgent,
                 sink=log, settings=BatchSettings(think=THINK, latency=LATENCY, **settings))


def test_resume_from_a_prefix_continues_to_the_same_events():
    """Continuing episodes from any logged prefix reproduces exactly the uninterrupted events."""
    full = simulate(episodes=3, seed=2, think=THINK, latency=LATENCY)
    for cut in (1, 4, 7):
        tapes = [full.episode(ep)[:cut] for ep in sorted(full.outcomes())]
        log = MemoryLog()
        asyncio.run(_batch(log, seed=2).run([Job(i, tape) for i, tape in enumerate(tapes)]))
        resumed = [e for ep in sorted(full.outcomes()) for e in tapes[int(ep[1:])] + log.episode(ep)]
        assert strip_wall(resumed) == strip_wall([e for ep in sorted(full.outcomes()) for e in full.episode(ep)])


def test_resume_against_a_different_log_reports_divergence():
    """A tape the re-run cannot reproduce ends that episode with a divergence fault, not silently."""
    full = simulate(episodes=1, seed=2)
    tape = full.episode("e000000")[:3]
    tape[1] = tape[1].__class__(**{**{f: getattr(tape[1], f) for f in tape[1].__struct_fields__},
                                   "utterance": "something else"})
    log = MemoryLog()
    asyncio.run(_batch(log, seed=2).run([Job(0, tape)]))
    assert [e.kind for e in log.of_type("fault")] == ["divergence"]
    assert log.outcomes() == {"e000000": "error"}


def test_poisson_arrivals_are_seeded_and_bounded():
    """Poisson arrivals spread episode starts in virtual time, the same for the same seed."""
    def starts(seed):
        log = MemoryLog()
        asyncio.run(_batch(log, seed=seed, concurrency=2, arrivals=Arrivals("poisson", 0.5))
                    .run([Job(i) for i in range(6)]))
        assert len(log.outcomes()) == 6
        return [e.t for e in log.of_type("episode_started")]
    assert starts(1) == starts(1) != starts(2)
    assert len(set(starts(1))) == 6


class _Unencodable:
    """An agent whose third turn carries a value the log cannot encode (a bug in the agent)."""

    deterministic = True

    def start(self, ctx):
        self.turns = 0

    def respond(self, obs):
        self.turns += 1
        return AgentReply(utterance="ok", state={"x": object()} if self.turns == 3 else None)


def _two_logged_episodes(tmp_path, make_user, make_agent) -> list[list]:
    """Runs two episodes into a real log writer and reads each episode's events back from the shard."""
    from dialogsim.engine.log import LogWriter, read_events

    shard = tmp_path / "events" / "shard-000.jsonl"
    (tmp_path / "manifest.json").write_text('{"format": "dialogsim-run", "shards": ["events/shard-000.jsonl"]}')
    writer = LogWriter(shard, "episode")
    batch = Batch(run_id="r", scenarios=BuiltinScenarios(), make_user=make_user, make_agent=make_agent, sink=writer,
                  settings=BatchSettings(think=THINK, latency=LATENCY))
    asyncio.run(batch.run([Job(0), Job(1)]))
    writer.close()
    events = list(read_events(tmp_path))
    return [[e for e in events if e.ep == ep] for ep in ("e000000", "e000001")]


def test_an_event_that_cannot_be_encoded_becomes_a_fault_with_gapless_seq(tmp_path):
    """An unencodable agent turn leaves no partial line in the log, and the fault after it takes the next seq."""
    user = lambda: ScriptedUser([UserReply(utterance=f"line {i}") for i in range(5)])
    for mine in _two_logged_episodes(tmp_path, user, _Unencodable):
        assert [e.seq for e in mine] == list(range(len(mine)))
        assert [type(e).__name__ for e in mine[-2:]] == ["Fault", "EpisodeEnded"]
        assert "TypeError" in mine[-2].detail and mine[-1].outcome == "error"
        assert sum(isinstance(e, AgentTurn) for e in mine) == 2


class _ListSink(Sink):
    """A user's own sink that defines append alone."""

    def __init__(self) -> None:
        self.events: list = []

    def append(self, event) -> None:
        self.events.append(event)


def test_a_sink_that_defines_only_append_gets_every_event():
    """Sink's defaults (append_many one by one, episode_done, commit) serve a sink with append alone: every
    episode arrives whole, seq gapless from its start to a successful end, turns included."""
    sink = _ListSink()
    batch = Batch(run_id="r", scenarios=BuiltinScenarios(), make_user=ScriptedUser, make_agent=ScriptedAgent,
                  sink=sink, settings=BatchSettings(seed=2))
    asyncio.run(batch.run([Job(i) for i in range(3)]))
    for ep in ("e000000", "e000001", "e000002"):
        mine = [e for e in sink.events if e.ep == ep]
        assert [e.seq for e in mine] == list(range(len(mine)))
        assert isinstance(mine[-1], EpisodeEnded) and mine[-1].outcome == "success"
        assert sum(isinstance(e, UserTurn) for e in mine) == sum(isinstance(e, AgentTurn) for e in mine) > 0


class _UnencodableUser(ScriptedUser):
    """A user whose third line carries a value the log cannot encode (a bug in the user)."""

    def respond(self, agent):
        reply = super().respond(agent)
        if self.said == 3:
            return UserReply(utterance=reply.utterance, reaction={"x": object()})
        return reply


def test_a_turn_that_cannot_be_encoded_ends_the_episode_in_its_place(tmp_path):
    """Turns are encoded together when the episode loop hands over; one that cannot be, in the middle of
    them, is logged as a fault with its seq and time, the turns before it kept and none after it."""
    user = lambda: _UnencodableUser([UserReply(utterance=f"line {i}") for i in range(6)])
    agent = lambda: ScriptedAgent([ScriptLine(utterance=f"a{i}") for i in range(6)])
    for mine in _two_logged_episodes(tmp_path, user, agent):
        assert [type(e).__name__ for e in mine] == ["EpisodeStarted"] + ["UserTurn", "AgentTurn"] * 2 + [
            "Fault", "EpisodeEnded"]
        assert [e.seq for e in mine] == list(range(len(mine)))
        fault, ended = mine[-2:]
        assert "TypeError" in fault.detail and fault.t > mine[-3].t and ended.t == fault.t
        assert ended.outcome == "error" and ended.turns == 4


class _SlowFor:
    """A live agent that answers at once, except in one episode where each answer takes ``seconds``."""

    deterministic = True

    def __init__(self, slow_episode, seconds):
        self.slow_episode, self.seconds = slow_episode, seconds

    def start(self, ctx):
        self.slow = ctx.episode_id == self.slow_episode

    async def respond(self, obs):
        if self.slow:
            await asyncio.sleep(self.seconds)
        return AgentReply(utterance="done")


@pytest.mark.slow
async def test_ended_episodes_are_written_before_the_engine_waits_on_a_slow_live_call(tmp_path):
    """With durability episode, episodes that ended inside the group-commit window reach the file while a slow call runs."""
    from dialogsim.engine.log import LogWriter

    shard = tmp_path / "shard.jsonl"
    writer = LogWriter(shard, "episode")
    batch = Batch(run_id="r", scenarios=BuiltinScenarios(), make_user=lambda: ScriptedUser([UserReply(utterance="hi")]),
                  make_agent=lambda: _SlowFor("e000002", 1.0), sink=writer, settings=BatchSettings())
    running = asyncio.ensure_future(batch.run([Job(0), Job(1), Job(2)]))
    await asyncio.sleep(0.4)
    assert shard.read_bytes().count(b'"type":"episode_ended"') == 2
    await running
    writer.close()
    assert shard.read_bytes().count(b'"type":"episode_ended"') == 3


class _Plain:
    """A minimal agent that does not declare ``deterministic``."""

    def start(self, ctx):
        pass

    def respond(self, obs):
        return AgentReply(utterance="ok")


def test_an_agent_without_a_deterministic_attribute_counts_as_deterministic():
    """An agent class without ``deterministic`` runs normally (taken as deterministic), with no fault."""
    log = MemoryLog()
    user = lambda: ScriptedUser([UserReply(utterance=f"line {i}") for i in range(3)])
    batch = Batch(run_id="r", scenarios=BuiltinScenarios(), make_user=user, make_agent=_Plain, sink=log,
                  settings=BatchSettings(think=THINK, latency=LATENCY))
    asyncio.run(batch.run([Job(0)]))
    assert not log.of_type("fault") and log.outcomes() == {"e000000": "success"}


class _Judged(BuiltinScenarios):
    """The built-in scenarios with a judge that records the events it is given and fails episodes that called a tool."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list] = {}

    def judge(self, scenario, claims, events):
        self.seen[events[0].ep] = list(events)
        return "a tool was called" if any(type(e) is ToolCalled for e in events) else None


def test_a_scenario_sets_judge_sees_the_episodes_events_and_can_fail_a_success():
    """The judge gets the episode's turns and tool events in log order; its reason turns a success into a failure."""
    scenarios = _Judged()
    log = simulate(episodes=3, scenarios=scenarios)
    ended = {e.ep: e for e in log.of_type("episode_ended")}
    assert set(scenarios.seen) == set(ended)
    for ep, events in scenarios.seen.items():
        logged = [e for e in log.episode(ep) if type(e) in (UserTurn, AgentTurn, ToolCalled, ToolReturned)]
        assert events == logged
        called = any(type(e) is ToolCalled for e in events)
        assert (ended[ep].outcome, ended[ep].reason) == (("failure", "a tool was called") if called
                                                        else ("success", "script completed"))
    assert {e.outcome for e in ended.values()} == {"success", "failure"}


class _Remote:
    """An agent that cannot be re-run (a live model, say): it answers from the observation alone, calls a tool on
    its first turn, reports a retried request on its second and tags a slot in every turn; the turns it is asked
    about go to ``asked``."""

    deterministic = False

    def __init__(self, asked):
        self.asked = asked

    def respond(self, obs):
        self.asked.append(obs.turn_index)
        if obs.turn_index == 1 and not obs.tool_results:
            return AgentReply(tool_calls=[ToolCall(service="Weather_1", method="GetWeather",
                                                   parameters={"city": "Paris", "date": "2019-03-01"})])
        faults = [FaultReport(kind="http_status", detail="503", attempt=1)] if obs.turn_index == 3 else []
        return AgentReply(utterance=f"answer {obs.turn_index}", faults=faults,
                          tagged_slots={"Weather_1": [SlotSpan(slot="city", start=0, exclusive_end=4)]})


def _remote_batch(log, asked):
    user = lambda: ScriptedUser([UserReply(utterance=f"line {i}") for i in range(4)])
    return Batch(run_id="r", scenarios=BuiltinScenarios(), make_user=user, make_agent=lambda: _Remote(asked),
                 sink=log, settings=BatchSettings(seed=2, think=THINK, latency=LATENCY))


def test_resume_reads_an_agent_that_cannot_be_rerun_back_from_the_tape():
    """A resumed episode does not ask an agent that is not deterministic about the turns its tape holds (their
    tool calls, faults and tagged slots are read back) and ends exactly as the uninterrupted episode did."""
    full = MemoryLog()
    asyncio.run(_remote_batch(full, []).run([Job(0)]))
    events = full.episode("e000000")
    assert [type(e).__name__ for e in events[1:7]] == ["UserTurn", "ToolCalled", "ToolReturned", "AgentTurn",
                                                        "UserTurn", "Fault"]
    for cut in range(2, len(events) - 1):
        asked: list[int] = []
        log = MemoryLog()
        asyncio.run(_remote_batch(log, asked).run([Job(0, events[:cut])]))
        assert strip_wall(events[:cut] + log.episode("e000000")) == strip_wall(events)
        taped = {e.turn for e in events[:cut] if isinstance(e, AgentTurn)}
        assert not taped & set(asked)


class _LiveUser(ScriptedUser):
    """A scripted user that answers as a live one would: through a coroutine, after a random real delay."""

    async def respond(self, agent):
        await asyncio.sleep(random.random() * 0.002)
        return ScriptedUser.respond(self, agent)


def test_a_live_user_gives_the_same_episodes_as_a_plain_one():
    """A user whose answers are awaited gives each episode the same events as the same user answering at once."""
    live = simulate(episodes=6, seed=3, think=THINK, latency=LATENCY, concurrency=3, user=_LiveUser)
    plain = simulate(episodes=6, seed=3, think=THINK, latency=LATENCY, concurrency=3)
    for ep in plain.outcomes():
        assert strip_wall(live.episode(ep)) == strip_wall(plain.episode(ep))


class _FailingUser(ScriptedUser):
    """A user with a bug: its second answer raises."""

    def respond(self, agent):
        if self.said == 1:
            raise KeyError("slot")
        return super().respond(agent)


def test_a_failing_user_ends_the_episode_with_a_user_fault():
    """A user that raises gives a user fault after the turns before it, and outcome error naming the user."""
    log = simulate(episodes=2, user=_FailingUser)
    for ep in ("e000000", "e000001"):
        events = log.episode(ep)
        assert [type(e).__name__ for e in events[-3:]] == ["AgentTurn", "Fault", "EpisodeEnded"]
        fault, ended = events[-2:]
        assert (fault.who, fault.kind, fault.detail) == ("user", "exception", "KeyError: 'slot'")
        assert (ended.outcome, ended.reason, ended.turns) == ("error", "user failed: KeyError: 'slot'", 2)


class _LiveAgent:
    """A live agent whose calls are kept, to see whether each was awaited or closed."""

    deterministic = True

    def __init__(self, calls):
        self.calls = calls

    async def answer(self):
        return AgentReply(utterance="ok")

    def respond(self, obs):
        call = self.answer()
        self.calls.append(call)
        return call


def test_a_live_call_after_a_turn_the_log_refuses_is_closed_not_leaked(tmp_path):
    """When the turn before a live call cannot be encoded, the episode ends with a fault in its place and the call,
    never to be awaited, is closed (no coroutine is left un-awaited)."""
    import inspect

    calls: list = []
    user = lambda: _UnencodableUser([UserReply(utterance=f"line {i}") for i in range(6)])
    for mine in _two_logged_episodes(tmp_path, user, lambda: _LiveAgent(calls)):
        assert [type(e).__name__ for e in mine[-3:]] == ["AgentTurn", "Fault", "EpisodeEnded"]
        assert mine[-1].outcome == "error" and mine[-1].turns == 4 and "TypeError" in mine[-2].detail
    assert len(calls) == 6 and all(inspect.getcoroutinestate(c) == inspect.CORO_CLOSED for c in calls)


@pytest.mark.parametrize("deterministic", [True, False])
def test_an_ended_episode_frees_its_user_and_agent_without_the_garbage_collector(deterministic):
    """A dialogue holds no reference cycle: its user and agent are freed as soon as it returns, new or resumed,
    whether the agent is re-run or read back from the tape (the collector is off throughout)."""
    import gc
    import weakref

    alive: list = []

    def keep(obj):
        alive.append(weakref.ref(obj))
        return obj

    class Agent(_Remote):
        pass

    Agent.deterministic = deterministic
    full = MemoryLog()
    asyncio.run(_remote_batch(full, []).run([Job(0)]))
    user = lambda: keep(ScriptedUser([UserReply(utterance=f"line {i}") for i in range(4)]))
    enabled = gc.isenabled()
    gc.disable()
    try:
        batch = Batch(run_id="r", scenarios=BuiltinScenarios(), make_user=user, make_agent=lambda: keep(Agent([])),
                      sink=MemoryLog(), settings=BatchSettings(seed=2, think=THINK, latency=LATENCY))
        asyncio.run(batch.run([Job(0, full.episode("e000000")[:5]), Job(1)]))
        assert len(alive) == 4 and [ref() for ref in alive] == [None] * 4
    finally:
        if enabled:
            gc.enable()
