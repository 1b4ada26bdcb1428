"""The model-driven user end to end through the command line: 50 SGD dialogues against the schema agent over
http:, killed with SIGKILL and resumed, projected to SGD; keys never written; evalsets run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from aiohttp import web

from dialogsim.agents.http.server import make_app
from dialogsim.agents.http.testing import EchoAgent, STATS, faulty_app, serve_in_thread
from dialogsim.engine.registry import agent_factory, load_scenarios
from dialogsim.scenarios.sgd.corpus import read_dialogue_file, validate_dialogue
from dialogsim.users.testing import AUTHORIZATION, CONTROL, REQUESTS, request_digests, user_model_app

CLI = [sys.executable, "-m", "dialogsim.engine.cli"]


def _log_lines(run: Path) -> list[dict]:
    """The events of a run's shard as dicts, a torn last line (a SIGKILL's) left out."""
    out = []
    for line in (run / "events" / "shard-000.jsonl").read_bytes().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


@pytest.mark.slow
def test_fifty_dialogues_over_http_killed_resumed_and_projected(tmp_path, pack):
    """50 dialogues, --user llm: against the schema agent over http:, SIGKILLed mid-run; the resume sends no
    request for an ended episode nor any the log holds, ends every episode once, and the SGD projection of the
    run has no format problem."""
    run = tmp_path / "run"
    user_app = user_model_app(pack, delay=0.03)  # slow enough to kill the run in the middle
    schema = agent_factory("schema", load_scenarios("sgd"), {})
    with serve_in_thread(user_app) as user_url, serve_in_thread(make_app(schema, "native")) as agent_url:
        proc = subprocess.Popen([*CLI, "run", "--user", f"llm:{user_url}", "--user-model", "fake-user", "--agent",
                                 f"http:{agent_url}", "--episodes", "50", "--concurrency", "5", "--seed", "5",
                                 "--out", str(run), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        shard = run / "events" / "shard-000.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            if shard.exists() and shard.read_bytes().count(b'"type":"episode_ended"') >= 15:
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        time.sleep(0.3)  # requests the killed run had sent are in
        events = _log_lines(run)
        ended = {e["ep"] for e in events if e["type"] == "episode_ended"}
        logged = {e["digest"] for e in events if e["type"] == "model_called"}
        assert 15 <= len(ended) < 50
        sent_before = len(user_app[REQUESTS])
        user_app[CONTROL]["delay"] = 0.0
        resumed = subprocess.run([*CLI, "run", "--resume", str(run), "--no-progress"], capture_output=True,
                                 text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr
        assert "completed: 50 episodes" in resumed.stdout
        after = user_app[REQUESTS][sent_before:]
    assert after and not {b["user"] for b in after} & ended
    assert not set(request_digests(after)) & logged
    ends = [e["ep"] for e in _log_lines(run) if e["type"] == "episode_ended"]
    assert sorted(ends) == sorted(set(ends)) and len(ends) == 50
    outcomes = [e["outcome"] for e in _log_lines(run) if e["type"] == "episode_ended"]
    assert outcomes.count("success") >= 35, outcomes
    projected = subprocess.run([*CLI, "project", str(run), "--to", "sgd", "--no-progress"], capture_output=True,
                               text=True, timeout=300)
    assert projected.returncode == 0, projected.stderr
    out = run / "projections" / "sgd@v1"
    schemas = {s["service_name"]: s for s in json.loads((out / "schema.json").read_text())}
    dialogues = [d for f in sorted(out.glob("dialogues_*.json")) for d in read_dialogue_file(f)]
    assert len(dialogues) == 50
    assert [p for d in dialogues if (p := validate_dialogue(d, schemas))] == []
    user_turns = [t for d in dialogues for t in d.turns if t.speaker == "USER"]
    assert all(t.frames and all(f.state is not msgspec.UNSET for f in t.frames) for t in user_turns)


@pytest.mark.slow
def test_keys_are_sent_but_never_written(tmp_path, pack):
    """--user-api-key-env and --api-key-env: the servers get the keys; no file of the run directory, no line of
    stdout or stderr holds them (a failed attempt included); the manifest names the variables."""
    user_key, agent_key = "sk-user-0123456789-NEVER-LOG", "sk-agent-9876543210-NEVER-LOG"
    run = tmp_path / "run"
    user_app = user_model_app(pack, plan=lambda key, attempt: "500" if key == "e000000/2" and attempt == 1 else None)
    schema = agent_factory("schema", load_scenarios("sgd"), {})
    agent_app = faulty_app(schema, "openai", plan=lambda key, attempt: None)
    env = {**os.environ, "DIALOGSIM_USER_KEY": user_key, "DIALOGSIM_AGENT_KEY": agent_key}
    with serve_in_thread(user_app) as user_url, serve_in_thread(agent_app) as agent_url:
        proc = subprocess.run([*CLI, "--log-format", "json", "run", "--user", f"llm:{user_url}", "--user-model", "u",
                               "--user-api-key-env", "DIALOGSIM_USER_KEY", "--user-opt", "backoff_base=0.01",
                               "--agent", f"openai:{agent_url}", "--agent-model", "schema", "--api-key-env",
                               "DIALOGSIM_AGENT_KEY", "--episodes", "3", "--out", str(run), "--no-progress"],
                              capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert user_app[AUTHORIZATION] == {f"Bearer {user_key}"}
    assert agent_app[STATS]["authorization"] == {f"Bearer {agent_key}"}
    texts = [proc.stdout, proc.stderr] + [p.read_text(errors="replace") for p in run.rglob("*") if p.is_file()]
    assert not [t for t in texts if user_key in t or agent_key in t]
    config = json.loads((run / "manifest.json").read_text())["config"]
    assert config["user_options"]["api_key_env"] == "DIALOGSIM_USER_KEY"
    assert config["agent_options"]["api_key_env"] == "DIALOGSIM_AGENT_KEY"
    assert any(e["type"] == "fault" and e["who"] == "user" for e in _log_lines(run))
    roles = {e["role"] for e in _log_lines(run) if e["type"] == "model_called"}
    assert roles == {"user", "agent"}


def _plain_model(seen: list[dict]) -> web.Application:
    """A model that answers every request with thanks and the stop marker."""

    async def handle(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response({"choices": [{"message": {"role": "assistant",
                                                           "content": "Great, that is all. ###STOP###"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    return app


@pytest.mark.slow
def test_an_evalset_runs_with_the_llm_user(tmp_path):
    """--scenarios evalset:FILE --user llm:URL: the starting prompt opens as said, the plan is in the prompt, the
    model's stop ends the case."""
    evalset = tmp_path / "cases.evalset.json"
    evalset.write_text(json.dumps({"eval_set_id": "s", "eval_cases": [
        {"eval_id": "soil", "conversation_scenario": {"starting_prompt": "I need soil.",
                                                      "conversation_plan": "Ask for potting soil, then say thanks."}}]}))
    seen: list[dict] = []
    run = tmp_path / "run"
    with serve_in_thread(_plain_model(seen)) as model_url, serve_in_thread(make_app(EchoAgent, "native")) as agent:
        proc = subprocess.run([*CLI, "run", "--scenarios", f"evalset:{evalset}", "--user", f"llm:{model_url}",
                               "--user-model", "m", "--agent", f"http:{agent}", "--episodes", "2", "--out", str(run),
                               "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "completed: 2 episodes" in proc.stdout and "success 2" in proc.stdout
    events = [e for e in _log_lines(run) if e["ep"] == "e000000"]
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["episode_started", "user_turn", "agent_turn"]  # the opening costs no model call
    assert events[1]["utterance"] == "I need soil."
    assert kinds[3:6] == ["model_called", "user_turn", "agent_turn"] and events[4]["end"] is True
    assert "Ask for potting soil, then say thanks." in seen[0]["messages"][0]["content"]
    assert seen[0]["messages"][2] == {"role": "assistant", "content": "I need soil."}
