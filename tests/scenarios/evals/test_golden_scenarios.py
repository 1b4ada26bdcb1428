"""Golden files and evalsets as scenario sets: loading, checks, the scripted user, the refusal of evalsets."""

from __future__ import annotations

import json

import msgspec
import pytest

from dialogsim.engine.contracts import ToolCall
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import EpisodeStarted, ToolReturned, UserTurn
from dialogsim.engine.registry import load_scenarios
from dialogsim.scenarios.evals.golden import encode_golden, load_golden
from dialogsim.testing import ScriptLine, ScriptedAgent, simulate
from dialogsim.users.scripted import ScriptedUser


def test_a_golden_question_is_a_scenario_whose_user_says_its_inputs_in_order(golden_file):
    """The scripted user says user_inputs one per turn and ends with the last; the reference rides in the snapshot."""
    scenarios = load_scenarios(f"golden:{golden_file}")
    agent = lambda: ScriptedAgent([ScriptLine(utterance="Sure.")] * 3)  # noqa: E731
    log = simulate(scenarios=scenarios, user=ScriptedUser, agent=agent, episodes=2)
    assert log.outcomes() == {"e000000": "success", "e000001": "success"}
    said = [e.utterance for e in log.episode("e000000") if isinstance(e, UserTurn)]
    assert said == ["hi", "what is in my cart?", "thanks, bye"]
    assert [e.end for e in log.episode("e000000") if isinstance(e, UserTurn)] == [False, False, True]
    started = next(e for e in log.episode("e000001") if isinstance(e, EpisodeStarted))
    assert started.scenario_id == "discount"
    golden = started.scenario["data"]["golden"]
    assert golden["reference_data"]["reference_state_variables"] == {"discount": "10%"}
    assert golden["agents_evaluated"] == ["customer_service"]


def test_episodes_cycle_through_the_questions_as_trials(golden_file):
    """Episode i plays question i mod n, trial i div n."""
    scenarios = load_scenarios(f"golden:{golden_file}")
    assert [(s.id, trial) for s, trial in (scenarios.draw(i, 0) for i in range(5))] == [
        ("cart", 0), ("discount", 0), ("cart", 1), ("discount", 1), ("cart", 2)]


def test_no_agent_sees_the_question_or_the_lines(golden_file):
    """The golden question and the user's lines are the answer key: an agent's view has neither."""
    scenario, _ = load_scenarios(f"golden:{golden_file}").draw(0, 0)
    assert {"golden", "user"} <= set(scenario.data)
    assert not {"golden", "user"} & set(scenario.agent_view().data)


def test_a_tool_without_a_world_is_logged_with_an_error_saying_so(golden_file):
    """A golden question has no backend: the agent's call is logged, answered with an error naming the tool."""
    call = ToolCall(service="access_cart_information", method="", parameters={"customer_id": "123"})
    agent = lambda: ScriptedAgent([ScriptLine(utterance="Let me look.", tool_calls=[call]),  # noqa: E731
                                   ScriptLine(utterance="Anything else?"), ScriptLine(utterance="Bye.")])
    log = simulate(scenarios=load_scenarios(f"golden:{golden_file}"), agent=agent)
    returned = [e for e in log if isinstance(e, ToolReturned)]
    assert len(returned) == 1 and "no world behind tool 'access_cart_information'" in returned[0].error


def test_the_file_round_trips_through_the_writer(golden_file, tmp_path):
    """load_golden then encode_golden keeps every named field (four-space indent, final newline)."""
    questions = [q.question for q in load_golden(golden_file)]
    out = tmp_path / "again.json"
    out.write_bytes(encode_golden(questions))
    assert [q.question for q in load_golden(out)] == questions
    text = out.read_text()
    assert text.startswith('{\n    "golden_questions": [') and text.endswith("}\n")
    assert '"input_arguments"' in text and text.count('"input_arguments"') == 2  # name-only entry stays so


def _broken(path, edit) -> str:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as info:
        load_golden(path)
    return str(info.value)


