"""Model-driven users and agents under the prefix mechanism (docs/prefix.md): verify, fork and replay of their runs
ask no model for the logged or copied part; a fork's usage leaves its copied calls to its parent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dialogsim.agents.http.testing import STATS, faulty_app, serve_in_thread
from dialogsim.engine.events import EpisodeEnded, EpisodeStarted, ModelCalled
from dialogsim.engine.log import read_episodes
from dialogsim.engine.registry import agent_factory, load_scenarios
from dialogsim.engine.session import RunConfig, resume_run, start_run
from dialogsim.engine.verify import verify_run
from dialogsim.users.testing import REQUESTS, user_model_app

from ..engine.test_cli import cli

PRICED = {"model": "fake-user", "price_in_per_1k": "0.5", "price_out_per_1k": "2"}


@pytest.fixture(scope="module")
def servers(pack):
    """A user model and the schema agent behind the OpenAI protocol (a model that calls tools), for the module."""
    user_app = user_model_app(pack)
    agent_app = faulty_app(agent_factory("schema", load_scenarios("sgd"), {}), "openai", plan=lambda key, n: None)
    with serve_in_thread(user_app) as user_url, serve_in_thread(agent_app) as agent_url:
        yield {"user_url": user_url, "agent_url": agent_url, "user": user_app, "agent": agent_app}


def _run(out: Path, servers: dict, agent: str, episodes: int = 6) -> Path:
    """A run of the llm user against ``agent`` ("schema" in process, or "openai" over the module's server)."""
    config = RunConfig(user=f"llm:{servers['user_url']}", user_options=PRICED, episodes=episodes, seed=2,
                       agent="schema" if agent == "schema" else f"openai:{servers['agent_url']}",
                       agent_options={} if agent == "schema" else {"model": "schema", "price_in_per_1k": "0.1"},
                       max_cost=None if agent == "schema" else 1000.0)
    result = start_run(out, config, progress=False)
    assert result.status == "completed", result
    return out


@pytest.fixture(scope="module")
def model_runs(servers, tmp_path_factory):
    """One run against the schema agent in process, one against it as an OpenAI-compatible model."""
    root = tmp_path_factory.mktemp("llm-prefix")
    return {agent: _run(root / agent, servers, agent) for agent in ("schema", "openai")}


def _sent(servers: dict) -> tuple[int, int]:
    return len(servers["user"][REQUESTS]), servers["agent"][STATS]["requests"]


@pytest.mark.slow
def test_a_run_of_model_user_and_model_agent_verifies_with_both_servers_stopped(pack, tmp_path):
    """The llm user is re-run from its recorded calls and the OpenAI agent read back with its model_called events:
    with both model servers gone, every event is as logged."""
    user_app = user_model_app(pack)
    agent_app = faulty_app(agent_factory("schema", load_scenarios("sgd"), {}), "openai", plan=lambda key, n: None)
    with serve_in_thread(user_app) as user_url, serve_in_thread(agent_app) as agent_url:
        run = _run(tmp_path / "run", {"user_url": user_url, "agent_url": agent_url}, "openai")
    roles = {e.role for ep in read_episodes(run) for e in ep if type(e) is ModelCalled}
    assert roles == {"user", "agent"}
    result = verify_run(run, progress=False)
    assert result.diverged == {} and len(result.checked) == 6


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["schema", "openai"])
def test_a_fork_asks_no_model_for_its_copied_turns_and_leaves_their_cost_to_its_parent(servers, model_runs, agent,
                                                                                      tmp_path, capsys):
    """fork --at-turn 3 of an llm-user run (the user's opening, the agent's answer, the user's second turn): the
    models are asked only for what comes after (each of the user's requests holds the copied conversation), the
    fork's usage counts only its own calls, its budget is its own, and it verifies asking no model."""
    source, out = model_runs[agent], tmp_path / "fork"
    before = _sent(servers)
    budget = ["--max-cost", "50"] if agent == "schema" else []  # the source's budget is not the fork's
    status, stdout, err = cli(capsys, "fork", source, "--at-turn", "3", "--user-price", "1,4", *budget, "--out", out,
                              "--no-progress")
    assert status == 0, err
    user_requests = servers["user"][REQUESTS][before[0]:]
    episodes = {ep[0].ep: ep for ep in read_episodes(out)}
    assert episodes and all(ep.endswith("-fork") for ep in episodes)
    own_calls = {role: [e for ep in episodes.values() for e in ep if type(e) is ModelCalled and e.role == role and
                        e.seq >= ep[0].parent.seq] for role in ("user", "agent")}
    assert len(user_requests) == len(own_calls["user"]) > 0
    assert _sent(servers)[1] - before[1] == len(own_calls["agent"])  # 0 against the in-process agent
    assert all(len(body["messages"]) >= 6 for body in user_requests)  # system, opening ask, 3 copied turns, ...
    for events in episodes.values():
        started, ended = events[0], events[-1]
        assert type(started) is EpisodeStarted and type(ended) is EpisodeEnded
        copied = [e for e in events if type(e) is ModelCalled and e.seq < started.parent.seq]
        assert [e.role for e in copied].count("user") == 2  # the calls of the copied user turns, in its log
        own = [e for e in events if type(e) is ModelCalled and e.role == "user" and e.seq >= started.parent.seq]
        if own:
            assert ended.usage["user"].calls == len(own)
            assert ended.usage["user"].cost == pytest.approx(sum(e.cost for e in own))
    config = json.loads((out / "manifest.json").read_text())["config"]
    assert config["user_options"]["price_out_per_1k"] == 4.0 and config.get("max_cost") == (50.0 if budget else None)
    between = _sent(servers)
    assert verify_run(out, progress=False).diverged == {}
    assert _sent(servers) == between


