"""The logged prefix (engine/tape.py) in the runner: exact resume with phantoms, forks, branches, read-back users,
recorded users, and the timing of tool rounds."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from dialogsim.engine.contracts import AgentReply, ToolCall, Verdict
from dialogsim.engine.events import AgentTurn, EpisodeEnded, EpisodeStarted, Fault, ToolCalled, ToolReturned, UserTurn
from dialogsim.engine.recorded import RecordedUser, compatible
from dialogsim.engine.runner import Batch, BatchSettings, Branch, Cast, Job, Logged
from dialogsim.engine.tape import Fork, fork_at_turn
from dialogsim.engine.timing import Arrivals, Delay
from dialogsim.scenarios.builtin import BuiltinScenarios
from dialogsim.testing import MemoryLog, ScriptLine, ScriptedAgent, UserReply, strip_wall
from dialogsim.users.scripted import ScriptedUser

THINK, LATENCY = Delay("uniform", 1, 4), Delay("lognormal", -1, 0.5)


def _settings(**kw):
    return BatchSettings(**{"seed": 4, "concurrency": 3, "think": THINK, "latency": LATENCY, **kw})


def _run(jobs, log=None, make_user=ScriptedUser, make_agent=ScriptedAgent, **kw):
    log = MemoryLog() if log is None else log
    batch = Batch(run_id="r", scenarios=BuiltinScenarios(), make_user=make_user, make_agent=make_agent, sink=log,
                  settings=_settings(**{k: v for k, v in kw.items() if k in BatchSettings.__struct_fields__}),
                  **{k: v for k, v in kw.items() if k not in BatchSettings.__struct_fields__})
    asyncio.run(batch.run(jobs))
    return log, batch


def _by_episode(events):
    out: dict[str, list] = {}
    for e in events:
        if e.ep:
            out.setdefault(e.ep, []).append(e)
    return {ep: strip_wall(sorted(evs, key=lambda e: e.seq)) for ep, evs in out.items()}


def _crash(full, ended, unfinished_cut):
    """What a log holds after a crash: the first ``ended`` episodes to end, and a prefix of the next ones."""
    order = [e.ep for e in full if isinstance(e, EpisodeEnded)]
    done = set(order[:ended])
    logged = {ep: full.episode(ep) for ep in done}
    for ep in order[ended:ended + 3]:
        logged[ep] = full.episode(ep)[:unfinished_cut]
    return logged


@pytest.mark.parametrize("arrivals", [Arrivals("all"), Arrivals("poisson", 0.3)], ids=["all", "poisson"])
@pytest.mark.parametrize("ended, cut", [(0, 2), (5, 4), (11, 1), (17, 6)])
def test_a_resumed_batch_equals_the_uninterrupted_one_virtual_times_included(arrivals, ended, cut):
    """Ended episodes hold their slots as phantoms, unfinished ones continue from their prefix: every episode, the
    ones run after the crash too, has exactly the events (and times) of the uninterrupted run."""
    full, _ = _run([Job(i) for i in range(24)], arrivals=arrivals)
    logged = _crash(full, ended, cut)
    ends = {ep: evs[-1].t for ep, evs in logged.items() if isinstance(evs[-1], EpisodeEnded)}
    events = {ep: evs for ep, evs in logged.items() if ep not in ends}
    resumed, batch = _run([Job(i) for i in range(24)], arrivals=arrivals, logged=Logged(ends, events))
    assert not batch.diverged
    assert not any(e.ep in ends for e in resumed)  # phantoms write nothing
    combined = [e for evs in logged.values() for e in evs] + list(resumed)
    assert _by_episode(combined) == _by_episode(full)
    for ep in events:  # an unfinished episode goes on right after its logged prefix
        assert min(e.seq for e in resumed if e.ep == ep) == cut


def test_a_resumed_episode_whose_start_differs_ends_after_its_log_and_the_batch_goes_on():
    """An unfinished episode whose logged episode_started does not match the re-run (another scenario, say) ends with
    a divergence fault appended after its logged events, seq gapless; the other episodes run as usual."""
    full, _ = _run([Job(i) for i in range(3)])
    prefix = full.episode("e000001")[:3]
    prefix[0] = msgspec.structs.replace(prefix[0], seed=prefix[0].seed + 1)
    log, batch = _run([Job(i) for i in range(3)], logged=Logged({}, {"e000001": prefix}))
    mine = log.episode("e000001")
    assert [e.seq for e in mine] == [3, 4] and [type(e) for e in mine] == [Fault, EpisodeEnded]
    assert mine[0].kind == "divergence" and "event 0 (episode_started) differs at seed" in mine[0].detail
    assert mine[1].outcome == "error" and mine[0].t == mine[1].t == prefix[-1].t
    assert batch.diverged["e000001"].field == "seed"
    assert log.outcomes()["e000000"] == log.outcomes()["e000002"] == "success"


class _Counting:
    """The scripted agent (without a warm method), counting the times it is asked."""

    asked: list[int] = []

    def __init__(self):
        self.inner = ScriptedAgent()

    def start(self, ctx):
        self.inner.start(ctx)

    def respond(self, obs):
        _Counting.asked.append(obs.turn_index)
        return self.inner.respond(obs)


class _Warmed(ScriptedAgent):
    """The scripted agent, recording what it is told when warmed."""

    told: list[int] = []

    def warm(self, history):
        _Warmed.told.append(len(history))
        super().warm(history)


@pytest.mark.parametrize("agent", [_Counting, _Warmed])
def test_a_fork_copies_its_prefix_warms_the_participants_and_goes_on_as_its_parent_did(agent):
    """A fork of the restaurant episode at turn 3 with the same agent: the copied events are the parent's
    (re-stamped, seq and wall kept, moved to the fork's start), the agent was asked about the copied turns, its
    answers dropped (or, having warm, told them in one call), and the rest equals the parent's events but for ids."""
    parent = _run([Job(1)], concurrency=1)[0].episode("e000001")
    fork = fork_at_turn(parent, 3, "same")
    assert [type(e) for e in fork.prefix] == [UserTurn, ToolCalled, ToolReturned, AgentTurn, UserTurn]
    _Counting.asked, _Warmed.told = [], []
    log, _ = _run([Job(0, ep="f", fork=fork)], make_agent=agent)
    mine = log.episode("f")
    started = mine[0]
    assert (started.parent.ep, started.parent.seq, started.branch) == ("e000001", 6, "same")
    assert started.scenario == parent[0].scenario and started.seed == parent[0].seed
    assert mine[1:6] == [msgspec.structs.replace(e, ep="f") for e in parent[1:6]]  # same start time: t unchanged
    if agent is _Counting:
        assert _Counting.asked[:3] == [1, 1, 3]  # the copied agent turn (and its tool round), asked and dropped
    else:
        assert _Warmed.told == [5]  # once, with the copied turns and tool events, before its first live turn

    def plain(events):
        return [msgspec.json.encode(msgspec.structs.replace(e, ep="", wall=0)).replace(b'"f-', b'"e000001-')
                for e in events[1:]]

    assert plain(mine) == plain(parent)


def test_a_fork_starts_when_its_slot_frees_and_its_copied_times_move_with_it():
    """A fork that runs after another episode starts at that episode's end: its copied events keep their spacing."""
    parent = _run([Job(1)], concurrency=1)[0].episode("e000001")
    log, _ = _run([Job(0), Job(1, ep="f", fork=fork_at_turn(parent, 3, "b"))], concurrency=1)
    first_end = log.episode("e000000")[-1].t
    mine = log.episode("f")
    assert mine[0].t == first_end
    assert [round(e.t - mine[0].t, 9) for e in mine[1:6]] == [round(e.t - parent[0].t, 9) for e in parent[1:6]]
    assert all(x.t <= y.t for x, y in zip(mine, mine[1:]))


def _plan(events):
    return [Branch(name="same", at_turn=1), Branch(name="short", at_turn=1, agent="short")]


def _cast_of(branch):
    short = [ScriptLine(utterance="Sorry, I cannot help.", end=True)]
    if branch.agent == "short":
        return Cast(ScriptedUser, lambda: ScriptedAgent(short), "scripted", "short")
    return Cast(ScriptedUser, ScriptedAgent, "scripted", "scripted")


def test_branches_run_after_their_mainline_in_its_slot_with_their_own_agent():
    """A plan forks every mainline at turn 1 into two branches, run right after it in its slot: a run of 6
    mainlines holds 18 episodes; a branch names its parent and its decision point, and plays its own agent."""
    log, _ = _run([Job(i) for i in range(6)], plan=_plan, cast_of=_cast_of, concurrency=2)
    started = {e.ep: e for e in log.of_type("episode_started")}
    assert len(started) == 18
    for ep in ("e000000", "e000004"):
        for name in ("same", "short"):
            branch = started[f"{ep}-{name}"]
            assert (branch.parent.ep, branch.parent.seq, branch.branch) == (ep, 2, name)
            assert branch.t == log.episode(ep)[-1].t or name == "short"
        assert log.outcomes()[f"{ep}-same"] == log.outcomes()[ep] == "success"
        assert log.transcript(f"{ep}-short")[1] == ("agent", "Sorry, I cannot help.")
        assert started[f"{ep}-short"].agent == "short"


def _deep_plan(events):
    return [Branch(name="same", at_turn=3), Branch(name="short", at_turn=1, agent="short")]


@pytest.mark.parametrize("plan", [_plan, _deep_plan], ids=["turn1", "turn3"])
@pytest.mark.parametrize("cut", [1, 2, 3, 5])
def test_a_run_with_branches_resumes_to_the_same_events(plan, cut):
    """Resuming a crashed run with branches: ended episodes are phantoms that still make their branches (from their
    logged events), unfinished branches continue from their own log, also one cut inside its copied prefix (the
    rest of the prefix is written again); all as in the uninterrupted run."""
    kw = dict(plan=plan, cast_of=_cast_of, concurrency=2)
    full, _ = _run([Job(i) for i in range(6)], **kw)
    logged = _crash(full, 7, cut)
    ends = {ep: evs[-1].t for ep, evs in logged.items() if isinstance(evs[-1], EpisodeEnded)}
    resumed, batch = _run([Job(i) for i in range(6)], logged=Logged(ends, logged), **kw)
    assert not batch.diverged
    combined = [e for evs in logged.values() for e in evs] + list(resumed)
    assert _by_episode(combined) == _by_episode(full)


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_a_branch_cut_inside_its_copied_prefix_writes_the_rest_of_it_again(cut):
    """A crash may cut a branch's log anywhere, also between its episode_started and the copied turns: resumed, the
    logged part is checked, the rest of the prefix written again, and the branch goes on as in the full run."""
    kw = dict(plan=_deep_plan, cast_of=_cast_of, concurrency=2)
    full, _ = _run([Job(i) for i in range(4)], **kw)
    episodes = {ep: full.episode(ep) for ep in {e.ep for e in full if e.ep}}
    logged = {ep: events for ep, events in episodes.items() if ep != "e000002-same"}
    logged["e000002-same"] = episodes["e000002-same"][:cut]
    ends = {ep: evs[-1].t for ep, evs in logged.items() if isinstance(evs[-1], EpisodeEnded)}
    resumed, batch = _run([Job(i) for i in range(4)], logged=Logged(ends, logged), **kw)
    assert not batch.diverged
    assert {e.ep for e in resumed} == {"e000002-same"}
    assert [e.seq for e in resumed] == list(range(cut, len(episodes["e000002-same"])))
    assert strip_wall(logged["e000002-same"] + list(resumed)) == strip_wall(episodes["e000002-same"])


class _Remote(ScriptedUser):
    """A user that cannot be re-run: it counts the turns it is asked, and what it was told when warmed."""

    deterministic = False

    def __init__(self, asked, warmed):
        super().__init__()
        self.asked, self.warmed = asked, warmed

    def respond(self, agent):
        self.asked.append(None if agent is None else agent.turn)
        return super().respond(agent)

    def warm(self, history):
        self.warmed.append(len(history))
        self.said = sum(1 for e in history if isinstance(e, UserTurn))


def test_a_user_that_cannot_be_rerun_is_read_back_and_warmed_before_it_goes_on():
    """Resuming an episode of a user that is not deterministic: its logged turns are read back, not asked; it is
    told the episode so far once, then asked live; the episode ends as the uninterrupted one did."""
    full, _ = _run([Job(1)], make_user=lambda: _Remote([], []))
    events = full.episode("e000001")
    asked, warmed = [], []
    log, batch = _run([Job(1)], make_user=lambda: _Remote(asked, warmed), logged=Logged({}, {"e000001": events[:8]}))
    assert not batch.diverged
    assert strip_wall(events[:8] + log.episode("e000001")) == strip_wall(events)
    assert asked == [5, 7]  # answering agent turns 5 and 7: the user turns before were read back
    assert warmed == [10]  # the turns and tool events up to the agent's turn 5


def test_a_run_of_such_a_user_verifies_against_its_full_log():
    """Checking a whole logged episode of a user that cannot be re-run reads every turn back and takes the logged
    outcome: nothing diverges, nothing is written."""
    full, _ = _run([Job(i) for i in range(3)], make_user=lambda: _Remote([], []))
    ends = {e.ep: e.t for e in full.of_type("episode_ended")}
    episodes = {ep: full.episode(ep) for ep in ends}
    asked = []
    log, batch = _run([Job(i) for i in range(3)], make_user=lambda: _Remote(asked, []),
                      logged=Logged(ends, episodes, check=ends))
    assert not batch.diverged and not log and not asked


def test_each_agent_call_after_a_tool_round_has_its_own_latency():
    """With a fixed latency of 0.5, the tool events come with the agent's first answer (half a second after the user
    spoke) and its turn with the second answer (a second after), and its latency is the sum."""
    log, _ = _run([Job(0)], think=Delay("fixed", 1.0), latency=Delay("fixed", 0.5))
    user, called, returned, agent = log.episode("e000000")[1:5]
    assert (called.t, returned.t) == (user.t + 0.5, user.t + 0.5)
    assert agent.t == user.t + 1.0 and agent.latency == 1.0


def _agent_turn(utterance, acts=(), end=False):
    from dialogsim.engine.events import Act, Frame
    frames = [Frame(service="S", actions=[Act(act=a) for a in acts])] if acts else []
    return AgentTurn(run="r", ep="e", seq=0, t=0.0, wall=0, turn=1, utterance=utterance, frames=frames, end=end)


def test_an_agent_turn_is_compatible_when_it_says_the_same_acts_or_words():
    """Compatibility: the same acts (words may differ), or the same words when the logged turn has none; end agrees."""
    assert compatible(_agent_turn("Hi!", ["GREET"]), _agent_turn("Hello.", ["GREET"]))
    assert not compatible(_agent_turn("Hi!", ["GOODBYE"]), _agent_turn("Hi!", ["GREET"]))
    assert compatible(_agent_turn(" ok "), _agent_turn("ok"))
    assert not compatible(_agent_turn("ok", end=True), _agent_turn("ok"))


class _Live(ScriptedUser):
    """A live user that can take over a recorded one."""

    def warm(self, history):
        self.said = sum(1 for e in history if isinstance(e, UserTurn))

    def verdict(self):
        return Verdict(outcome="success", reason="the live user took over")


def test_a_recorded_user_plays_back_while_the_agent_is_compatible_then_leaves_or_hands_over():
    """Against the logged agent a recorded user says its logged turns and the episode ends as logged; against another
    agent it leaves at the first incompatible turn (abandoned, diverged at turn K), or a live user takes over."""
    full, _ = _run([Job(2)])
    events = full.episode("e000002")
    started = events[0]
    same, _ = _run([Job(0, ep="s", fork=Fork(started=started), cast=Cast(lambda: RecordedUser(events), ScriptedAgent))])
    assert same.transcript("s") == full.transcript("e000002") and same.outcomes() == {"s": "success"}
    other = lambda: ScriptedAgent([ScriptLine(utterance="Hello! How can I help?"), ScriptLine(utterance="Pardon?")])
    left, _ = _run([Job(0, ep="o", fork=Fork(started=started), cast=Cast(lambda: RecordedUser(events), other))])
    (ended,) = left.of_type("episode_ended")
    assert (ended.outcome, ended.reason) == ("abandoned", "diverged at turn 3")
    live, _ = _run([Job(0, ep="l", fork=Fork(started=started),
                        cast=Cast(lambda: RecordedUser(events, _Live()), other))])
    assert live.transcript("l")[4] == ("user", "Okay, bye.") and live.outcomes() == {"l": "success"}


def test_a_batch_stopped_from_starting_passes_over_new_episodes_and_branches_then_resumes_exactly():
    """stop_starting() (a spent budget) after the second mainline ends: the episodes in flight end, no new mainline
    or branch starts (each counted in ``left``), and resuming from that log gives the uninterrupted run's events."""
    kw = dict(plan=_plan, cast_of=_cast_of, concurrency=2)
    full, _ = _run([Job(i) for i in range(8)], **kw)
    log = MemoryLog()
    batch = Batch(run_id="r", scenarios=BuiltinScenarios(), make_user=ScriptedUser, make_agent=ScriptedAgent, sink=log,
                  settings=_settings(concurrency=2), plan=_plan, cast_of=_cast_of,
                  on_episode_end=lambda e: batch.stop_starting() if e.ep == "e000001" else None)
    asyncio.run(batch.run([Job(i) for i in range(8)]))
    stopped = _by_episode(log)
    # e000000 and e000001 run at once; e000000's branches had started in its slot when e000001 ended
    assert sorted(stopped) == ["e000000", "e000000-same", "e000000-short", "e000001"]
    assert batch.left == 6 + 2  # the mainlines not started, and e000001's branches (those of the rest are unknown)
    assert all(type(log.episode(ep)[-1]) is EpisodeEnded for ep in stopped)
    assert {ep: events for ep, events in _by_episode(full).items() if ep in stopped} == stopped
    ends = {ep: log.episode(ep)[-1].t for ep in stopped}
    resumed, again = _run([Job(i) for i in range(8)], logged=Logged(ends, {ep: log.episode(ep) for ep in ends}), **kw)
    assert not again.diverged and again.left == 0
    assert _by_episode(list(log) + list(resumed)) == _by_episode(full)


class _Failing(ScriptedUser):
    """A user that fails at its second turn (where its log has a turn)."""

    def respond(self, agent):
        if agent is not None:
            raise RuntimeError("boom")
        return super().respond(agent)


def test_a_rerun_that_fails_or_ends_otherwise_than_its_log_is_a_divergence_not_a_crash():
    """Checked against their logs, an episode whose user now fails where it spoke, and one whose logged outcome was
    edited, each end with a divergence naming the event; the batch runs on."""
    full, _ = _run([Job(i) for i in range(3)])
    ends = {e.ep: e.t for e in full.of_type("episode_ended")}
    episodes = {ep: full.episode(ep) for ep in ends}
    _, batch = _run([Job(i) for i in range(3)], make_user=_Failing, logged=Logged(ends, episodes, check=ends))
    assert set(batch.diverged) == set(ends)
    assert {(d.field, d.logged, d.rerun) for d in batch.diverged.values()} == {("type", "user_turn", "fault")}
    edited = dict(episodes, e000001=episodes["e000001"][:-1] + [
        msgspec.structs.replace(episodes["e000001"][-1], outcome="failure")])
    _, batch = _run([Job(i) for i in range(3)], logged=Logged(ends, edited, check=ends))
    assert list(batch.diverged) == ["e000001"]
    d = batch.diverged["e000001"]
    assert (d.kind, d.field, d.logged, d.rerun) == ("episode_ended", "outcome", "failure", "success")
