"""Tapes: where a re-run event differs (named), encodings compared, agent answers read back one call at a time,
steps read back with their model calls, recorded calls by digest, forks at a turn."""

from __future__ import annotations

import msgspec
import pytest

from dialogsim.engine.calls import RecordedCalls, recorded_calls, reused
from dialogsim.engine.codec import encode
from dialogsim.engine.events import Act, AgentTurn, EpisodeEnded, EpisodeStarted, Fault, Frame, ModelCalled, \
    ToolCalled, ToolReturned, Usage, UserTurn
from dialogsim.engine.tape import MISSING, Divergence, RawEpisode, Tape, TapedFailure, first_difference, fork_at_turn

ENV = dict(run="r", ep="e", wall=7)


def _turn(seq, t, utterance="hi", acts=("INFORM",), cls=UserTurn, **kw):
    return cls(seq=seq, t=t, turn=seq - 1, utterance=utterance,
               frames=[Frame(service="S", actions=[Act(act=a, slot="city", values=["Paris"]) for a in acts])],
               **ENV, **kw)


def test_first_difference_names_the_path_and_both_values():
    """The first differing field is found through structs, lists and dicts; the wall clock is not compared."""
    a, b = _turn(1, 2.0), _turn(1, 2.0)
    b.frames[0].actions[0].values = ["Lima"]
    assert first_difference(a, b) == ("frames[0].actions[0].values[0]", "Paris", "Lima")
    other_wall = msgspec.structs.replace(a, wall=99)
    assert first_difference(a, other_wall) == ("(value)", a, other_wall)  # nothing but the wall clock differs
    c = msgspec.structs.replace(a, reaction={"x": 1})
    assert first_difference(c, msgspec.structs.replace(a, reaction={"x": 2})) == ("reaction['x']", 1, 2)


@pytest.mark.parametrize("raw", [False, True], ids=["decoded", "raw lines"])
def test_a_check_passes_an_equal_event_and_names_a_different_one(raw):
    """A re-run event equal to the logged one but for its wall clock passes; one whose time differs by a nanosecond
    is a Divergence naming seq, type, field and both values - whether the tape holds events or raw lines."""
    logged = [EpisodeStarted(seq=0, t=0.0, scenario_id="s", seed=1, **ENV), _turn(1, 1.5)]
    tape = Tape(RawEpisode([encode(e) for e in logged]) if raw else logged)
    tape.check(msgspec.structs.replace(logged[1], wall=123))
    with pytest.raises(Divergence) as caught:
        tape.check(msgspec.structs.replace(logged[1], t=1.500000001))
    d = caught.value
    assert (d.seq, d.kind, d.field, d.logged, d.rerun) == (1, "user_turn", "t", 1.5, 1.500000001)
    assert str(d) == "event 1 (user_turn) differs at t: logged 1.5, re-run 1.500000001"
    with pytest.raises(Divergence, match="differs at type: logged 'user_turn', re-run 'agent_turn'"):
        tape.check(_turn(1, 1.5, cls=AgentTurn))


def test_agent_answers_are_read_back_one_call_at_a_time():
    """An agent step of two tool rounds (told apart by their times, a tool fault between call and result) and a turn
    is read back as three answers; the faults the agent reported come with the answer they were logged before."""
    events = [EpisodeStarted(seq=0, t=0.0, scenario_id="s", seed=1, **ENV), _turn(1, 1.0),
              Fault(seq=2, t=1.2, who="agent", kind="http_status", detail="503", attempt=1, **ENV),
              ToolCalled(seq=3, t=1.2, call_id="a", service="S", method="M", **ENV),
              Fault(seq=4, t=1.2, who="tool", kind="exception", **ENV),
              ToolReturned(seq=5, t=1.2, call_id="a", error="tool failed", **ENV),
              ToolCalled(seq=6, t=1.7, call_id="b", service="S", method="N", **ENV),
              ToolReturned(seq=7, t=1.7, call_id="b", results=[], **ENV),
              _turn(8, 2.0, cls=AgentTurn, latency=1.0)]
    tape = Tape(events)
    first = tape.agent_step(2)
    assert [c.call_id for c in first.tool_calls] == ["a"] and [f.detail for f in first.faults] == ["503"]
    assert (first.t, first.after_faults, first.step_end) == (1.2, 3, 6)
    second = tape.agent_step(6)
    assert [c.method for c in second.tool_calls] == ["N"] and (second.t, second.step_end) == (1.7, 8)
    turn = tape.agent_step(8)
    assert not turn.tool_calls and (turn.t, turn.latency, turn.step_end) == (2.0, 1.0, 9)
    assert Tape(events[:7]).agent_step(7) is None  # the tape ends inside the step: the agent is asked again


