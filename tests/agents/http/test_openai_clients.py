"""serve-agent --protocol openai as real clients see it (the official openai package), and dialogsim's chat client
against servers that stream when not asked to or refuse the stream field."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from dialogsim.agents.http.chat import assemble_stream, decode_completion
from dialogsim.agents.http.client import ProtocolError
from dialogsim.agents.http.openai_chat import OpenAIAgentFactory
from dialogsim.agents.http.server import completion_chunks, make_app
from dialogsim.agents.http.testing import EchoAgent, run_batch, serve_in_thread

openai = pytest.importorskip("openai", reason="the openai package is a test dependency: pip install -e '.[test]'")

WEATHER = {"type": "function", "function": {
    "name": "Weather_1__GetWeather", "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
FAST = {"read_timeout": "2", "total_timeout": "4", "backoff_base": "0.01", "backoff_max": "0.02"}


@pytest.fixture(scope="module")
def client():
    """The official client against serve-agent's app serving the echo agent as model "echo"."""
    with serve_in_thread(make_app(EchoAgent, "openai", model="echo")) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key="not-needed", max_retries=0)


def test_the_model_list(client):
    """GET /v1/models names the served model, and one model can be fetched by name."""
    assert [m.id for m in client.models.list().data] == ["echo"]
    assert client.models.retrieve("echo").id == "echo"


def test_a_plain_completion(client):
    """A user message gets an assistant message with content, a finish reason and usage."""
    reply = client.chat.completions.create(model="echo", user="plain-1",
                                           messages=[{"role": "user", "content": "hello there"}])
    choice = reply.choices[0]
    assert choice.message.content == "#1 you said: hello there" and choice.finish_reason == "stop"
    assert reply.usage.prompt_tokens == 2 and reply.usage.completion_tokens == 3


def test_a_tool_calling_round_trip(client):
    """With tools, the agent calls one; the tool message with results gets its answer."""
    messages = [{"role": "user", "content": "weather please"}]
    first = client.chat.completions.create(model="echo", user="tools-1", messages=messages, tools=[WEATHER])
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "Weather_1__GetWeather" and json.loads(call.function.arguments) == {}
    assert first.choices[0].finish_reason == "tool_calls"
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"results": [{"t": "12"}]})}]
    second = client.chat.completions.create(model="echo", user="tools-1", messages=messages, tools=[WEATHER])
    assert second.choices[0].message.content == "#1 found 1 results, 0 errors"


def test_streaming_text_and_usage(client):
    """stream=True gives chunks whose deltas join to the answer, then a usage chunk when asked for."""
    chunks = list(client.chat.completions.create(model="echo", user="stream-1", stream=True,
                                                 stream_options={"include_usage": True},
                                                 messages=[{"role": "user", "content": "say it in pieces"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "#1 you said: say it in pieces"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3  # word by word
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == 3 and not chunks[-1].choices


def test_streaming_a_tool_call(client):
    """A streamed tool call arrives as its id and name, then its arguments, under one index."""
    chunks = list(client.chat.completions.create(model="echo", user="stream-tools", stream=True, tools=[WEATHER],
                                                 messages=[{"role": "user", "content": "weather"}]))
    pieces = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert {p.index for p in pieces} == {0}
    assert pieces[0].function.name == "Weather_1__GetWeather" and pieces[0].id
    assert "".join(p.function.arguments or "" for p in pieces) == "{}"


def test_a_raw_streaming_request_ends_with_done():
    """The body of a streaming request is server-sent events ending with data: [DONE] (it used to be empty)."""
    import urllib.request

    with serve_in_thread(make_app(EchoAgent, "openai")) as url:
        request = urllib.request.Request(url + "/v1/chat/completions", method="POST", data=json.dumps({
            "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode())
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            body = response.read()
    assert body.endswith(b"data: [DONE]\n\n")
    assert assemble_stream(body).choices[0].message.content == "#1 you said: hi"


def test_assembled_streams_equal_the_completion_they_came_from():
    """The chunks serve-agent makes of an answer decode, assembled, to that answer; a cut stream is a fault."""
    message = {"role": "assistant", "content": "Two calls.", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "S__M", "arguments": '{"x": "1"}'}},
        {"id": "b", "type": "function", "function": {"name": "S__N", "arguments": "{}"}}]}
    chunks = completion_chunks({"id": "c", "created": 0, "model": "m"}, message, "tool_calls",
                               {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9})
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    got = decode_completion(body)
    assert got.choices[0].message.content == "Two calls." and got.choices[0].finish_reason == "tool_calls"
    assert [(c.id, c.function.name, c.function.arguments) for c in got.choices[0].message.tool_calls] == [
        ("a", "S__M", '{"x": "1"}'), ("b", "S__N", "{}")]
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (4, 5)
    with pytest.raises(ProtocolError, match="stream ended"):
        decode_completion(b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks[:2]))


def _chat_server(seen: list[dict], *, stream_anyway: bool = False, refuse_stream: bool = False) -> web.Application:
    """A scripted model: a weather tool call, then an answer; streams every answer, or refuses the stream field."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        if refuse_stream and "stream" in body:
            return web.json_response({"error": {"message": "unknown field: stream"}}, status=400)
        if body["messages"][-1]["role"] == "user":
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "Weather_1__GetWeather", "arguments": '{"city": "Paris"}'}}]}
        else:
            message = {"role": "assistant", "content": "It is mild."}
        finish = "tool_calls" if message["content"] is None else "stop"
        if not stream_anyway:
            return web.json_response({"choices": [{"index": 0, "message": message, "finish_reason": finish}]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in completion_chunks({"id": "x", "created": 0, "model": "m"}, message, finish, None):
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    return app


@pytest.mark.slow
def test_the_client_says_no_stream_and_reads_a_server_that_streams_anyway():
    """Requests carry "stream": false; an SSE answer is assembled: tool call, tool result, spoken answer."""
    seen: list[dict] = []
    with serve_in_thread(_chat_server(seen, stream_anyway=True)) as url:
        log = run_batch(OpenAIAgentFactory(url, None, {**FAST, "model": "m"}), episodes=2)
    assert set(log.outcomes().values()) == {"success"} and not log.of_type("fault")
    assert all(body["stream"] is False for body in seen)
    called = log.of_type("tool_called")
    assert len(called) == len(log.of_type("user_turn")) and {json.dumps(e.parameters) for e in called} == {
        '{"city": "Paris"}'}
    assert {e.utterance for e in log.of_type("agent_turn")} == {"It is mild."}


@pytest.mark.slow
def test_a_server_refusing_the_stream_field_is_asked_again_without_it():
    """A 400 to a request with "stream" is one http_status fault; the retry and every later request leave it out."""
    seen: list[dict] = []
    with serve_in_thread(_chat_server(seen, refuse_stream=True)) as url:
        log = run_batch(OpenAIAgentFactory(url, None, {**FAST, "model": "m"}), episodes=2, concurrency=1)
    assert set(log.outcomes().values()) == {"success"}
    assert [(f.who, f.kind, f.attempt) for f in log.of_type("fault")] == [("agent", "http_status", 1)]
    assert ["stream" in body for body in seen] == [True] + [False] * (len(seen) - 1)
    called = log.of_type("model_called")
    assert called[0].attempt == 2 and {c.attempt for c in called[1:]} == {1}
