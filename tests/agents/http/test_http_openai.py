"""The OpenAI-compatible chat agent against real aiohttp servers on loopback."""

from __future__ import annotations

import json

import pytest
import structlog
from aiohttp import web

from dialogsim.agents.http.openai_chat import OpenAIAgentFactory, chat_url, function_name, function_tools
from dialogsim.agents.http.server import make_app
from dialogsim.agents.http.testing import EchoAgent, INJECTED, STATS, faulty_app, run_batch, serve_in_thread
from dialogsim.engine.codec import encode
from dialogsim.engine.contracts import ToolSpec
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import ToolCalled, ToolReturned

SECRET = "sk-test-0123456789-DO-NOT-LOG"
FAST = {"read_timeout": "0.4", "total_timeout": "0.8", "backoff_base": "0.01", "backoff_max": "0.02"}


def _fake_llm(seen: list[dict]) -> web.Application:
    """A scripted chat model: asks for the weather tool first, then answers from the tool message."""

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append({"body": body, "auth": request.headers.get("Authorization")})
        last = body["messages"][-1]
        if last["role"] == "user" and len(body["messages"]) == 2:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_w1", "type": "function",
                 "function": {"name": "Weather_1__GetWeather", "arguments": '{"city": "Paris"}'}}]}
        elif last["role"] == "tool":
            rows = json.loads(last["content"])["results"]
            message = {"role": "assistant", "content": f"It is {rows[0]['temperature']} degrees."}
        else:
            message = {"role": "assistant", "content": "Goodbye!"}
        return web.json_response({"id": "x", "object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    return app


@pytest.mark.slow
def test_the_tool_loop_usage_cost_and_key_reach_the_log_but_the_key_does_not(monkeypatch):
    """Function tools, tool messages, usage summed over a turn's calls, cost from prices; the key only in headers."""
    monkeypatch.setenv("DIALOGSIM_TEST_KEY", SECRET)
    seen: list[dict] = []
    options = {"model": "tiny", "api_key_env": "DIALOGSIM_TEST_KEY", "price_in_per_1k": "0.5",
               "price_out_per_1k": "2"}
    with structlog.testing.capture_logs() as logs, serve_in_thread(_fake_llm(seen)) as url:
        factory = OpenAIAgentFactory(url, None, options)
        log = run_batch(factory, episodes=1)
    assert log.outcomes() == {"e000000": "success"}
    assert {s["auth"] for s in seen} == {f"Bearer {SECRET}"}
    first = seen[0]["body"]
    assert first["model"] == "tiny" and first["messages"][0]["role"] == "system"
    assert "Weather_1: GetWeather" in first["messages"][0]["content"]
    assert "Weather_1__GetWeather" in {t["function"]["name"] for t in first["tools"]}
    second = seen[1]["body"]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["tool_calls"][0]["id"] == second[3]["tool_call_id"] == "call_w1"
    called = [e for e in log if isinstance(e, ToolCalled)]
    assert [(c.service, c.method, c.parameters) for c in called] == [("Weather_1", "GetWeather", {"city": "Paris"})]
    assert isinstance(log[log.index(called[0]) + 1], ToolReturned)
    turns = log.of_type("agent_turn")
    assert turns[0].utterance == "It is 12 degrees."
    assert (turns[0].usage.input_tokens, turns[0].usage.output_tokens) == (200, 20)  # two model calls
    assert turns[0].cost == pytest.approx(0.2 * 0.5 + 0.02 * 2)
    text = b"".join(encode(e) for e in log).decode() + repr(logs) + repr(factory)
    assert SECRET not in text


@pytest.mark.slow
def test_faults_are_retried_and_recorded_and_the_key_never_appears_in_them(monkeypatch):
    """A faulty chat server: every fault is a fault event, episodes complete, fault details hold no key."""
    monkeypatch.setenv("DIALOGSIM_TEST_KEY", SECRET)
    app = faulty_app(EchoAgent, "openai", hang_seconds=1.0, drip_chunks=10, drip_delay=0.1)
    with structlog.testing.capture_logs() as logs, serve_in_thread(app) as url:
        # A credential in the URL's query must not reach fault details either.
        log = run_batch(OpenAIAgentFactory(url + "/v1?key=" + SECRET, None,
                                             {**FAST, "model": "m", "api_key_env": "DIALOGSIM_TEST_KEY",
                                              "max_response_bytes": "65536"}), episodes=9, concurrency=9)
    assert set(log.outcomes().values()) == {"success"} and len(log.outcomes()) == 9
    faults = log.of_type("fault")
    assert faults and len(faults) == len(app[INJECTED])
    assert app[STATS]["authorization"] == {f"Bearer {SECRET}"}
    text = b"".join(encode(e) for e in log).decode() + repr(logs)
    assert SECRET not in text


@pytest.mark.slow
def test_echo_agent_served_over_openai_protocol():
    """Our own server in OpenAI mode drives the tool loop the same way a model endpoint would."""
    with serve_in_thread(make_app(EchoAgent, "openai")) as url:
        log = run_batch(OpenAIAgentFactory(url, None, {"model": "echo"}), episodes=3)
    assert set(log.outcomes().values()) == {"success"}
    assert len(log.of_type("tool_called")) == 3 == len(log.of_type("tool_returned"))
    assert log.transcript("e000001")[1][1] == "#1 found 2 results, 0 errors"
    assert log.transcript("e000001")[3][1].startswith("#2 you said")


@pytest.mark.slow
def test_malformed_tool_arguments_are_a_protocol_fault_then_retried():
    """Arguments that are not a JSON object: a protocol fault, and the retry's answer is used."""
    calls = {"n": 0}

    async def handle(request: web.Request) -> web.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            msg = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                        "function": {"name": "Weather_1__GetWeather",
                                                                     "arguments": "{city: Paris"}}]}
        else:
            msg = {"role": "assistant", "content": "Bye."}
        return web.json_response({"choices": [{"message": msg}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    with serve_in_thread(app) as url:
        log = run_batch(OpenAIAgentFactory(url, None, {**FAST, "model": "m"}), episodes=1)
    assert [(f.kind, f.attempt) for f in log.of_type("fault")] == [("protocol", 1)]
    assert log.of_type("agent_turn")[0].utterance == "Bye." and log.outcomes() == {"e000000": "success"}


def test_function_tools_keep_the_parameter_schema_and_names_fit():
    """Enums and required lists pass through; long or odd names are made legal and stay unique."""
    spec = ToolSpec(service="Restaurants_1", method="ReserveRestaurant", description="Reserve a table",
                    parameters={"type": "object", "required": ["city"], "properties": {
                        "city": {"type": "string"}, "party_size": {"type": "string", "enum": ["1", "2"]}}})
    tools, names = function_tools([spec])
    fn = tools[0]["function"]
    assert fn["name"] == "Restaurants_1__ReserveRestaurant" and names[fn["name"]] is spec
    assert fn["parameters"]["properties"]["party_size"]["enum"] == ["1", "2"]
    assert fn["parameters"]["required"] == ["city"]
    long = function_name("S" * 50, "M" * 50)
    assert len(long) <= 64 and long != function_name("S" * 50, "M" * 49)
    assert function_name("My Service", "do.it") == "My_Service__do_it"


def test_urls_and_required_options():
    """The completions path is appended once; a missing model is a clear error."""
    assert chat_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1/v1/chat/completions") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1/v1?k=1") == "http://h:1/v1/chat/completions?k=1"
    with pytest.raises(UserError, match="--agent-model"):
        OpenAIAgentFactory("http://127.0.0.1:1", None, {})


def test_the_incremental_chat_transcript_equals_the_chat_built_from_scratch():
    """Request by request (tool steps, calls merged into one assistant message, a foreign history), the
    cached chat equals chat_messages(history_messages(...)) and the cache is never changed by a request."""
    from dialogsim.engine.contracts import ToolCall
    from dialogsim.agents.http.native import history_messages
    from dialogsim.agents.http.openai_chat import ChatTranscript, chat_messages
    from dialogsim.engine.events import AgentTurn, ToolCalled, ToolReturned, UserTurn
    from dialogsim.engine.contracts import ToolResult

    def ev(cls, seq, **kw):
        return cls(run="r", ep="e", seq=seq, t=0.0, wall=0, **kw)

    u0 = ev(UserTurn, 1, turn=0, utterance="hi")
    c1 = ev(ToolCalled, 2, call_id="c1", service="S", method="M", parameters={"a": "1"})
    c2 = ev(ToolCalled, 3, call_id="c2", service="S", method="N", parameters={})
    r1 = ev(ToolReturned, 4, call_id="c1", results=[{"x": "y"}])
    r2 = ev(ToolReturned, 5, call_id="c2", error="no such thing")
    a1 = ev(AgentTurn, 6, turn=1, utterance="ok")
    u2 = ev(UserTurn, 7, turn=2, utterance="more")
    results = [ToolResult(call_id="c1", results=[{"x": "y"}]), ToolResult(call_id="c2", error="no such thing")]
    calls = [ToolCall(service="S", method="M", parameters={"a": "1"}, call_id="c1"),
             ToolCall(service="S", method="N", parameters={}, call_id="c2")]
    steps = [([], u0, [], []), ([u0], u0, [], []), ([u0, c1], u0, results, calls),
             ([u0, c1], u0, results[1:], calls[1:]),  # c2 joins the cached assistant message of c1: copied
             ([u0, c1], u0, [], []), ([u0, c1, c2, r1, r2], u0, results, calls), ([u0], u0, results, calls),
             ([u0, c1, c2, r1, r2, a1, u2], u2, [], []), ([u2], u2, [], [])]
    t = ChatTranscript("sys")
    for history, user, res, last in steps:
        got = t.messages(history, user, res, last)
        want = chat_messages("sys", history_messages(history, user, res, last))
        assert got == want
        assert t.chat == chat_messages("sys", history_messages(history, user, [], []))[: len(t.chat)]


@pytest.mark.slow
def test_a_resumed_openai_agent_is_never_asked_again_for_a_logged_call(tmp_path):
    """Each request is a model_called event before its step; a log cut right after a call whose tool calls were
    not logged yet is resumed with that call answered from the log, and nothing logged is requested again."""
    from dialogsim.engine.log import RunDir, read_events
    from dialogsim.engine.session import RunConfig, resume_run, start_run
    from dialogsim.users.testing import request_digests

    seen: list[dict] = []
    with serve_in_thread(_fake_llm(seen)) as url:
        config = RunConfig(scenarios="builtin", agent=f"openai:{url}", episodes=4, durability="none",
                           agent_options={"model": "tiny", "price_in_per_1k": "1"})
        start_run(tmp_path / "run", config, progress=False)
        events = list(read_events(RunDir.open(tmp_path / "run")))
        calls = [e for e in events if e.__class__.__name__ == "ModelCalled"]
        assert len(calls) == len(seen) and {c.role for c in calls} == {"agent"}
        assert sorted(request_digests([s["body"] for s in seen])) == sorted(c.digest for c in calls)
        shard = next((tmp_path / "run" / "events").glob("*.jsonl"))
        lines = shard.read_bytes().splitlines(keepends=True)
        cut = next(i for i, line in enumerate(lines) if b'"model_called"' in line and b'"tool_calls":[{' in line
                   and b'"e000003"' in line)
        shard.write_bytes(b"".join(lines[:cut + 1]))  # the call logged, its tool call not
        logged = {json.loads(line)["digest"] for line in lines[:cut + 1] if b'"model_called"' in line}
        before = len(seen)
        result = resume_run(tmp_path / "run", progress=False)
    assert result.status == "completed" and result.counts["success"] == 4
    assert not set(request_digests([s["body"] for s in seen[before:]])) & logged
    assert not [e for e in read_events(RunDir.open(tmp_path / "run"), types={"fault"})]
    assert result.usage["agent"].calls == len(calls) and result.usage["agent"].cost > 0
