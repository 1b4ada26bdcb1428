"""A chat model playing a persona on clarify-or-answer tasks (``--user llm:URL`` with proactive scenarios)."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from dialogsim.agents.http.testing import serve_in_thread
from dialogsim.engine.events import EpisodeStarted, ModelCalled, UserTurn
from dialogsim.engine.log import read_events
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import projection
from dialogsim.engine.session import RunConfig, start_run
from dialogsim.engine.verify import verify_run
from dialogsim.scenarios.proactive.personas import BUILTIN_PERSONAS
from dialogsim.scenarios.proactive.reaction import react


def _persona_model(seen: list[dict]) -> web.Application:
    """A model that answers the assistant in a persona's voice, naming the persona its system prompt gave."""

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        system = body["messages"][0]["content"]
        name = next(p.name for p in BUILTIN_PERSONAS if p.name in system)
        return web.json_response({"choices": [{"message": {"role": "assistant",
                                                           "content": f"As {name}: thanks, that works. ###STOP###"}}],
                                  "usage": {"prompt_tokens": 30, "completion_tokens": 6}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    return app


@pytest.mark.slow
def test_a_model_plays_the_persona_and_the_pipeline_runs_on_its_words(tmp_path):
    """The query is said as it is with the persona (who picks the mainline); the model, prompted with the persona,
    writes the reaction, the user's last word, with the reaction model's signals; branches, verify and the
    trajectory records follow."""
    seen: list[dict] = []
    run = tmp_path / "run"
    with serve_in_thread(_persona_model(seen)) as url:
        start_run(run, RunConfig(scenarios="proactive:synthetic:coding", user=f"llm:{url}", agent="clarify",
                                 user_options={"model": "m"}, episodes=3), progress=False)
    events = list(read_events(run))
    assert len([e for e in events if type(e) is EpisodeStarted]) == 9 and len(seen) == 9  # a call per reaction
    by_ep: dict[str, list] = {}
    for e in events:
        if e.ep:
            by_ep.setdefault(e.ep, []).append(e)
    for ep, evs in by_ep.items():
        said = [e for e in evs if type(e) is UserTurn]
        query = evs[0].scenario["data"]["query"]
        assert said[0].utterance == query and said[0].persona["name"] in said[1].utterance
        assert said[1].end and said[1].reaction is not None and said[1].utterance.endswith("that works.")
        agent = next(e for e in evs if type(e).__name__ == "AgentTurn")
        persona = next(p for p in BUILTIN_PERSONAS if p.name == said[0].persona["name"])
        assert said[1].reaction == react(agent.utterance, persona).meta
        assert [type(e).__name__ for e in evs[-3:]] == ["ModelCalled", "UserTurn", "EpisodeEnded"]
        assert evs[-1].outcome == "success"
    prompt = seen[0]["messages"][0]["content"]
    assert "Who you are:" in prompt and "Your task" in prompt
    assert verify_run(run, progress=False).diverged == {}  # the model's answers are read from the log
    out = run_projection(run, projection("trajectories")).out_dir
    records = [json.loads(line) for line in open(f"{out}/trajectories.jsonl", encoding="utf-8")]
    assert len(records) == 9 and all("that works" in json.dumps(r, ensure_ascii=False) for r in records)
