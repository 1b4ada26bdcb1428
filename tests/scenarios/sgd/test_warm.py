"""warm(history) of the agenda user and the schema agent: the state a copied prefix leaves them in, and SGD forks."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import pytest

from dialogsim.agents.schema_agent import SchemaAgent
from dialogsim.engine import registry
from dialogsim.engine.contracts import EpisodeContext
from dialogsim.engine.events import AgentTurn, EpisodeEnded, ToolCalled, ToolReturned, UserTurn
from dialogsim.engine.log import read_episodes
from dialogsim.engine.session import RunConfig, start_run
from dialogsim.testing import simulate, strip_wall
from dialogsim.users.agenda import AgendaUser

from ...engine.test_cli import cli

TRACK = ("intent", "canon", "values", "requested", "results", "pos", "offered", "selected", "booked", "changed",
         "confirming", "done", "proposal")
SUB = ("intent", "constraints", "pending", "relax", "fulfilled", "failed", "offered", "row", "alts", "relaxed",
       "selected", "reason", "retries", "count", "claim")


def agent_state(a: SchemaAgent) -> tuple:
    """What the schema agent holds between turns."""
    tracks = {n: {f: copy.deepcopy(getattr(t, f)) for f in TRACK} for n, t in a.tracks.items()}
    return tracks, a.current, a.last, a._expecting, a.offered_intent, dict(a._offer_acts)


def user_state(u: AgendaUser) -> dict:
    """What the agenda user holds between turns (of its agenda, the constraints it has still to say)."""
    unsaid = set()
    if u.idx < len(u.subs):
        sub, said = u.subs[u.idx], u._said(u.subs[u.idx].service)
        unsaid = {a[1] for a in u.agenda if a[0] == "INFORM" and sub.constraints.get(a[1]) not in (None, said.get(a[1]))}
    return {"subs": [{f: copy.deepcopy(getattr(s, f)) for f in SUB} for s in u.subs], "idx": u.idx, "unsaid": unsaid,
            "held": {n: (dict(h.canon), {k: sorted(v) for k, v in h.variants.items()}, h.active)
                     for n, h in u.held.items()},
            "repair": list(u.repair), "turns": u.turns, "useless": u.useless, "heard": set(u.heard),
            "offer": list(u._offer_acts), "ended": u.ended}


class Lived:
    """Wraps a participant and keeps its state after each turn it says (its tool calls aside)."""

    def __init__(self, inner, state, states: dict, contexts: dict) -> None:
        self.inner, self.state, self.states, self.contexts, self.said = inner, state, states, contexts, 0

    def start(self, ctx: EpisodeContext) -> None:
        self.ep = ctx.episode_id
        self.contexts[self.ep] = ctx
        self.inner.start(ctx)

    def respond(self, arg):
        reply = self.inner.respond(arg)
        if reply is not None and not getattr(reply, "tool_calls", None):
            self.states[(self.ep, self.said)] = self.state(self.inner)
            self.said += 1
        return reply

    def verdict(self):
        return self.inner.verdict()


def lived_and_warmed(kind: str, own: type, state, episodes: int, **user_options):
    """Pairs (state lived through the turns, state of a fresh participant warmed with them) at each of its turns."""
    scenarios = registry.load_scenarios("sgd")
    make_user = registry.user_factory("agenda", scenarios, user_options)
    make_agent = registry.agent_factory("schema", scenarios, {})
    make = make_user if kind == "user" else make_agent
    states: dict = {}
    contexts: dict = {}
    lived = lambda: Lived(make(), state, states, contexts)
    log = simulate(user=lived if kind == "user" else make_user, agent=lived if kind == "agent" else make_agent,
                   scenarios=scenarios, episodes=episodes, seed=5)
    pairs = []
    for ep in sorted({e.ep for e in log if e.ep}):
        history = [e for e in log.episode(ep) if type(e) in (UserTurn, AgentTurn, ToolCalled, ToolReturned)]
        ends = [i for i, e in enumerate(history) if type(e) is own]
        for k, i in enumerate(ends):
            fresh, ctx = make(), contexts[ep]
            fresh.start(EpisodeContext(episode_id=ep, scenario=ctx.scenario, tools=ctx.tools, rng=random.Random(k),
                                       seed=k))
            fresh.warm(history[:i + 1] + history[i + 1:i + 2])  # a turn after its own is still to be answered
            pairs.append((states[(ep, k)], state(fresh)))
    return pairs


def test_a_warmed_schema_agent_holds_what_it_held_having_lived_the_turns():
    """At every agent turn of 60 episodes, an agent warmed with the episode so far holds the lived agent's belief."""
    pairs = lived_and_warmed("agent", AgentTurn, agent_state, 60)
    assert len(pairs) > 400
    assert all(lived == warmed for lived, warmed in pairs)


def test_a_warmed_agenda_user_holds_what_it_held_having_lived_the_turns():
    """At every user turn of 60 episodes, a user warmed with the episode so far holds the lived user's goal progress,
    state, heard turns and patience (a different rng: the draws it made are read from its logged answers)."""
    pairs = lived_and_warmed("user", UserTurn, user_state, 60)
    assert len(pairs) > 400
    assert all(lived == warmed for lived, warmed in pairs)