@pytest.mark.slow
def test_a_replay_against_the_same_agent_answers_the_model_user_from_its_source(servers, model_runs, tmp_path,
                                                                               capsys):
    """replay --agent schema of a run against the schema agent: every request of the llm user is one its source
    episode made, so none reaches the model; the calls say cached and cost nothing, the outcomes are the source's."""
    source, out = model_runs["schema"], tmp_path / "replay"
    before = _sent(servers)
    status, _, err = cli(capsys, "replay", source, "--agent", "schema", "--out", out, "--no-progress")
    assert status == 0, err
    assert _sent(servers) == before
    replayed = {ep[0].ep: ep for ep in read_episodes(out)}
    logged = {ep[0].ep: ep for ep in read_episodes(source)}
    assert set(replayed) == set(logged)
    for ep, events in replayed.items():
        calls = [e for e in events if type(e) is ModelCalled]
        assert calls and all(c.cached and c.cost == 0.0 for c in calls)
        assert [c.digest for c in calls] == [c.digest for c in logged[ep] if type(c) is ModelCalled]
        assert events[-1].outcome == logged[ep][-1].outcome


@pytest.mark.slow
def test_a_log_cut_after_an_agent_call_resumes_asking_neither_model_for_what_it_holds(servers, tmp_path):
    """A crash right after an OpenAI agent's model_called event (before its tool calls or turn): the resume answers
    that call from the log (the agent is asked again, its request recorded) and the user's from theirs; each model
    gets exactly the requests of the events the log did not hold, and the run verifies."""
    run = _run(tmp_path / "run", servers, "openai", episodes=4)
    shard = run / "events" / "shard-000.jsonl"
    lines = shard.read_bytes().splitlines(keepends=True)
    agent_calls = [i for i, line in enumerate(lines) if b'"model_called"' in line and b'"role":"agent"' in line]
    kept = lines[:agent_calls[len(agent_calls) // 2] + 1]
    shard.write_bytes(b"".join(kept))
    logged = {(e["ep"], e["seq"]) for e in map(json.loads, kept)}
    before = _sent(servers)
    assert resume_run(run, progress=False).status == "completed"
    new = [e for ep in read_episodes(run) for e in ep if type(e) is ModelCalled and (e.ep, e.seq) not in logged]
    sent = _sent(servers)
    assert (sent[0] - before[0], sent[1] - before[1]) == (sum(e.role == "user" for e in new),
                                                          sum(e.role == "agent" for e in new))
    assert not [e for ep in read_episodes(run) for e in ep if type(e).__name__ == "Fault"]
    assert verify_run(run, progress=False).diverged == {}
