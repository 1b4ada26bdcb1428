"""The native-protocol HTTP agent against real aiohttp servers on loopback: plain, faulty, bounded."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from aiohttp import web

from dialogsim.agents.http.client import HttpSettings, backoff_delay, parse_retry_after
from dialogsim.agents.http.native import (NativeAgentFactory, NativeResponse, ProtocolError, decode_response,
                                          protocol_schemas)
from dialogsim.agents.http.server import make_app
from dialogsim.agents.http.testing import EchoAgent, INJECTED, STATS, faulty_app, run_batch, serve_in_thread
from dialogsim.agents.scripted import ScriptedAgent
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import EpisodeEnded, Fault, ToolCalled, ToolReturned
from dialogsim.engine.timing import Delay
from dialogsim.testing import simulate, strip_wall

ROOT = Path(__file__).resolve().parents[3]
FAST = {"connect_timeout": "1", "read_timeout": "0.4", "total_timeout": "0.8", "backoff_base": "0.01",
        "backoff_max": "0.05", "retry_after_max": "0.2", "max_response_bytes": "65536"}
# How each injected fault must show up in the log.
FAULT_KIND = {"500": "http_status", "429": "http_status", "malformed": "protocol", "oversized": "limit",
              "oversized_cl": "limit", "reset": "exception", "drip": "timeout", "hang": "timeout"}


def _ended_once(log, episodes: int) -> None:
    ended = Counter(e.ep for e in log if isinstance(e, EpisodeEnded))
    assert sorted(ended) == [f"e{i:06d}" for i in range(episodes)]
    assert set(ended.values()) == {1}


@pytest.mark.slow
def test_well_behaved_server_gives_the_same_log_as_the_agent_in_process():
    """The scripted agent served over dialogsim/1 yields exactly the in-process log (wall times aside)."""
    local = run_batch(ScriptedAgent, episodes=6)
    with serve_in_thread(make_app(ScriptedAgent, "native")) as url:
        remote = run_batch(NativeAgentFactory(url, None, {}), episodes=6)
    assert any(isinstance(e, ToolCalled) for e in remote)
    assert set(remote.outcomes().values()) == {"success"}
    by_ep = lambda log: sorted(strip_wall(list(log)))  # noqa: E731 - episodes interleave differently
    assert by_ep(remote) == by_ep(local)


@pytest.mark.slow
def test_every_injected_fault_is_logged_and_no_episode_is_lost():
    """Timeouts, 5xx, 429, malformed and oversized bodies, resets and drips: all recorded, all episodes end."""
    app = faulty_app(EchoAgent, "native", hang_seconds=1.5, drip_chunks=20, drip_delay=0.1)
    with serve_in_thread(app) as url:
        log = run_batch(NativeAgentFactory(url, None, FAST), episodes=15, concurrency=8)
    _ended_once(log, 15)
    assert set(log.outcomes().values()) == {"success"}
    injected = Counter(FAULT_KIND[f] for _, _, f in app[INJECTED])
    faults = [e for e in log if isinstance(e, Fault)]
    assert Counter(f.kind for f in faults) == injected
    assert {f.who for f in faults} == {"agent"} and {f.attempt for f in faults} == {1}
    assert {f for _, _, f in app[INJECTED]} == set(FAULT_KIND)  # the plan exercised every fault


@pytest.mark.slow
def test_an_answer_that_keeps_trickling_is_not_cut_by_the_read_timeout():
    """Body chunks 0.1 s apart, read timeout 0.3 s, the whole answer 0.8 s: read to the end, no fault."""
    app = faulty_app(EchoAgent, "native", plan=lambda key, attempt: "drip", drip_chunks=8, drip_delay=0.1)
    with serve_in_thread(app) as url:
        log = run_batch(NativeAgentFactory(url, None, {**FAST, "read_timeout": "0.3", "total_timeout": "5"}),
                        episodes=1)
    assert log.outcomes() == {"e000000": "success"} and not log.of_type("fault")
    assert len(app[INJECTED]) == app[STATS]["requests"] > 0


@pytest.mark.slow
def test_an_agent_that_keeps_failing_ends_its_episode_with_error_and_the_batch_completes():
    """Retries exhausted: one fault per attempt, outcome error with a reason; other episodes succeed."""
    app = faulty_app(EchoAgent, "native", plan=lambda key, attempt: None, fail_always={"e000001"})
    with serve_in_thread(app) as url:
        log = run_batch(NativeAgentFactory(url, None, {**FAST, "retries": "2"}), episodes=4)
    _ended_once(log, 4)
    outcomes = log.outcomes()
    assert outcomes.pop("e000001") == "error" and set(outcomes.values()) == {"success"}
    faults = [e for e in log.episode("e000001") if isinstance(e, Fault)]
    assert [(f.kind, f.attempt) for f in faults] == [("http_status", 1), ("http_status", 2), ("http_status", 3)]
    ended = log.episode("e000001")[-1]
    assert "HTTP 500" in ended.reason and "3 attempts" in ended.reason


@pytest.mark.slow
def test_a_client_error_status_is_not_retried():
    """A 400 will not get better: one request, one fault, no retry, outcome error."""
    hits = []

    async def refuse(request: web.Request) -> web.Response:
        hits.append(1)
        return web.json_response({"error": "no"}, status=400)

    bad = web.Application()
    bad.router.add_post("/", refuse)
    with serve_in_thread(bad) as url:
        log = run_batch(NativeAgentFactory(url, None, FAST), episodes=1)
    assert [(f.kind, f.attempt) for f in log.of_type("fault")] == [("http_status", 1)]
    assert log.outcomes() == {"e000000": "error"} and len(hits) == 1


@pytest.mark.slow
def test_in_flight_requests_are_bounded_by_the_concurrency_option():
    """Eight episodes at once, agent concurrency 2: the server never sees more than two requests at once."""
    app = faulty_app(EchoAgent, "native", plan=lambda key, attempt: None, delay=0.02)
    with serve_in_thread(app) as url:
        factory = NativeAgentFactory(url, None, {"concurrency": "2"})
        log = run_batch(factory, episodes=8, concurrency=8)
    assert set(log.outcomes().values()) == {"success"}
    assert app[STATS]["max_inflight"] == 2
    stats = factory.pool.stats
    assert stats.peak == 2 and stats.in_flight == 0
    assert stats.attempts == app[STATS]["requests"] and 1 < stats.mean_in_flight <= 2


@pytest.mark.slow
def test_calls_made_at_different_virtual_times_are_in_flight_together():
    """With think time and latency, episodes call at different virtual times and their requests still overlap
    (a driver that awaited each call in turn would keep one request in flight)."""
    app = faulty_app(EchoAgent, "native", plan=lambda key, attempt: None, delay=0.05)
    with serve_in_thread(app) as url:
        factory = NativeAgentFactory(url, None, {"concurrency": "8"})
        log = run_batch(factory, episodes=8, concurrency=8, think=Delay("uniform", 1.0, 4.0),
                        latency=Delay("uniform", 0.2, 0.8))
    assert set(log.outcomes().values()) == {"success"}
    starts = sorted({e.t for e in log.of_type("user_turn")})
    assert len(starts) > 8  # the calls really were made at different virtual times
    assert app[STATS]["max_inflight"] > 1 and factory.pool.stats.peak > 1


@pytest.mark.slow
def test_simulate_without_aclose_still_closes_the_session():
    """engine.testing.simulate never calls aclose: the pool closes its session when asyncio.run ends,
    and the same factory works again in a second run."""
    with serve_in_thread(make_app(ScriptedAgent, "native")) as url:
        factory = NativeAgentFactory(url, None, {})
        for _ in range(2):
            log = simulate(agent=factory, episodes=3)
            assert set(log.outcomes().values()) == {"success"}
            assert factory.pool.stats.attempts > 0 and not factory.pool.open


def test_retry_after_is_honoured_and_capped():
    """Backoff never undercuts Retry-After, which is capped by retry_after_max; the jitter is seeded."""
    s = HttpSettings(backoff_base=0.1, backoff_max=1.0, retry_after_max=3.0)
    assert backoff_delay(1, s, random.Random(1), 2.5) == 2.5
    assert backoff_delay(1, s, random.Random(1), 100.0) == 3.0
    plain = [backoff_delay(n, s, random.Random(7), None) for n in (1, 2, 3, 8)]
    assert plain == [backoff_delay(n, s, random.Random(7), None) for n in (1, 2, 3, 8)]
    assert 0.05 <= plain[0] <= 0.1 and 0.5 <= plain[3] <= 1.0
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


@pytest.mark.slow
def test_429_with_retry_after_is_retried_after_the_wait():
    """A 429 carrying Retry-After is recorded, waited out and retried to success."""
    app = faulty_app(EchoAgent, "native", plan=lambda key, attempt: "429" if attempt == 1 else None,
                     retry_after="0.05")
    with serve_in_thread(app) as url:
        log = run_batch(NativeAgentFactory(url, None, FAST), episodes=1)
    assert log.outcomes() == {"e000000": "success"}
    assert {f.detail.split(" from")[0] for f in log.of_type("fault")} == {"HTTP 429"}
    assert len(log.of_type("fault")) == len(app[INJECTED]) == app[STATS]["requests"] / 2


@pytest.mark.parametrize("body, message", [
    (b'{"utterance": 3}', "Expected `str`"),
    (b'{"protocol": "dialogsim/2", "utterance": "hi"}', "protocol"),
    (b'{"utterance": ""}', "empty utterance"),
    (b'{"tool_calls": [{"service": "S"}]}', "method"),
    (b'[1, 2]', "Expected `object`"),
    (b'not json', "not JSON"),
])
def test_malformed_responses_are_protocol_errors(body, message):
    """Wrong types, versions, shapes and empty answers are rejected with a message naming the problem."""
    with pytest.raises(ProtocolError, match=message):
        decode_response(body)


def test_a_valid_response_decodes():
    """Tool calls, acts, state, end and usage come through."""
    r = decode_response(json.dumps({"protocol": "dialogsim/1", "utterance": "ok", "end": True, "future": 1,
                                    "acts": [{"act": "GOODBYE"}], "usage": {"input_tokens": 3}}).encode())
    assert isinstance(r, NativeResponse) and r.end and r.acts[0].act == "GOODBYE" and r.usage.input_tokens == 3


def test_checked_in_schemas_match_the_protocol_structs():
    """docs/schemas is generated from the Structs; regenerate with `python -m dialogsim.agents.http.native`."""
    for name, schema in protocol_schemas().items():
        path = ROOT / "docs" / "schemas" / name
        assert json.loads(path.read_text()) == json.loads(json.dumps(schema)), f"{name} is stale"


def _satisfies(doc: dict, branch: dict) -> bool:
    """Whether ``doc`` meets one anyOf branch of the response schema (required, minItems, pattern, const)."""
    if any(key not in doc for key in branch["required"]):
        return False
    for key, rule in branch["properties"].items():
        value = doc[key]
        if ("minItems" in rule and len(value) < rule["minItems"]) or ("const" in rule and value != rule["const"]):
            return False
        if "pattern" in rule and not re.search(rule["pattern"], value):
            return False
    return True


@pytest.mark.parametrize("doc, valid", [({}, False), ({"utterance": "  "}, False), ({"tool_calls": []}, False),
                                        ({"end": False}, False), ({"utterance": "Hi"}, True), ({"end": True}, True),
                                        ({"tool_calls": [{"service": "S", "method": "M"}]}, True)])
def test_response_schema_demands_what_the_decoder_demands(doc, valid):
    """The published response schema rejects a response that does nothing, exactly as decode_response does."""
    branches = protocol_schemas()["native-response.schema.json"]["$defs"]["NativeResponse"]["anyOf"]
    assert any(_satisfies(doc, b) for b in branches) == valid
    if valid:
        decode_response(json.dumps(doc).encode())
    else:
        with pytest.raises(ProtocolError):
            decode_response(json.dumps(doc).encode())


def test_bad_options_and_specs_are_user_errors():
    """Bad option values and URLs name the option."""
    with pytest.raises(UserError, match="retries"):
        NativeAgentFactory("http://127.0.0.1:1", None, {"retries": "-1"})
    with pytest.raises(UserError, match="verify_tls"):
        NativeAgentFactory("http://127.0.0.1:1", None, {"verify_tls": "maybe"})
    with pytest.raises(UserError, match="http:"):
        NativeAgentFactory("ftp://x", None, {})
    with pytest.raises(UserError, match="unknown option 'read_timout'.*read_timeout"):
        NativeAgentFactory("http://127.0.0.1:1", None, {"read_timout": "1"})
    with pytest.raises(UserError, match="unknown option 'model'"):
        NativeAgentFactory("http://127.0.0.1:1", None, {"model": "gpt"})
    with pytest.raises(UserError, match="NO_SUCH_VAR_FOR_TEST"):
        NativeAgentFactory("http://127.0.0.1:1", None, {"api_key_env": "NO_SUCH_VAR_FOR_TEST"})


def test_both_protocols_share_one_factory_shape(monkeypatch):
    """Each protocol's factory reads the common options alike, sends the key only in its headers, never shows it,
    and makes a new agent of its own class per episode."""
    from dialogsim.agents.http.factory import HttpAgentFactory
    from dialogsim.agents.http.native import NativeHttpAgent
    from dialogsim.agents.http.openai_chat import OpenAIAgentFactory, OpenAIChatAgent

    monkeypatch.setenv("DIALOGSIM_SHAPE_KEY", "k-SECRET")
    common = {"api_key_env": "DIALOGSIM_SHAPE_KEY", "retries": "5", "price_in_per_1k": "0.5", "latency": "measured"}
    native = NativeAgentFactory("http://127.0.0.1:1/agent", None, common)
    chat = OpenAIAgentFactory("http://127.0.0.1:1", None, {**common, "model": "m"})
    for factory, agent_class in ((native, NativeHttpAgent), (chat, OpenAIChatAgent)):
        assert isinstance(factory, HttpAgentFactory)
        assert factory.settings.retries == 5 and factory.prices == (0.5, None) and factory.measured_latency
        assert factory.headers["Authorization"] == "Bearer k-SECRET" and "SECRET" not in repr(factory)
        first, second = factory(), factory()
        assert type(first) is agent_class and first is not second
    assert native.url == "http://127.0.0.1:1/agent" and native.headers["User-Agent"] == "dialogsim/1"
    assert chat.url == "http://127.0.0.1:1/v1/chat/completions" and "User-Agent" not in chat.headers


@pytest.mark.slow
def test_requests_carry_the_conversation_tools_and_results():
    """What a server receives: protocol, ids, tools, the conversation with tool calls and results."""
    seen: list[dict] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        if body["tool_results"] or body["turn_index"] > 1:
            return web.json_response({"utterance": "done", "end": body["user"].get("end", False)})
        return web.json_response({"tool_calls": [{"service": "Weather_1", "method": "GetWeather",
                                                  "parameters": {"city": "Paris"}}]})

    app = web.Application()
    app.router.add_post("/agent", handle)
    with serve_in_thread(app) as url:
        log = run_batch(NativeAgentFactory(url + "/agent", None, {}), episodes=1)
    assert log.outcomes() == {"e000000": "success"}
    first, second, third = seen[:3]
    assert first["protocol"] == "dialogsim/1" and first["episode_id"] == "e000000"
    assert (first["turn_index"], first["step"], second["step"], third["turn_index"]) == (1, 0, 1, 3)
    assert {(t["service"], t["method"]) for t in first["tools"]} >= {("Weather_1", "GetWeather")}
    assert [m["role"] for m in second["messages"]] == ["user", "tool_call", "tool_result"]
    assert second["tool_results"][0]["results"][0]["city"] == "Paris"
    assert [m["role"] for m in third["messages"]] == ["user", "tool_call", "tool_result", "agent", "user"]
    assert third["scenario"]["id"] == "weather-paris" and isinstance(third["seed"], int)
    calls = [e for e in log if isinstance(e, (ToolCalled, ToolReturned))]
    assert [type(e).__name__ for e in calls] == ["ToolCalled", "ToolReturned"]
    assert msgspec.structs.asdict(calls[0])["parameters"] == {"city": "Paris"}


def test_the_wire_encoding_is_a_valid_native_request():
    """The per-episode pre-encoded body decodes as a NativeRequest equal to the one built field by field."""
    import random as _random

    from dialogsim.engine.contracts import Observation
    from dialogsim.agents.http.native import NativeRequest, ScenarioInfo, user_message
    from dialogsim.engine.events import UserTurn
    from dialogsim.engine.contracts import EpisodeContext
    from dialogsim.scenarios.builtin import BuiltinScenarios

    sc = BuiltinScenarios()
    scenario, _ = sc.draw(1, 0)
    agent = NativeAgentFactory("http://127.0.0.1:1", None, {})()
    agent.start(EpisodeContext(episode_id="e7", scenario=scenario, tools=sc.tools(scenario),
                               rng=_random.Random(1), seed=5))
    said = UserTurn(run="r", ep="e7", seq=1, t=0.0, wall=0, turn=0, utterance="Hi.")
    got = msgspec.json.decode(agent.request(Observation(user=said, history=[said], turn_index=1)), type=NativeRequest)
    assert got == NativeRequest(episode_id="e7", turn_index=1, tools=sc.tools(scenario), messages=[user_message(said)],
                                user=user_message(said), seed=5,
                                scenario=ScenarioInfo(id=scenario.id, kind=scenario.kind, data=scenario.data))



@pytest.mark.parametrize("send_scenario", ["true", "false"])
def test_the_assembled_body_is_byte_for_byte_msgspecs_encoding(send_scenario):
    """The body assembled from per-episode parts is exactly msgspec's encoding of the NativeRequest, also
    mid-turn (a tool step with results), with an id that needs escaping and without a seed or scenario."""
    from dialogsim.engine.contracts import Observation, ToolCall
    from dialogsim.agents.http.native import NativeRequest, ScenarioInfo, history_messages, user_message
    from dialogsim.engine.events import UserTurn
    from dialogsim.engine.contracts import EpisodeContext, ToolResult
    from dialogsim.scenarios.builtin import BuiltinScenarios

    sc = BuiltinScenarios()
    scenario, _ = sc.draw(1, 0)
    agent = NativeAgentFactory("http://127.0.0.1:1", None, {"send_scenario": send_scenario})()
    agent.start(EpisodeContext(episode_id='e"7\u00e9', scenario=scenario, tools=sc.tools(scenario), rng=None,
                               seed=None))
    said = UserTurn(run="r", ep="e7", seq=1, t=0.0, wall=0, turn=0, utterance="Hi \"there\".")
    calls = [ToolCall(service="Restaurants_1", method="FindRestaurants", parameters={"city": "X"}, call_id="c1")]
    results = [ToolResult(call_id="c1", results=[{"a": "b"}])]
    agent._last_calls = calls
    for tool_results in ([], results):
        body = agent.request(Observation(user=said, history=[said], tool_results=tool_results, turn_index=1))
        messages = history_messages([said], said, tool_results, calls if tool_results else [])
        want = NativeRequest(episode_id='e"7\u00e9', turn_index=1, step=len(tool_results), tools=sc.tools(scenario),
                             messages=messages, user=user_message(said), tool_results=tool_results, seed=None,
                             scenario=ScenarioInfo(id=scenario.id, kind=scenario.kind, data=scenario.data)
                             if send_scenario == "true" else None)
        assert body == msgspec.json.encode(want)



def test_episodes_of_one_factory_share_encodings_only_of_the_same_objects():
    """Episodes of the built-in scenarios, each with its own agent view, share the encoded scenario and tools,
    and every body is still msgspec's encoding of its own episode's request (also for a scenario whose data
    is equal but not the same objects, and one that differs)."""
    from dialogsim.engine.contracts import Observation
    from dialogsim.agents.http.native import NativeRequest, ScenarioInfo, user_message
    from dialogsim.engine.events import UserTurn
    from dialogsim.engine.contracts import EpisodeContext, Scenario
    from dialogsim.scenarios.builtin import BuiltinScenarios

    sc = BuiltinScenarios()
    factory = NativeAgentFactory("http://127.0.0.1:1", None, {})
    first = sc.draw(0, 0)[0]
    copy = Scenario(id=first.id, kind=first.kind, data=msgspec.json.decode(msgspec.json.encode(first.data)))
    changed = Scenario(id=first.id, kind=first.kind, data={**first.data, "agent": []})
    scenarios = [sc.draw(i, 0)[0] for i in range(6)] + [copy, changed]
    for i, scenario in enumerate(scenarios):
        view, tools = scenario.agent_view(), sc.tools(scenario)
        agent = factory()
        agent.start(EpisodeContext(episode_id=f"e{i}", scenario=view, tools=tools, rng=None, seed=i))
        said = UserTurn(run="r", ep=f"e{i}", seq=1, t=0.0, wall=0, turn=0, utterance="Hi.")
        want = NativeRequest(episode_id=f"e{i}", turn_index=1, tools=tools, messages=[user_message(said)],
                             user=user_message(said), seed=i, scenario=ScenarioInfo(id=view.id, kind=view.kind,
                                                                                    data=view.data))
        assert agent.request(Observation(user=said, history=[said], turn_index=1)) == msgspec.json.encode(want)
    assert len(factory.shared) == 1 + 3 + 2  # the tools; the three scenarios; the copy and the change


@pytest.mark.slow
def test_tls_certificates_are_verified_by_default(tmp_path):
    """A self-signed server: refused at once by default (a fault, outcome error), accepted with verify_tls=false."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a self-signed certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with serve_in_thread(make_app(EchoAgent, "native"), ssl_context=context) as url:
        assert url.startswith("https://")
        strict = run_batch(NativeAgentFactory(url, None, FAST), episodes=1)
        lax = run_batch(NativeAgentFactory(url, None, {**FAST, "verify_tls": "false"}), episodes=1)
    assert strict.outcomes() == {"e000000": "error"}
    assert [(f.kind, f.attempt) for f in strict.of_type("fault")] == [("exception", 1)]
    assert "TLS error" in strict.of_type("fault")[0].detail
    assert lax.outcomes() == {"e000000": "success"}


