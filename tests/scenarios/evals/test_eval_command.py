"""End to end: golden files against live agents (an OpenAI-compatible model that calls tools, serve-agent), then
``dialogsim eval`` and ``--to eval_csv``."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys

import pytest

from dialogsim.agents.http.server import make_app
from dialogsim.agents.http.testing import serve_in_thread
from dialogsim.engine.registry import agent_factory, load_scenarios
from dialogsim.scenarios.evals.eval_csv import COLUMNS


@pytest.fixture
def openai_run(tmp_path, golden_file, fake_model, run_cli):
    """The small golden file run against the fake tool-calling model (two episodes)."""
    url, seen = fake_model
    run = tmp_path / "run"
    status, out, err = run_cli("run", "--scenarios", f"golden:{golden_file}", "--agent", f"openai:{url}",
                               "--agent-model", "fake-1", "--episodes", 2, "--out", run, "--no-progress")
    assert status == 0, err
    return run, seen


def test_a_model_that_calls_its_own_tools_is_scored_against_the_references(openai_run, golden_file, run_cli,
                                                                           tmp_path):
    """Tool calls reach the log, the references score them, tokens and cost come from spans and prices."""
    run, seen = openai_run
    assert "tools" not in seen[0]  # a golden question declares no tools: the model brings its own
    prices = tmp_path / "prices.csv"
    prices.write_text("model,input_per_1k,output_per_1k\nfake-1,0.5,1.5\n")
    out_json = tmp_path / "metrics.json"
    status, out, err = run_cli("eval", run, "--golden", golden_file, "--prices", prices, "--out", out_json)
    assert status == 0, err
    assert "tool_call.f1" in out and "2 episodes" in out
    report = json.loads(out_json.read_text())
    per = {e["scenario_id"]: e["metrics"] for e in report["per_episode"]}
    assert per["cart"]["tool_call.f1"] == 1.0 and per["cart"]["tool.calls"] == 1
    # the reference also wants update_salesforce_crm, which the model never calls
    assert per["discount"]["tool_call.f1"] == pytest.approx(2 / 3) and per["discount"]["tool_call.recall"] == 0.5
    assert per["cart"]["tool.success_rate"] == 0.0  # nothing stands behind the model's tools: an error each
    assert per["cart"]["trajectory.exact"] == 0.0  # the agent under test is named by its spec, not customer_service
    assert per["discount"]["state.match"] is None  # the model reports no state
    tokens = per["cart"]["tokens.total"]
    assert tokens > 0 and per["cart"]["cost"] == pytest.approx(
        (per["cart"]["tokens.input"] * 0.5 + per["cart"]["tokens.output"] * 1.5) / 1000)
    assert report["aggregate"]["tool_call.f1"]["n"] == 2


@pytest.mark.slow
def test_a_named_openai_agent_matches_the_reference_trajectory(tmp_path, golden_file, fake_model, run_cli):
    """``--agent-opt name=customer_service`` names the chat agent in its spans: the reference trajectory matches."""
    url, _ = fake_model
    run = tmp_path / "named"
    status, _, err = run_cli("run", "--scenarios", f"golden:{golden_file}", "--agent", f"openai:{url}",
                             "--agent-model", "fake-1", "--agent-opt", "name=customer_service", "--episodes", 2,
                             "--out", run, "--no-progress")
    assert status == 0, err
    status, _, err = run_cli("eval", run, "--golden", golden_file, "--out", tmp_path / "m.json")
    assert status == 0, err
    per = {e["scenario_id"]: e["metrics"] for e in json.loads((tmp_path / "m.json").read_text())["per_episode"]}
    assert per["cart"]["trajectory.exact"] == 1.0


def test_the_csv_of_a_live_run_has_tokens_model_and_tool_calls(openai_run, run_cli):
    """--to eval_csv: one row per episode; the model named in spans; the model's tool calls extracted."""
    run, _ = openai_run
    status, _, err = run_cli("project", run, "--to", "eval_csv", "--no-progress")
    assert status == 0, err
    with open(run / "projections" / "eval_csv@v1" / "simulation_run.csv", newline="", encoding="utf-8") as f:
        rows = {r["eval_id"]: r for r in csv.DictReader(f)}
    cart = rows["cart"]
    assert cart["question_id"] == "cart" and json.loads(cart["agents_evaluated"]) == ["customer_service"]
    assert json.loads(cart["extracted_data"])["tool_interactions"] == [
        {"tool_name": "access_cart_information", "input_arguments": {"customer_id": "123"}}]
    assert cart["metric.tool_errors"] == "1" and int(cart["metric.total_tokens"]) > 0
    models = {s["attributes"].get("gen_ai.request.model") for s in json.loads(cart["session_trace"])
              if s["name"] == "call_llm"}
    assert models == {"fake-1"}


