"""The agent server: per-episode cache and replay, both protocols, limits, and the serve-agent command."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from dialogsim.agents.http.native import (AgentMessage, NativeAgentFactory, ToolCallMessage, ToolResultMessage,
                                          UserMessage)
from dialogsim.agents.http.server import AgentHost, HOST, make_app
from dialogsim.agents.http.testing import EchoAgent, run_batch, serve_in_thread
from dialogsim.agents.scripted import ScriptedAgent
from dialogsim.engine.contracts import ToolSpec
from dialogsim.testing import strip_wall


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text)
        except ValueError:
            return exc.code, {"raw": text.decode(errors="replace")}


@pytest.mark.parametrize("agent", [ScriptedAgent, EchoAgent])
@pytest.mark.slow
def test_replay_on_a_cache_miss_gives_the_same_answers_as_the_cache(agent):
    """A one-session cache forces replays under concurrency; the log matches a roomy cache's and in-process."""
    local = run_batch(agent, episodes=9, concurrency=9)
    logs, stats = [], []
    for size in (1, 1024):
        app = make_app(agent, "native", max_sessions=size)
        with serve_in_thread(app) as url:
            logs.append(run_batch(NativeAgentFactory(url, None, {}), episodes=9, concurrency=9))
        stats.append(dict(app[HOST].stats))
    assert stats[0]["replays"] > 0 and stats[1]["replays"] == 0 and stats[1]["hits"] > 0
    assert sorted(strip_wall(list(logs[0]))) == sorted(strip_wall(list(logs[1]))) == sorted(strip_wall(list(local)))


def test_a_fresh_host_answers_a_replayed_conversation_like_the_live_one():
    """Feeding a conversation turn by turn and replaying it whole in a new host give the same answer."""
    tools = [ToolSpec(service="S", method="Find")]
    convo = [UserMessage(turn=0, utterance="hi"), ToolCallMessage(call_id="c1", service="S", method="Find"),
             ToolResultMessage(call_id="c1", results=[{"a": "1"}]), AgentMessage(turn=1, utterance="x"),
             UserMessage(turn=2, utterance="more")]

    async def go() -> tuple[list[str], str]:
        live = AgentHost(EchoAgent)
        answers = []
        for end in (1, 3, 5):
            reply = await live.answer("ep", convo[:end], tools, None, 7)
            answers.append(reply.utterance or f"calls {len(reply.tool_calls)}")
        fresh = await AgentHost(EchoAgent).answer("ep", convo, tools, None, 7)
        return answers, fresh.utterance

    answers, replayed = asyncio.run(go())
    assert answers == ["calls 1", "#1 found 1 results, 0 errors", "#2 you said: more"]
    assert replayed == answers[-1]


@pytest.mark.slow
def test_bad_requests_and_limits_are_refused():
    """Broken JSON, a wrong protocol version, an oversized body and too many headers get 4xx answers."""
    ok = json.dumps({"protocol": "dialogsim/1", "episode_id": "e", "turn_index": 1,
                     "user": {"role": "user", "turn": 0, "utterance": "hi"}}).encode()
    with serve_in_thread(make_app(EchoAgent, "native", max_body=4096)) as url:
        status, body = _post(url, ok)
        assert (status, body["protocol"], body["utterance"], body["tool_calls"]) == (
            200, "dialogsim/1", "#1 you said: hi", [])
        status, body = _post(url, b"{nope")
        assert status == 400 and "invalid dialogsim/1 request" in body["error"]["message"]
        status, body = _post(url, ok.replace(b"dialogsim/1", b"dialogsim/9"))
        assert status == 400 and "protocol" in body["error"]["message"]
        assert _post(url, b'{"pad": "' + b"x" * 5000 + b'"}')[0] == 413
        assert _post(url, ok, {f"X-H{i}": "v" for i in range(100)})[0] == 400
        assert _post(url, ok, {"X-Long": "v" * 10000})[0] == 400


@pytest.mark.slow
def test_openai_endpoint_maps_a_chat_with_tool_messages():
    """A chat with an assistant tool call and a tool message continues the built-in agent's tool loop."""
    tools = [{"type": "function", "function": {"name": "Weather_1__GetWeather", "parameters": {}}}]
    chat = {"model": "m", "tools": tools, "user": "ep-1", "messages": [
        {"role": "system", "content": "be nice"}, {"role": "user", "content": "weather?"}]}
    with serve_in_thread(make_app(EchoAgent, "openai")) as url:
        status, first = _post(url + "/v1/chat/completions", json.dumps(chat).encode())
        assert status == 200 and first["choices"][0]["finish_reason"] == "tool_calls"
        call = first["choices"][0]["message"]["tool_calls"][0]
        assert call["function"]["name"] == "Weather_1__GetWeather"
        chat["messages"] += [first["choices"][0]["message"],
                             {"role": "tool", "tool_call_id": call["id"], "content": '{"results": [{"t": "1"}]}'}]
        status, second = _post(url + "/v1/chat/completions", json.dumps(chat).encode())
        assert status == 200 and second["choices"][0]["message"]["content"] == "#1 found 1 results, 0 errors"
        status, body = _post(url + "/v1/chat/completions", b'{"messages": [{"role": "robot"}]}')
        assert status == 400 and "robot" in body["error"]["message"]


@pytest.mark.slow
def test_serve_agent_command_prints_its_port_serves_and_stops():
    """`dialogsim serve-agent --port 0` binds loopback, announces the port, answers, and stops on SIGTERM."""
    proc = subprocess.Popen([sys.executable, "-m", "dialogsim.engine.cli", "serve-agent", "--agent", "scripted",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.split()[-1]
        with urllib.request.urlopen(url + "/healthz", timeout=10) as resp:
            assert json.loads(resp.read()) == {"ok": True, "protocol": "dialogsim/1"}
        log = run_batch(NativeAgentFactory(url, None, {}), episodes=3)
        assert set(log.outcomes().values()) == {"success"} and log.of_type("tool_called")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    assert proc.returncode == 0


@pytest.mark.slow
def test_serve_agent_refuses_remote_agents():
    """Serving an http: agent makes no sense: a one-line error, exit status 2."""
    done = subprocess.run([sys.executable, "-m", "dialogsim.engine.cli", "serve-agent", "--agent",
                           "http:http://127.0.0.1:1", "--port", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "built-in" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("max_sessions", [1024, 2])
@pytest.mark.slow
def test_the_schema_agent_served_over_http_matches_the_in_process_agent(max_sessions):
    """SGD scenarios, agenda users: the schema agent behind serve-agent's app gives the in-process log,
    also when a tiny session cache forces it to be rebuilt by replay."""
    from dialogsim.engine import registry

    if "schema" not in registry.names("agent") or "sgd" not in registry.names("scenarios"):
        pytest.skip("the schema agent or the sgd scenario set is not available")
    scenarios = registry.load_scenarios("sgd")
    user = registry.user_factory(scenarios.default_user, scenarios, {})
    schema = registry.agent_factory("schema", scenarios, {})
    local = run_batch(schema, episodes=8, scenarios=scenarios, user=user, concurrency=8)
    app = make_app(schema, "native", max_sessions=max_sessions)
    with serve_in_thread(app) as url:
        remote = run_batch(NativeAgentFactory(url, None, {}), episodes=8, scenarios=scenarios, user=user,
                           concurrency=8)
    assert (app[HOST].stats["replays"] > 0) == (max_sessions == 2)
    assert sorted(strip_wall(list(remote))) == sorted(strip_wall(list(local)))
    assert remote.of_type("tool_called") and any(t.state for t in remote.of_type("agent_turn"))
