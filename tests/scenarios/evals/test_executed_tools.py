"""Agents that run their own tools and name themselves: dialogsim/1's ``executed`` (logged as the agent's tool
calls, scored, read back) and ``agent`` (the sub-agent that answered, in traces and trajectories)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from aiohttp import web

from dialogsim.agents.http.server import make_app
from dialogsim.agents.http.testing import serve_in_thread
from dialogsim.engine.contracts import AgentReply, ExecutedCall
from dialogsim.engine.events import AgentTurn, EpisodeEnded, EpisodeStarted, ToolCalled, ToolReturned, UserTurn
from dialogsim.engine.log import read_events
from dialogsim.engine.verify import verify_run

from .conftest import TOOL_RULES

# what each tool of the agent's own backend gives back
BACKEND = {"access_cart_information": [{"items": "2 roses"}], "generate_qr_code": [{"qr": "QR-10"}]}


def own_tools(text: str) -> list[ExecutedCall]:
    """The tools an agent with its own backend runs for a user's words (the customer-service rules)."""
    rule = next((r for r in TOOL_RULES if r[0] in text.lower()), None)
    if rule is None:
        return []
    return [ExecutedCall(service="", method=rule[1], parameters=rule[2], call_id=f"own-{rule[1]}",
                         results=BACKEND[rule[1]], latency=0.25)]


def native_agent_app(seen: list[dict]) -> web.Application:
    """A dialogsim/1 agent that runs its tools itself and reports them with its turn, naming the sub-agent that
    answered ("promotions" for a discount code, else "customer_service")."""

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        executed = own_tools(body["user"]["utterance"])
        answer = f"Done: {executed[0].results[0]}" if executed else "Hello!"
        name = "promotions" if executed and executed[0].method == "generate_qr_code" else "customer_service"
        return web.json_response({"protocol": "dialogsim/1", "utterance": answer, "agent": name,
                                  "executed": msgspec.to_builtins(executed)})

    app = web.Application()
    app.router.add_post("/turn", handle)
    return app


class OwnToolsAgent:
    """The same agent in Python: served by ``make_app`` it answers over dialogsim/1 like the app above."""

    def respond(self, obs: Any) -> AgentReply:
        executed = own_tools(obs.user.utterance)
        name = "promotions" if executed and executed[0].method == "generate_qr_code" else "customer_service"
        return AgentReply(utterance=f"Done: {executed[0].results[0]}" if executed else "Hello!", executed=executed,
                          agent_name=name)


def _calls(run) -> list[tuple]:
    """The tool events and the agent names of a run's turns."""
    events = list(read_events(run))
    return [(type(e).__name__, getattr(e, "executed_by", None), getattr(e, "results", None),
             getattr(e, "agent_name", None)) for e in events if type(e) in (ToolCalled, ToolReturned, AgentTurn)]


@pytest.fixture
def native_run(tmp_path, golden_file, run_cli):
    """The small golden file against the native agent that runs its own tools (two episodes)."""
    seen: list[dict] = []
    run = tmp_path / "run"
    with serve_in_thread(native_agent_app(seen)) as url:
        status, out, err = run_cli("run", "--scenarios", f"golden:{golden_file}", "--agent", f"http:{url}/turn",
                                   "--episodes", 2, "--out", run, "--no-progress")
    assert status == 0, err
    return run, seen


@pytest.mark.slow
def test_executed_tools_are_logged_as_the_agents_before_its_turn(native_run):
    """Each executed call is a tool_called marked executed_by "agent" and its tool_returned with the agent's rows
    and latency, right before the turn; no world is asked (no error); the next request shows them as messages."""
    run, seen = native_run
    events = [e for e in read_events(run) if e.ep == "e000000"]
    i = next(i for i, e in enumerate(events) if type(e) is ToolCalled)
    called, returned, turn = events[i:i + 3]
    assert (called.executed_by, called.method, called.parameters) == ("agent", "access_cart_information",
                                                                      {"customer_id": "123"})
    assert (returned.results, returned.error, returned.latency) == ([{"items": "2 roses"}], None, 0.25)
    assert type(turn) is AgentTurn and turn.utterance.startswith("Done")
    later = next(b for b in seen if b["user"]["utterance"] == "thanks, bye")
    kinds = [(m["role"], m.get("executed_by")) for m in later["messages"] if m["role"].startswith("tool")]
    assert kinds == [("tool_call", "agent"), ("tool_result", None)]