def test_a_golden_file_that_does_not_match_the_run_is_one_line(openai_run, golden_file, tmp_path, run_cli,
                                                               one_line_error):
    """An episode without a question, or a question without an episode, names the first unmatched id."""
    run, _ = openai_run
    data = json.loads(golden_file.read_text())
    data["golden_questions"][0]["id"] = "elsewhere"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    status, _, err = run_cli("eval", run, "--golden", other, "--out", tmp_path / "m.json")
    one_line_error(status, err, str(other), "no question 'cart'")
    data["golden_questions"][0]["id"] = "cart"
    data["golden_questions"].append({**data["golden_questions"][1], "id": "unplayed"})
    other.write_text(json.dumps(data))
    status, _, err = run_cli("eval", run, "--golden", other, "--out", tmp_path / "m.json")
    one_line_error(status, err, str(other), "question 'unplayed' is not a scenario")
    bad_prices = tmp_path / "prices.csv"
    bad_prices.write_text("model,input_per_1k,output_per_1k\nfake-1,x,1\n")
    status, _, err = run_cli("eval", run, "--prices", bad_prices, "--out", tmp_path / "m.json")
    one_line_error(status, err, str(bad_prices), "line 2", "input_per_1k")
    assert not (tmp_path / "m.json").exists()


def test_the_real_golden_file_against_a_tool_calling_model_gives_every_real_column(
        real_file, fake_model, tmp_path, run_cli):
    """golden:customer_service against the fake model: eval scores it and eval_csv has every real column."""
    golden = real_file("customer_service_golden.json")
    url, _ = fake_model
    run = tmp_path / "run"
    status, _, err = run_cli("run", "--scenarios", f"golden:{golden}", "--agent", f"openai:{url}",
                             "--agent-model", "fake-1", "--episodes", 4, "--out", run, "--no-progress")
    assert status == 0, err
    status, out, err = run_cli("eval", run, "--golden", golden)
    assert status == 0 and "tool_call.f1" in out, err
    report = json.loads((run / "eval_metrics.json").read_text())
    simple = next(e for e in report["per_episode"] if e["scenario_id"] == "cs_simple_17a89ba6")
    assert simple["metrics"]["tool_call.f1"] == 1.0  # "tell me what is in my cart?" -> access_cart_information
    assert run_cli("project", run, "--to", "eval_csv", "--no-progress")[0] == 0
    with open(real_file("customer_service_simulation_run.csv"), newline="", encoding="utf-8") as f:
        real_columns = next(csv.reader(f))
    with open(run / "projections" / "eval_csv@v1" / "simulation_run.csv", newline="", encoding="utf-8") as f:
        ours = list(csv.DictReader(f))
    assert len(ours) == 4 and set(real_columns) <= set(ours[0]) and list(ours[0]) == COLUMNS


def test_a_golden_file_runs_against_serve_agent(golden_file, tmp_path, run_cli):
    """The schema agent served over dialogsim/1 (as serve-agent does) plays a golden file: no protocol change."""
    make_agent = agent_factory("schema", load_scenarios(f"golden:{golden_file}"), {})
    with serve_in_thread(make_app(make_agent, "native")) as url:
        status, out, err = run_cli("run", "--scenarios", f"golden:{golden_file}", "--agent", f"http:{url}",
                                   "--episodes", 2, "--out", tmp_path / "run", "--no-progress")
    assert status == 0, err
    assert run_cli("eval", tmp_path / "run")[0] == 0
    report = json.loads((tmp_path / "run" / "eval_metrics.json").read_text())
    assert report["episodes"] == 2 and report["aggregate"]["tool.calls"]["sum"] == 0


@pytest.mark.slow
def test_the_real_golden_file_runs_against_the_serve_agent_command(tmp_path, real_file, run_cli):
    """customer_service_golden.json against `dialogsim serve-agent --agent schema` (the command, in its own process)
    over dialogsim/1: every question ends, and eval and eval_csv read the run."""
    golden = real_file("customer_service_golden.json")
    proc = subprocess.Popen([sys.executable, "-m", "dialogsim.engine.cli", "serve-agent", "--agent", "schema",
                             "--scenarios", f"golden:{golden}", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), proc.stderr.read()
        questions = len(json.loads(golden.read_text())["golden_questions"])
        status, _, err = run_cli("run", "--scenarios", f"golden:{golden}", "--agent", f"http:{line.split()[-1]}",
                                 "--episodes", questions, "--out", tmp_path / "run", "--no-progress")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    assert status == 0, err
    assert run_cli("eval", tmp_path / "run")[0] == 0
    report = json.loads((tmp_path / "run" / "eval_metrics.json").read_text())
    assert report["episodes"] == questions
    assert run_cli("project", tmp_path / "run", "--to", "eval_csv", "--no-progress")[0] == 0