def test_a_participant_that_failed_in_the_log_fails_again_as_logged():
    """Faults followed by the episode's end read back as the logged failure, with its reason."""
    events = [EpisodeStarted(seq=0, t=0.0, scenario_id="s", seed=1, **ENV), _turn(1, 1.0),
              Fault(seq=2, t=1.4, who="agent", kind="timeout", detail="no answer", **ENV),
              EpisodeEnded(seq=3, t=1.4, outcome="error", reason="agent failed: no answer", **ENV)]
    with pytest.raises(TapedFailure) as caught:
        Tape(events).agent_step(2)
    assert (caught.value.reason, caught.value.t, [f.kind for f in caught.value.faults]) == (
        "agent failed: no answer", 1.4, ["timeout"])


def test_a_fork_at_turn_k_copies_the_first_k_turns_with_their_tool_events():
    """At turn 0 nothing is copied, at turn 1 the user's first turn, at turn 2 the agent's turn with its tool calls;
    an episode without a turn after those cannot be forked there (nothing would be left to run)."""
    events = [EpisodeStarted(seq=0, t=0.0, scenario_id="s", seed=1, **ENV), _turn(1, 1.0),
              ToolCalled(seq=2, t=1.2, call_id="a", service="S", method="M", **ENV),
              ToolReturned(seq=3, t=1.2, call_id="a", **ENV), _turn(4, 2.0, cls=AgentTurn),
              _turn(5, 3.0), EpisodeEnded(seq=6, t=3.0, outcome="success", **ENV)]
    assert [len(fork_at_turn(events, k, "b").prefix) for k in (0, 1, 2)] == [0, 1, 4]
    assert fork_at_turn(events, 2, "b").seq == 5
    assert fork_at_turn(events, 3, "b") is None and fork_at_turn(events, 4, "b") is None
    ref, run = fork_at_turn(events, 1, "b").ref("other")
    assert (ref.ep, ref.seq, run) == ("e", 2, "r")
    copies = fork_at_turn(events, 2, "b").copies("new", "f", 10.0)
    assert [(e.run, e.ep, e.seq, e.t, e.wall) for e in copies[:2]] == [("new", "f", 1, 11.0, 7),
                                                                       ("new", "f", 2, 11.2, 7)]


def test_tools_the_agent_ran_itself_are_read_back_with_its_answer():
    """Executed calls (tool_called by the agent, then its tool_returned) before a tool round or a turn come back as
    the answer's ``executed``, past them its own step; a tape cut inside such a pair asks the agent again."""
    events = [EpisodeStarted(seq=0, t=0.0, scenario_id="s", seed=1, **ENV), _turn(1, 1.0),
              ToolCalled(seq=2, t=1.2, call_id="x", service="", method="lookup", parameters={"q": 1},
                         executed_by="agent", **ENV),
              ToolReturned(seq=3, t=1.2, call_id="x", results=[{"a": 1}], latency=0.1, **ENV),
              ToolCalled(seq=4, t=1.2, call_id="a", service="S", method="M", **ENV),
              ToolReturned(seq=5, t=1.2, call_id="a", results=[], **ENV),
              ToolCalled(seq=6, t=1.2, call_id="y", service="", method="note", executed_by="agent", **ENV),
              ToolReturned(seq=7, t=1.2, call_id="y", error="down", **ENV),
              _turn(8, 1.2, cls=AgentTurn, latency=0.2)]
    tape = Tape(events)
    rounds = tape.agent_step(2)
    assert [(c.call_id, c.method, c.parameters, c.results, c.latency) for c in rounds.executed] == [
        ("x", "lookup", {"q": 1}, [{"a": 1}], 0.1)]
    assert [c.call_id for c in rounds.tool_calls] == ["a"] and (rounds.after_faults, rounds.step_end) == (4, 6)
    turn = tape.agent_step(6)  # the round at the same time ends at the next answer's own call
    assert [(c.call_id, c.error) for c in turn.executed] == [("y", "down")] and turn.utterance == "hi"
    assert (turn.after_faults, turn.step_end) == (8, 9)
    assert Tape(events[:3]).agent_step(2) is None