def test_the_incremental_transcript_equals_the_messages_built_from_scratch():
    """Request by request through an episode (with tool steps and a foreign history), the cached
    encoding decodes to exactly history_messages, and the user turn's to exactly its message."""
    from dialogsim.agents.http.native import (Message, Transcript, UserMessage, calls_this_turn, history_messages,
                                              user_message)
    from dialogsim.engine.contracts import ToolCall
    from dialogsim.engine.events import AgentTurn, UserTurn
    from dialogsim.engine.contracts import ToolResult

    def ev(cls, seq, **kw):
        return cls(run="r", ep="e", seq=seq, t=0.0, wall=0, **kw)

    u0 = ev(UserTurn, 1, turn=0, utterance="hi")
    c1 = ev(ToolCalled, 2, call_id="c1", service="S", method="M", parameters={"a": "1"})
    r1 = ev(ToolReturned, 3, call_id="c1", results=[{"x": "y"}])
    a1 = ev(AgentTurn, 4, turn=1, utterance="ok")
    u2 = ev(UserTurn, 5, turn=2, utterance="more")
    results = [ToolResult(call_id="c1", results=[{"x": "y"}])]
    calls = [ToolCall(service="S", method="M", parameters={"a": "1"}, call_id="c1")]
    steps = [([], u0, [], []), ([u0], u0, [], []), ([u0, c1, r1], u0, results, calls), ([u0], u0, results, calls),
             ([u0, c1, r1, a1, u2], u2, [], []), ([u2], u2, [], [])]
    t = Transcript()
    for history, user, res, last in steps:
        raw, step, user_raw = t.messages(history, user, res, last)
        got = msgspec.json.decode(b"[" + b",".join(bytes(r) for r in raw) + b"]", type=list[Message])
        want = history_messages(history, user, res, last)
        assert got == want and step == calls_this_turn(want)
        assert msgspec.json.decode(user_raw, type=UserMessage) == user_message(user)