@pytest.mark.slow
def test_executed_tools_are_scored_and_projected(native_run, golden_file, run_cli, tmp_path):
    """The references score the agent's own calls (tool-call f1 1.0 on "cart"), its tools succeeded, and the
    golden projection lists them as reference tool interactions."""
    run, _ = native_run
    status, out, err = run_cli("eval", run, "--golden", golden_file, "--out", tmp_path / "m.json")
    assert status == 0, err
    per = {e["scenario_id"]: e["metrics"] for e in json.loads((tmp_path / "m.json").read_text())["per_episode"]}
    assert per["cart"]["tool_call.f1"] == 1.0 and per["cart"]["tool.success_rate"] == 1.0
    assert per["cart"]["trajectory.exact"] == 1.0  # the agent named itself as the reference does
    status, out, err = run_cli("project", run, "--to", "golden")
    assert status == 0, err
    golden = json.loads(next((run / "projections").glob("golden@*/golden.json")).read_text())
    cart = next(q for q in golden["golden_questions"] if "what is in my cart?" in q["user_inputs"])
    assert [c["tool_name"] for c in cart["reference_data"]["reference_tool_interactions"]] == [
        "access_cart_information"]
    discount = next(q for q in golden["golden_questions"] if q is not cart)
    assert (cart["reference_data"]["reference_trajectory"], discount["reference_data"]["reference_trajectory"]) == (
        ["customer_service"], ["promotions"])


@pytest.mark.slow
def test_a_run_with_executed_tools_verifies_without_the_agent(native_run):
    """The agent's answers, its own tool calls with them, are read back from the log: verify needs no server."""
    run, _ = native_run
    assert verify_run(run, progress=False).diverged == {}


@pytest.mark.slow
def test_a_fork_copying_executed_tools_goes_on_as_its_parent(tmp_path, golden_file, run_cli):
    """A fork copying the turn with the agent's own call asks no world for it and draws no latency for it: with the
    same agent, its live part is its parent's, event for event, at the same times from the start."""
    run, fork = tmp_path / "run", tmp_path / "fork"
    with serve_in_thread(native_agent_app([])) as url:
        status, _, err = run_cli("run", "--scenarios", f"golden:{golden_file}", "--agent", f"http:{url}/turn",
                                 "--episodes", 1, "--out", run, "--no-progress")
        assert status == 0, err
        status, _, err = run_cli("fork", run, "--at-turn", 4, "--out", fork, "--no-progress")
        assert status == 0, err

    def timeline(path):
        events = list(read_events(path))
        start = next(e.t for e in events if type(e) is EpisodeStarted)
        return [(type(e).__name__, round(e.t - start, 9), getattr(e, "utterance", None)) for e in events
                if e.seq > 0 and type(e) in (UserTurn, AgentTurn, ToolCalled, ToolReturned, EpisodeEnded)]

    assert any(kind == "ToolCalled" for kind, _, _ in timeline(fork)[:4])
    assert timeline(fork) == timeline(run)


@pytest.mark.slow
def test_serve_agent_passes_executed_tools_through(tmp_path, golden_file, run_cli):
    """A Python agent reporting executed calls and its name, served over dialogsim/1, logs what the native app
    logs."""
    runs = {}
    for name, app in (("native", native_agent_app([])), ("served", make_app(OwnToolsAgent))):
        runs[name] = tmp_path / name
        with serve_in_thread(app) as url:
            path = "/turn" if name == "native" else ""
            status, out, err = run_cli("run", "--scenarios", f"golden:{golden_file}", "--agent",
                                       f"http:{url}{path}", "--episodes", 2, "--out", runs[name], "--no-progress")
        assert status == 0, err
    assert _calls(runs["served"]) == _calls(runs["native"]) and len(_calls(runs["native"])) == 4 + 4
    assert {c[3] for c in _calls(runs["native"]) if c[0] == "AgentTurn"} == {"customer_service", "promotions"}


def test_a_bad_executed_entry_is_a_protocol_error_naming_the_field():
    """An executed call with an unknown field is refused with the path of the field."""
    from dialogsim.agents.http.client import ProtocolError
    from dialogsim.agents.http.native import decode_response
    with pytest.raises(ProtocolError, match=r"executed\[0\]"):
        decode_response(b'{"utterance": "x", "executed": [{"service": "", "method": "m", "rows": []}]}')