def test_a_warmed_noisy_user_repairs_what_it_slipped():
    """With slips and drops, the warmed user holds the lived user's state and pending repair nearly always."""
    pairs = lived_and_warmed("user", UserTurn, user_state, 60, slot_error="0.2", intent_error="0.1")
    repairs = [p for p in pairs if p[0]["repair"]]
    assert len(repairs) > 20
    assert sum(lived != warmed for lived, warmed in pairs) <= len(pairs) // 100


def test_warm_with_nothing_leaves_a_fresh_start(pack):
    """warm([]) changes nothing: the participants are as just started."""
    scenarios = registry.load_scenarios("sgd")
    scenario, seed = scenarios.draw(0, 1)
    for make, state in ((registry.user_factory("agenda", scenarios, {}), user_state),
                        (registry.agent_factory("schema", scenarios, {}), agent_state)):
        fresh, warmed = make(), make()
        for p in (fresh, warmed):
            p.start(EpisodeContext(episode_id="e", scenario=scenario, tools=[], rng=random.Random(seed), seed=seed))
        warmed.warm([])
        assert state(warmed) == state(fresh)


@pytest.fixture(scope="module")
def parents(tmp_path_factory) -> Path:
    """A default run: 60 SGD episodes, seed 3."""
    out = tmp_path_factory.mktemp("warm") / "run"
    start_run(out, RunConfig(episodes=60, seed=3), progress=False)
    return out


def count_calls(monkeypatch, cls: type, counts: dict, who: str) -> None:
    """Count the calls of ``cls.respond`` in ``counts[who]``."""
    respond = cls.respond

    def counted(self, arg):
        counts[who] += 1
        return respond(self, arg)

    monkeypatch.setattr(cls, "respond", counted)


def test_sgd_forks_are_warmed_reproducible_verified_and_judged(parents, tmp_path, capsys, monkeypatch):
    """A fork at turn 6 asks neither participant about the copied turns; the same fork twice gives the same log, it
    verifies, and its episodes end with a judged outcome, as successful about as often as their parents."""
    asked = {"user": 0, "agent": 0}
    count_calls(monkeypatch, AgendaUser, asked, "user")
    count_calls(monkeypatch, SchemaAgent, asked, "agent")
    out = tmp_path / "a"
    assert cli(capsys, "fork", parents, "--at-turn", "6", "--out", out, "--no-progress")[0] == 0
    events = [e for episode in read_episodes(out) for e in episode]
    ends = [e for e in events if type(e) is EpisodeEnded]
    live = [e for e in events if type(e) in (UserTurn, AgentTurn) and e.turn >= 6]
    cut = {e.ep: e.seq for e in reversed(live)}  # where each episode's live turns start
    rounds = {(e.ep, e.t) for e in events if type(e) is ToolReturned and e.seq > cut.get(e.ep, e.seq)}
    assert asked["user"] <= sum(type(e) is UserTurn for e in live) + len(ends)
    assert asked["agent"] <= sum(type(e) is AgentTurn for e in live) + len(rounds)
    assert cli(capsys, "fork", parents, "--at-turn", "6", "--out", tmp_path / "b", "--no-progress")[0] == 0
    again = [e for episode in read_episodes(tmp_path / "b") for e in episode]
    assert strip_wall(events) == strip_wall(again)
    assert ends and all(e.outcome in ("success", "failure", "abandoned", "max_turns") and e.reason for e in ends)
    parents_ended = [e[-1] for e in read_episodes(parents) if e[-1].turns >= 6]
    rate = lambda ended: sum(e.outcome == "success" for e in ended) / len(ended)
    assert abs(rate(ends) - rate(parents_ended)) <= 0.1
    assert cli(capsys, "verify", out, "--no-progress")[1] == f"verified {len(ends)}/{len(ends)}\n"


def test_a_warmed_user_does_not_inform_again_what_it_informed(parents, tmp_path, capsys):
    """In its first live turn after a fork at turn 4, the user informs no value it informed in the copied turns,
    unless it corrects the agent (NEGATE) or the agent asked for it."""
    out = tmp_path / "fork"
    assert cli(capsys, "fork", parents, "--at-turn", "4", "--out", out, "--no-progress")[0] == 0
    checked = 0
    for events in read_episodes(out):
        turns = [e for e in events if type(e) in (UserTurn, AgentTurn)]
        informed = {(f.service, a.slot, tuple(a.canonical_values)) for e in turns[:4] if type(e) is UserTurn
                    for f in e.frames for a in f.actions if a.act == "INFORM"}
        first = next((e for e in turns[4:] if type(e) is UserTurn), None)
        if first is None:
            continue
        asked = {a.slot for f in turns[3].frames for a in f.actions if a.act == "REQUEST"}
        acts = [(f.service, a) for f in first.frames for a in f.actions]
        if any(a.act == "NEGATE" for _, a in acts):
            continue
        checked += 1
        again = [(s, a.slot) for s, a in acts if a.act == "INFORM" and a.slot not in asked
                 and (s, a.slot, tuple(a.canonical_values)) in informed]
        assert not again, (events[0].ep, again)
    assert checked > 20
