"""An episode's spans (OpenTelemetry GenAI conventions) and the otel projection: OTLP/JSON and OTLP/HTTP."""

from __future__ import annotations

import base64
import json

import pytest
from aiohttp import web

from dialogsim.agents.http.testing import serve_in_thread
from dialogsim.engine.contracts import AgentReply, ModelCall, Scenario
from dialogsim.engine.events import AgentTurn, ToolCalled, Usage, UserTurn
from dialogsim.scenarios.builtin import BuiltinScenarios, SCENARIOS
from dialogsim.scenarios.evals.episode import RunFacts, episode_record
from dialogsim.scenarios.evals.otel import otlp_request
from dialogsim.scenarios.evals.spans import episode_spans
from dialogsim.testing import ScriptedAgent, simulate

EPOCH = 1_700_000_000_000_000_000
FACTS = RunFacts(epoch_ns=EPOCH, model="tiny-model")

# weather (one call), a booking (three calls), and a call the world cannot answer
BROKEN = Scenario(id="broken-call", kind="scripted", data={
    "user": ["Is it raining?", "Bye."],
    "agent": [{"utterance": "Checking: {temperature}.",
               "tool_calls": [{"service": "Weather_1", "method": "GetRain", "parameters": {"city": "Paris"}}]},
              {"utterance": "Bye!", "end": True}]})


class MeteredAgent(ScriptedAgent):
    """The scripted agent, reporting 100 input and 7 output tokens on every spoken turn."""

    def respond(self, obs):
        reply = super().respond(obs)
        if reply.tool_calls:
            return reply
        return AgentReply(utterance=reply.utterance, end=reply.end, usage=Usage(input_tokens=100, output_tokens=7))


@pytest.fixture(scope="module")
def log():
    """Three episodes of scripted scenarios with tool calls, one failing, and usage on every agent turn."""
    scenarios = BuiltinScenarios(scenarios=[SCENARIOS[0], SCENARIOS[1], BROKEN])
    return simulate(scenarios=scenarios, agent=MeteredAgent, episodes=3, run_id="run-spans")


def _spans(log, ep):
    return episode_spans(episode_record(log.episode(ep)), FACTS)


def test_each_user_input_is_a_trace_of_invocation_agent_model_and_tool_spans(log):
    """invocation > invoke_agent > call_llm (asking for tools), execute_tool, call_llm (spoken), per user turn."""
    spans = _spans(log, "e000000")
    assert [s.name for s in spans] == ["invocation", "invoke_agent agent", "call_llm",
                                       "execute_tool Weather_1__GetWeather", "call_llm",
                                       "invocation", "invoke_agent agent", "call_llm"]
    by_id = {s.span_id: s for s in spans}
    for s in spans:
        parent = by_id.get(s.parent_span_id)
        expected = {"invocation": None, "invoke_agent": "invocation"}.get(s.name.split()[0], "invoke_agent")
        assert (parent.name.split()[0] if parent else None) == expected
        assert s.trace_id == (parent.trace_id if parent else s.trace_id)
        assert len(s.span_id) == 16 and len(s.trace_id) == 32 and int(s.span_id, 16) and int(s.trace_id, 16)
    assert len({s.trace_id for s in spans}) == 2 and len(by_id) == len(spans)


def test_times_are_virtual_time_on_the_run_wall_start_and_usage_sits_on_the_spoken_call(log):
    """Span times are epoch + t; the turn's latency is the spoken call's; usage and model are its attributes."""
    events = log.episode("e000000")
    user = next(e for e in events if isinstance(e, UserTurn))
    agent = next(e for e in events if isinstance(e, AgentTurn))
    spans = _spans(log, "e000000")
    invocation, agent_span, asked, tool, spoken = spans[:5]
    assert invocation.start_time == EPOCH + round(user.t * 1e9) and invocation.end_time == EPOCH + round(agent.t * 1e9)
    assert agent_span.attributes == {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agent",
                                     "gen_ai.conversation.id": "run-spans/e000000"}
    assert asked.start_time == asked.end_time == tool.start_time == spoken.start_time
    assert spoken.end_time == invocation.end_time
    assert "gen_ai.usage.input_tokens" not in asked.attributes
    assert spoken.attributes == {"gen_ai.operation.name": "chat", "gen_ai.request.model": "tiny-model",
                                 "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 7}
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"city": "Paris", "date": "2019-03-01"}
    assert json.loads(tool.attributes["gen_ai.tool.call.result"])[0]["temperature"] == "12"
    assert "error.type" not in tool.attributes


