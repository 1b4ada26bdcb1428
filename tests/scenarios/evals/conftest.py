"""Shared pieces of the eval-trace tests: a small golden file, a fake tool-calling chat model, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from dialogsim.agents.http.testing import serve_in_thread
from dialogsim.engine.cli import main

ROOT = Path(__file__).resolve().parents[3]
EVAL_TRACES = ROOT.parent / "shared" / "reference" / "eval_traces"

# A golden dataset in the shape of the real customer-service one, small enough to read at a glance.
GOLDEN = {"golden_questions": [
    {"id": "cart", "user_inputs": ["hi", "what is in my cart?", "thanks, bye"],
     "agents_evaluated": ["customer_service"], "metadata": {"tenant": "garden"},
     "reference_data": {"reference_tool_interactions": [
         {"tool_name": "access_cart_information", "input_arguments": {"customer_id": "123"}}],
         "reference_trajectory": ["customer_service"]},
     "updated_datetime": "2026-01-09"},
    {"id": "discount", "user_inputs": ["can I get a 10% discount code?"],
     "agents_evaluated": ["customer_service"],
     "reference_data": {"reference_tool_interactions": [
         {"tool_name": "generate_qr_code", "input_arguments": {"customer_id": "123", "discount_value": 10}},
         {"tool_name": "update_salesforce_crm"}],
         "reference_state_variables": {"discount": "10%"}}},
]}


@pytest.fixture
def golden_file(tmp_path: Path) -> Path:
    """The small golden dataset, written to a file."""
    path = tmp_path / "small_golden.json"
    path.write_text(json.dumps(GOLDEN, indent=4), encoding="utf-8")
    return path


@pytest.fixture
def real_file():
    """A file of ../shared/reference/eval_traces, or a skip when this checkout has none beside it."""
    def get(name: str) -> Path:
        path = EVAL_TRACES / name
        if not path.is_file():
            pytest.skip(f"{path} not found (the shared reference files are only on the development machines)")
        return path
    return get


def cli(capsys, *args: Any) -> tuple[int, str, str]:
    """Run the CLI in this process: exit status, stdout, stderr."""
    try:
        status = main([str(a) for a in args])
    except SystemExit as exc:  # argparse
        status = exc.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*args)`` -> (status, out, err)."""
    return lambda *args: cli(capsys, *args)


def assert_one_line_error(status: int, err: str, *fragments: str) -> None:
    """Exit status 2, one stderr line holding every fragment, no traceback."""
    assert status == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err


@pytest.fixture
def one_line_error():
    """``one_line_error(status, err, *fragments)`` asserts a one-line bad-input error."""
    return assert_one_line_error


# What the fake model calls, by a word in the user's last message (the real customer-service tools).
TOOL_RULES = [
    ("cart", "access_cart_information", {"customer_id": "123"}),
    ("discount", "generate_qr_code", {"customer_id": "123", "discount_value": 10}),
    ("10%", "generate_qr_code", {"customer_id": "123", "discount_value": 10}),
]


def fake_chat_model(seen: list[dict]) -> web.Application:
    """An OpenAI-compatible model that runs its own tool logic: a tool call when the user's words ask for one,
    then an answer that reads the tool message; usage on every completion."""

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        messages = body["messages"]
        last = messages[-1]
        message: dict[str, Any]
        if last["role"] == "tool":
            outcome = "failed" if "error" in json.loads(last["content"]) else "worked"
            message = {"role": "assistant", "content": f"I tried that and it {outcome}."}
        else:
            rule = next((r for r in TOOL_RULES if r[0] in last["content"].lower()), None)
            if rule is None:
                message = {"role": "assistant", "content": "Hello! How can I help with your garden?"}
            else:
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{len(messages)}", "type": "function",
                     "function": {"name": rule[1], "arguments": json.dumps(rule[2])}}]}
        return web.json_response({"id": "x", "object": "chat.completion", "model": body.get("model"),
                                  "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 40 * len(messages), "completion_tokens": 12}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    return app


@pytest.fixture
def fake_model():
    """A running fake chat model on loopback: yields (base URL, the request bodies it got)."""
    seen: list[dict] = []
    with serve_in_thread(fake_chat_model(seen)) as url:
        yield url, seen