@pytest.mark.slow
def test_measured_latency_replaces_the_latency_model_only_when_asked():
    """latency=measured: the agent turn's latency is the wall time of its requests (at least the server's
    delay); by default the engine's seeded model decides (here fixed at 0)."""
    app = faulty_app(EchoAgent, "native", plan=lambda key, attempt: None, delay=0.02)
    with serve_in_thread(app) as url:
        measured = run_batch(NativeAgentFactory(url, None, {"latency": "measured"}), episodes=1)
        modelled = run_batch(NativeAgentFactory(url, None, {}), episodes=1)
    assert all(t.latency >= 0.02 for t in measured.of_type("agent_turn"))
    assert {t.latency for t in modelled.of_type("agent_turn")} == {0.0}
    with pytest.raises(UserError, match="latency"):
        NativeAgentFactory(url, None, {"latency": "guess"})


@pytest.mark.slow
def test_requests_never_carry_the_users_goal_or_true_state():
    """An agent over HTTP sees the schemas and the user's acts, never the goal or the state it is scored on."""
    from dialogsim.scenarios.sgd.pack import load_pack
    from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet
    from dialogsim.users.agenda import make_factory as agenda

    seen: list[dict] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        return web.json_response({"utterance": "Could you say that again?", "end": body["turn_index"] > 4})

    scenarios = SgdScenarioSet(load_pack(), ["Restaurants_1"])
    app = web.Application()
    app.router.add_post("/agent", handle)
    with serve_in_thread(app) as url:
        run_batch(NativeAgentFactory(url + "/agent", None, {}), episodes=2, scenarios=scenarios,
                  user=agenda(None, scenarios, {}))
    assert seen and all(set(b["scenario"]["data"]) == {"pack", "schemas"} for b in seen)
    users = [m for b in seen for m in b["messages"] if m["role"] == "user"] + [b["user"] for b in seen]
    assert any(f["actions"] for m in users for f in m["frames"])  # the acts are shared ...
    assert not any(f.get("state") for m in users for f in m["frames"])  # ... the true state never


@pytest.mark.slow
def test_the_sender_that_delivers_an_answer_sends_the_request_its_waiter_makes_next():
    """Requests made one after another, from ``then`` or by a task awaiting each answer, all go through
    the sender that delivered the previous answer: no other sender is started or woken a turn later."""
    from dialogsim.agents.http.client import HttpPool

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    app = web.Application()
    app.router.add_post("/", answer)

    async def main(url: str) -> None:
        pool = HttpPool(HttpSettings(concurrency=4))
        rng = random.Random(0)
        done = asyncio.get_running_loop().create_future()
        got: list[bytes] = []

        def chain(n: int) -> None:
            future = pool.submit(url, b"%d" % n, None, rng, bytes)
            future.then = lambda: chain(n + 1) if n < 4 else done.set_result(None)
            future.add_done_callback(lambda f: got.append(f.result()[0]))

        chain(0)
        await done
        for n in range(5, 10):
            got.append((await pool.post(url, b"%d" % n, None, rng, bytes))[0])
        assert got == [b"%d" % n for n in range(10)]
        assert len(pool._senders) == 1 and pool.stats.peak == 1
        await pool.aclose()

    with serve_in_thread(app) as url:
        asyncio.run(main(url + "/"))