@pytest.mark.parametrize("edit, fragments", [
    (lambda d: d["golden_questions"][1].update(user_inputs=["ok", 3]), ["question 'discount'", "user_inputs[1]",
                                                                       "Expected `str`, got `int`"]),
    (lambda d: d["golden_questions"][0].pop("reference_data"), ["question 'cart'", "reference_data"]),
    (lambda d: d["golden_questions"][0]["reference_data"]["reference_tool_interactions"][0].pop("tool_name"),
     ["question 'cart'", "tool_name"]),
    (lambda d: d["golden_questions"][0]["reference_data"].update(reference_trajectory="customer_service"),
     ["question 'cart'", "reference_data.reference_trajectory", "Expected `array"]),
    (lambda d: d["golden_questions"][1].update(id="cart"), ["question 'cart'", "id: used by an earlier question"]),
    (lambda d: d["golden_questions"][0].update(user_inputs=[]), ["question 'cart'", "user_inputs: needs at least"]),
    (lambda d: d["golden_questions"][0].pop("id"), ["question #1", "id"]),
    (lambda d: d.pop("golden_questions"), ["golden_questions"]),
])
def test_malformed_golden_files_name_the_file_question_and_field(golden_file, edit, fragments):
    """Every problem is one line naming the file, the question and the field."""
    message = _broken(golden_file, edit)
    assert str(golden_file) in message and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_a_file_that_is_not_json_is_one_line(tmp_path, run_cli, one_line_error):
    """Not JSON: the run command says so in one line and writes nothing."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"golden_questions": [')
    status, _, err = run_cli("run", "--scenarios", f"golden:{bad}", "--out", tmp_path / "run", "--no-progress")
    one_line_error(status, err, str(bad), "not valid JSON")
    assert not (tmp_path / "run").exists()


def test_the_real_golden_files_load(real_file):
    """The customer-service and retail golden files of the reference data load as scenario sets."""
    cs = load_scenarios(f"golden:{real_file('customer_service_golden.json')}")
    assert [s.id for s in cs.scenarios] == ["cs_full_eb4390d8", "cs_simple_17a89ba6", "cs_full_657f2ed9",
                                            "cs_simple_2f260f51"]
    assert cs.scenarios[0].data["user"][1] == "can you please tell me what i purchased before?"
    retail = load_scenarios(f"golden:{real_file('retail_ai_location_strategy_golden.json')}")
    reference = retail.scenarios[0].data["golden"]["reference_data"]
    assert reference["reference_state_variables"]["business_type"] == "specialty coffee shop"


def test_the_real_golden_file_runs_against_the_builtin_agent(real_file, tmp_path, run_cli):
    """golden:customer_service runs end to end against the schema agent (which reads the user's text)."""
    golden = real_file("customer_service_golden.json")
    status, out, err = run_cli("run", "--scenarios", f"golden:{golden}", "--agent", "schema", "--episodes", 4,
                               "--out", tmp_path / "run", "--no-progress")
    assert status == 0, err
    assert "completed: 4 episodes" in out


# -- evalsets ---------------------------------------------------------------------------------------

EVALSET = {"eval_set_id": "set1", "name": "set1", "eval_cases": [
    {"eval_id": "c1", "conversation_scenario": {"starting_prompt": "I need soil.",
                                                "conversation_plan": "Ask for soil, then add it to the cart."},
     "session_input": {"app_name": "customer_service", "user_id": "u"}}]}


def test_an_evalset_loads_but_a_run_needs_a_model_driven_user(tmp_path, run_cli, one_line_error):
    """Conversation scenarios load as scenarios; a user that is not model-driven, or the llm user without its
    endpoint, is refused in one line."""
    path = tmp_path / "cases.evalset.json"
    path.write_text(json.dumps(EVALSET))
    scenarios = load_scenarios(f"evalset:{path}")
    scenario, _ = scenarios.draw(0, 0)
    assert scenario.id == "c1" and scenario.data["user"]["starting_prompt"] == "I need soil."
    assert "user" not in scenario.agent_view().data
    for user, fragments in (([], ["bad user spec 'llm:'", "llm:http://HOST:PORT"]),
                            (["--user", "scripted"], [str(path), "model-driven user", "pass --user llm:..."])):
        status, _, err = run_cli("run", "--scenarios", f"evalset:{path}", *user, "--out", tmp_path / "run",
                                 "--no-progress")
        one_line_error(status, err, *fragments)
        assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("edit, fragments", [
    (lambda d: d["eval_cases"][0]["conversation_scenario"].pop("conversation_plan"),
     ["case 'c1'", "conversation_plan"]),
    (lambda d: d["eval_cases"][0].update(eval_id=7), ["case #1", "eval_id"]),
    (lambda d: d.update(eval_cases=[]), ["eval_cases"]),
    (lambda d: d["eval_cases"][0].pop("conversation_scenario") and d["eval_cases"][0].update(conversation=[]),
     ["case 'c1'", "conversation_scenario", "golden"]),
])
def test_malformed_evalsets_name_the_file_case_and_field(tmp_path, edit, fragments):
    """An evalset problem is one line naming the file, the case and the field."""
    data = json.loads(json.dumps(EVALSET))
    edit(data)
    path = tmp_path / "bad.evalset.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as info:
        load_scenarios(f"evalset:{path}")
    for fragment in [str(path), *fragments]:
        assert fragment in str(info.value), info.value


def test_the_real_evalset_loads(real_file):
    """The reference evalset's five conversation scenarios load."""
    scenarios = load_scenarios(f"evalset:{real_file('customer_service_scenarios.evalset.json')}")
    assert len(scenarios.scenarios) == 5
    assert msgspec.to_builtins(scenarios.scenarios[0].data["golden"]["agents_evaluated"]) == ["customer_service"]


def test_once_a_model_driven_user_exists_it_is_the_one_asked_for(tmp_path, monkeypatch):
    """With an llm user registered, that user passes and any other is refused naming it."""
    from dialogsim.scenarios.evals import evalset

    path = tmp_path / "cases.evalset.json"
    path.write_text(json.dumps(EVALSET))
    scenarios = load_scenarios(f"evalset:{path}")
    monkeypatch.setattr(evalset, "names", lambda kind: ["agenda", "llm", "scripted"])
    scenarios.check_user("llm:http://127.0.0.1:9")
    with pytest.raises(UserError, match=r"not --user 'scripted': pass --user llm:\.\.\.$"):
        scenarios.check_user("scripted")