def _called(seq, t, role, digest, **kw):
    return ModelCalled(seq=seq, t=t, role=role, model="m", digest=digest, content=f"answer {digest}", **ENV, **kw)


def test_a_steps_model_calls_are_read_back_with_it_each_after_its_failed_attempts():
    """A model user's turn after a failed attempt and its call, then an agent's tool round and turn each after its
    own call: each step reads back with its calls (faults attached to the call they preceded) and the user's usage,
    cost and inferred mark; a tape that ends between a call and its step is MISSING that step (asked again)."""
    usage = Usage(input_tokens=5, output_tokens=2)
    events = [EpisodeStarted(seq=0, t=0.0, scenario_id="s", seed=1, **ENV),
              Fault(seq=1, t=1.0, who="user", kind="http_status", detail="500", attempt=1, **ENV),
              _called(2, 1.0, "user", "u1", attempt=2, usage=usage, cost=0.5),
              _turn(3, 1.0, inferred=True, usage=usage, cost=0.5),
              _called(4, 1.3, "agent", "a1"),
              ToolCalled(seq=5, t=1.3, call_id="a", service="S", method="M", **ENV),
              ToolReturned(seq=6, t=1.3, call_id="a", results=[], **ENV),
              _called(7, 1.6, "agent", "a2"),
              _turn(8, 1.6, cls=AgentTurn, latency=0.6)]
    tape = Tape(events)
    said = tape.user_step(1)
    assert (said.utterance, said.t, said.step_end, said.usage, said.cost, said.inferred) == ("hi", 1.0, 4, usage, 0.5,
                                                                                            True)
    assert [(c.digest, c.attempt, [f.detail for f in c.faults]) for c in said.model_calls] == [("u1", 2, ["500"])]
    rounds = tape.agent_step(4)
    assert [c.digest for c in rounds.model_calls] == ["a1"] and (rounds.after_faults, rounds.step_end) == (5, 7)
    turn = tape.agent_step(7)
    assert [c.content for c in turn.model_calls] == ["answer a2"] and (turn.after_faults, turn.step_end) == (8, 9)
    assert Tape(events[:3]).user_step(1) is MISSING and Tape(events[:8]).agent_step(7) is None


@pytest.mark.parametrize("raw", [False, True], ids=["decoded", "raw lines"])
def test_recorded_calls_are_read_by_digest_with_their_own_faults(raw):
    """A role's calls by digest, each with the faults logged just before it (a fault the step reported, followed by
    other events, is not a call's); from raw lines, only the lines that may be calls are decoded; a replay's reuse
    is marked cached and costs nothing."""
    events = [EpisodeStarted(seq=0, t=0.0, scenario_id="s", seed=1, **ENV),
              Fault(seq=1, t=1.0, who="user", kind="timeout", attempt=1, **ENV),
              _called(2, 1.0, "user", "u1", attempt=2, cost=0.25), _turn(3, 1.0),
              Fault(seq=4, t=1.4, who="user", kind="exception", **ENV), _turn(5, 1.4, cls=AgentTurn),
              _called(6, 2.0, "user", "u2"), _called(7, 2.0, "agent", "a1"), _turn(8, 2.0)]
    tape = RawEpisode([encode(e) for e in events]) if raw else events
    calls = RecordedCalls(tape, "user")
    if raw:
        assert tape.decoded[3] is None  # not read until asked
    assert list(calls) == ["u1", "u2"] and calls.get("a1") is None
    assert [f.kind for f in calls["u1"].faults] == ["timeout"] and calls["u2"].faults == []
    if raw:
        assert [i for i, e in enumerate(tape.decoded) if e is not None] == [1, 2, 4, 6, 7]
    reused_ = reused(recorded_calls(events, "user"))
    assert (reused_["u1"].cached, reused_["u1"].cost, reused_["u1"].attempt, reused_["u1"].faults) == (True, 0.0, 1, [])
    assert reused_["u2"].cost is None