def test_a_failed_call_is_an_error_span(log):
    """A tool error sets error.type and keeps the message in the result."""
    tool = next(s for s in _spans(log, "e000002") if s.name.startswith("execute_tool"))
    assert tool.name == "execute_tool Weather_1__GetRain" and tool.attributes["error.type"] == "tool_error"
    assert "unknown method" in json.loads(tool.attributes["gen_ai.tool.call.result"])["error"]


def test_the_same_log_gives_the_same_spans_and_another_run_other_ids(log):
    """Spans are a function of the log: folding twice gives equal spans; another run id gives other ids."""
    assert _spans(log, "e000001") == _spans(log, "e000001")
    other = simulate(scenarios=BuiltinScenarios(scenarios=[SCENARIOS[0]]), agent=MeteredAgent, run_id="run-other")
    assert {s.span_id for s in _spans(log, "e000000")}.isdisjoint(
        {s.span_id for s in episode_spans(episode_record(other.episode("e000000")), FACTS)})


def _as_proto_json(request: dict) -> str:
    """OTLP/JSON -> protobuf's JSON mapping: the one difference is ids, hex in OTLP and base64 in protobuf."""
    for resource in request["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json.dumps(request)


def test_otlp_json_parses_into_opentelemetrys_export_request(log):
    """The OTLP/JSON of a run parses into opentelemetry-proto's ExportTraceServiceRequest, field for field."""
    pytest.importorskip("opentelemetry.proto")
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    spans = [s for ep in ("e000000", "e000001", "e000002") for s in _spans(log, ep)]
    request = json.loads(json.dumps(otlp_request("run-spans", spans)))
    message = json_format.Parse(_as_proto_json(request), ExportTraceServiceRequest())
    parsed = message.resource_spans[0].scope_spans[0].spans
    assert len(parsed) == len(spans)
    for span, proto in zip(spans, parsed):
        assert proto.trace_id == bytes.fromhex(span.trace_id) and proto.span_id == bytes.fromhex(span.span_id)
        assert proto.parent_span_id == (bytes.fromhex(span.parent_span_id) if span.parent_span_id else b"")
        assert (proto.start_time_unix_nano, proto.end_time_unix_nano) == (span.start_time, span.end_time)
        assert proto.name == span.name
    usage = next(p for p in parsed if any(a.key == "gen_ai.usage.input_tokens" for a in p.attributes))
    assert {a.key: a.value.int_value for a in usage.attributes if a.key.startswith("gen_ai.usage")} == {
        "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 7}
    failed = next(p for p in parsed if p.name == "execute_tool Weather_1__GetRain")
    assert failed.status.code == 2 and failed.kind == 1
    assert next(p for p in parsed if p.name == "call_llm").kind == 3
    assert message.resource_spans[0].resource.attributes[0].value.string_value == "dialogsim"


class ChatAgent(ScriptedAgent):
    """The scripted agent as a chat agent that logs its model calls: one per step, each with its own usage."""

    def respond(self, obs):
        reply = super().respond(obs)
        step = "tools" if reply.tool_calls else "stop"
        usage = Usage(input_tokens=50 + 10 * len(obs.tool_results), output_tokens=3)
        reply.model_calls = [ModelCall(model="chat-1", digest=f"sha256:{obs.turn_index}-{step}", content=reply.utterance,
                                       finish_reason="tool_calls" if reply.tool_calls else "stop", usage=usage)]
        if not reply.tool_calls:
            reply.usage = Usage(input_tokens=110, output_tokens=6)  # the turn's sum of its two calls
        return reply


def test_a_chat_agents_logged_calls_are_one_call_llm_each_with_their_own_usage():
    """With model_called events, each call is a call_llm span with its model, finish reason and usage, ordered
    with the tool calls between them; usage sums to the turn's; the array attribute parses into OTLP."""
    chat = simulate(scenarios=BuiltinScenarios(scenarios=[SCENARIOS[0]]), agent=ChatAgent, run_id="run-chat")
    spans = episode_spans(episode_record(chat.episode("e000000")), FACTS)
    assert [s.name for s in spans][:5] == ["invocation", "invoke_agent agent", "call_llm",
                                           "execute_tool Weather_1__GetWeather", "call_llm"]
    asked, spoken = spans[2], spans[4]
    assert (asked.attributes["gen_ai.request.model"], asked.attributes["gen_ai.response.finish_reasons"],
            asked.attributes["gen_ai.usage.input_tokens"]) == ("chat-1", ["tool_calls"], 50)
    assert (spoken.attributes["gen_ai.response.finish_reasons"], spoken.attributes["gen_ai.usage.input_tokens"]) == (
        ["stop"], 60)
    assert asked.start_time <= asked.end_time <= spans[3].start_time <= spoken.start_time <= spoken.end_time
    pytest.importorskip("opentelemetry.proto")
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    message = json_format.Parse(_as_proto_json(json.loads(json.dumps(otlp_request("run-chat", spans)))),
                                ExportTraceServiceRequest())
    reasons = next(a for a in message.resource_spans[0].scope_spans[0].spans[2].attributes
                   if a.key == "gen_ai.response.finish_reasons")
    assert [v.string_value for v in reasons.value.array_value.values] == ["tool_calls"]


# -- the projection and OTLP/HTTP -------------------------------------------------------------------


@pytest.fixture(scope="module")
def builtin_run(tmp_path_factory):
    """A six-episode builtin run on disk."""
    from dialogsim.engine.cli import main

    out = tmp_path_factory.mktemp("otel") / "run"
    assert main(["run", "--scenarios", "builtin", "--episodes", "6", "--out", str(out), "--no-progress"]) == 0
    return out


def _collector(received: list, status: int = 200):
    async def traces(request: web.Request) -> web.Response:
        received.append((request.content_type, await request.read()))
        if status != 200:
            return web.Response(status=status, text="collector is down")
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    return app


def test_project_otel_writes_the_run_and_sends_it_to_a_collector(builtin_run, tmp_path, run_cli):
    """--to otel writes OTLP/JSON; --otlp-endpoint posts it, as application/json, to /v1/traces."""
    received: list = []
    with serve_in_thread(_collector(received)) as url:
        status, out, err = run_cli("project", builtin_run, "--to", "otel", "--out", tmp_path / "a",
                                   "--otlp-endpoint", url, "--no-progress")
    assert status == 0, err
    written = (tmp_path / "a" / "traces_001.json").read_bytes()
    assert received == [("application/json", written)]
    spans = json.loads(written)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert f"sent {len(spans)} spans in 1 request(s) to {url}/v1/traces" in out
    # the same log gives the same trace, byte for byte
    assert run_cli("project", builtin_run, "--to", "otel", "--out", tmp_path / "b", "--no-progress")[0] == 0
    assert (tmp_path / "b" / "traces_001.json").read_bytes() == written


def test_a_collector_error_or_a_bad_endpoint_is_one_line(builtin_run, tmp_path, run_cli, one_line_error):
    """A collector answering 500 is one line naming the URL; a bad endpoint is refused before anything is written."""
    with serve_in_thread(_collector([], status=500)) as url:
        status, _, err = run_cli("project", builtin_run, "--to", "otel", "--out", tmp_path / "a",
                                 "--otlp-endpoint", url, "--no-progress")
    # the files were written (an info line says so), then the send failed: one error line
    assert status == 2 and "Traceback" not in err and (tmp_path / "a" / "traces_001.json").exists()
    one_line_error(status, err.strip().splitlines()[-1], f"{url}/v1/traces", "HTTP 500", "collector is down")
    status, _, err = run_cli("project", builtin_run, "--to", "otel", "--out", tmp_path / "b",
                             "--otlp-endpoint", "localhost:4318", "--no-progress")
    one_line_error(status, err, "--otlp-endpoint", "http://HOST:PORT")
    assert not (tmp_path / "b").exists()
    status, _, err = run_cli("project", builtin_run, "--to", "sgd", "--otlp-endpoint", "http://127.0.0.1:9",
                             "--no-progress")
    one_line_error(status, err, "--to sgd: unrecognized arguments: --otlp-endpoint")


def test_tool_calls_of_the_log_are_the_tool_spans(log):
    """Every tool_called event is exactly one execute_tool span, in order."""
    for ep in ("e000000", "e000001", "e000002"):
        called = [e for e in log.episode(ep) if isinstance(e, ToolCalled)]
        tools = [s for s in _spans(log, ep) if s.name.startswith("execute_tool")]
        assert [s.attributes["gen_ai.tool.call.id"] for s in tools] == [c.call_id for c in called]
