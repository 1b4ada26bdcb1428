"""A chat model playing the clarify-or-answer actions (``--agent openai:URL`` with proactive scenarios), on loopback."""

from __future__ import annotations

import json

import msgspec
import pytest
from aiohttp import web

from dialogsim.agents.http.testing import serve_in_thread
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import AgentTurn, EpisodeStarted, ModelCalled, UserTurn
from dialogsim.engine.log import read_events
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import agent_factory, load_scenarios, projection
from dialogsim.engine.session import RunConfig, start_run
from dialogsim.engine.verify import verify_run
from dialogsim.scenarios.proactive.prompts import action_prompt

ANSWERS = {"LOW": "def f():\n    return 1", "MID": "Should it be fast?\ndef f():\n    return 1",
           "HIGH": "Fast? Short?\nPlan: 1. 2. 3.\ndef f():\n    return 1"}


def _fake_model(seen: list[dict]) -> web.Application:
    """A chat model that answers each action prompt with a message of that action (known by its prompt)."""
    by_prompt = {action_prompt(domain, action): action for domain in ("coding", "planning")
                 for action in ANSWERS}

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        action = by_prompt[body["messages"][0]["content"]]
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": ANSWERS[action]}}],
                                  "usage": {"prompt_tokens": 50, "completion_tokens": 7}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    return app


@pytest.mark.slow
def test_openai_with_proactive_scenarios_sends_the_action_prompts_and_branches(tmp_path):
    """Each episode's one call: the action prompt as system message, "[Task]\\n" + query as user message,
    max_tokens 400, temperature 0.7; the turn logs action, who chose it and the prompt; 3 episodes per state."""
    seen: list[dict] = []
    with serve_in_thread(_fake_model(seen)) as url:
        start_run(tmp_path / "run", RunConfig(scenarios="proactive:mbpp", user="persona", agent=f"openai:{url}",
                                              agent_options={"model": "m"}, episodes=4), progress=False)
    events = list(read_events(tmp_path / "run"))
    turns = {e.ep: e for e in events if type(e) is AgentTurn}
    queries = {e.ep: e.utterance for e in events if type(e) is UserTurn and e.turn == 0}
    assert len(turns) == len(seen) == 12
    for body in seen:
        ep = body["user"]
        turn = turns[ep]
        assert body["messages"] == [{"role": "system", "content": action_prompt("coding", turn.action)},
                                    {"role": "user", "content": "[Task]\n" + queries[ep]}]
        assert (body["model"], body["max_tokens"], body["temperature"]) == ("m", 400, 0.7)
        assert turn.utterance == ANSWERS[turn.action] and turn.prompt == action_prompt("coding", turn.action)
        assert turn.usage is not None and turn.usage.output_tokens == 7
    started = {e.ep: e for e in events if type(e) is EpisodeStarted}
    for ep, turn in turns.items():
        if started[ep].branch is None:
            assert turn.action_by == "persona"
            assert sorted(started[f"{ep}-{a}"].branch for a in ANSWERS if a != turn.action) == \
                sorted(a for a in ANSWERS if a != turn.action)
        else:
            assert (turn.action, turn.action_by) == (started[ep].branch, "branch")
    out = run_projection(tmp_path / "run", projection("trajectories")).out_dir
    records = [json.loads(line) for line in open(f"{out}/trajectories.jsonl", encoding="utf-8")]
    assert len(records) == 12
    assert all(r["assistant_msg"] == ANSWERS[r["action"]] for r in records)
    assert [r["is_mainline"] for r in records] == [True, False, False] * 4


@pytest.mark.slow
def test_options_max_tokens_temperature_and_a_manual_mainline(tmp_path):
    """max_tokens and temperature options reach the request; mainline=HIGH is every mainline's, chosen "manual";
    branches=none makes mainlines only."""
    seen: list[dict] = []
    with serve_in_thread(_fake_model(seen)) as url:
        start_run(tmp_path / "run", RunConfig(
            scenarios="proactive:synthetic:planning", user="persona", agent=f"openai:{url}", episodes=3,
            agent_options={"model": "m", "max_tokens": "64", "temperature": "0", "mainline": "HIGH",
                           "branches": "none"}), progress=False)
    turns = [e for e in read_events(tmp_path / "run") if type(e) is AgentTurn]
    assert [(t.action, t.action_by) for t in turns] == [("HIGH", "manual")] * 3
    assert {(b["max_tokens"], b["temperature"]) for b in seen} == {(64, 0.0)}
    assert seen[0]["messages"][0]["content"] == action_prompt("planning", "HIGH")


@pytest.mark.slow
def test_model_calls_are_logged_verified_offline_and_cached(tmp_path):
    """Every turn's model call is logged before it (with usage and cost at --price); verify asks no model (the
    server is gone); a second run with the same --llm-cache sends nothing and logs the same answers."""
    seen: list[dict] = []
    config = RunConfig(scenarios="proactive:synthetic:coding", user="persona", episodes=2,
                       agent_options={"model": "m", "price_in_per_1k": "1", "price_out_per_1k": "2"},
                       llm_cache=str(tmp_path / "cache"))
    with serve_in_thread(_fake_model(seen)) as url:
        start_run(tmp_path / "a", msgspec.structs.replace(config, agent=f"openai:{url}"), progress=False)
        sent = len(seen)
        start_run(tmp_path / "b", msgspec.structs.replace(config, agent=f"openai:{url}"), progress=False)
    assert sent == 6 and len(seen) == sent
    events = list(read_events(tmp_path / "a"))
    calls = [e for e in events if type(e) is ModelCalled]
    turns = [e for e in events if type(e) is AgentTurn]
    assert len(calls) == len(turns) == 6
    assert all(c.role == "agent" and c.content == t.utterance for c, t in zip(calls, turns))
    assert {t.cost for t in turns} == {round(50 / 1000 * 1 + 7 / 1000 * 2, 10)}
    assert verify_run(tmp_path / "a", progress=False).diverged == {}
    cached = [e for e in read_events(tmp_path / "b") if type(e) is ModelCalled]
    assert [c.content for c in cached] == [c.content for c in calls]
    assert all(c.cached for c in cached)


def test_bad_options_are_named():
    """An unknown option, a bad action and a bad branches value are one-line user errors."""
    scenarios = load_scenarios("proactive:mbpp")
    for options, problem in (({"model": "m", "listen": "text"}, "unknown option 'listen'"),
                             ({"model": "m", "mainline": "LOUD"}, "mainline='LOUD'"),
                             ({"model": "m", "branches": "some"}, "branches='some'"),
                             ({}, "needs a model")):
        with pytest.raises(UserError, match=problem):
            agent_factory("openai:http://127.0.0.1:1", scenarios, options)
