"""The built-in clarify-or-answer assistant: its messages per action and domain, and how it picks the action."""

from __future__ import annotations

import random
import warnings

import pytest

from dialogsim.agents.clarify import ClarifyFactory, function_name
from dialogsim.engine.contracts import EpisodeContext, Observation
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import UserTurn
from dialogsim.scenarios.proactive.personas import BUILTIN_PERSONAS, mainline_action
from dialogsim.scenarios.proactive.prompts import action_prompt
from dialogsim.scenarios.proactive.scenario_set import ProactiveScenarios, load

MBPP = load("mbpp")


def _answer(scenario, options=None, persona=None, scenarios=MBPP):
    agent = ClarifyFactory(None, scenarios, options or {})()
    agent.start(EpisodeContext(episode_id="e0", scenario=scenario.agent_view(), tools=[], rng=random.Random(0),
                               seed=0))
    said = UserTurn(run="r", ep="e0", seq=1, t=0.0, wall=0, turn=0, utterance=scenario.data["query"])
    if persona is not None:
        said.persona = persona
    return agent.respond(Observation(user=said, history=[said], turn_index=1))


def test_low_is_the_reference_solution_as_it_is():
    """LOW answers every MBPP task with its reference solution, byte for byte ("\\r\\n" line ends kept)."""
    for scenario in MBPP.scenarios:
        reply = _answer(scenario, {"action": "LOW"})
        assert reply.utterance == MBPP.solution(scenario)
    assert "\r\n" in _answer(MBPP.scenarios[0], {"action": "LOW"}).utterance


def test_mid_and_high_ask_in_comments_and_stay_runnable():
    """MID adds one question, HIGH two and a plan, all as comment lines above the solution; every message compiles."""
    for scenario in MBPP.scenarios:
        code = MBPP.solution(scenario)
        for action, questions in (("MID", 1), ("HIGH", 2)):
            message = _answer(scenario, {"action": action}).utterance
            assert message.endswith(code)
            head = message[:-len(code)]
            assert head.endswith("\r\n" if "\r\n" in code else "\n")
            assert all(line.startswith("# ") for line in head.splitlines())
            assert message.count("?") == code.count("?") + questions
            with warnings.catch_warnings():  # some references have escapes Python now warns about
                warnings.simplefilter("ignore")
                compile(message, scenario.id, "exec")
    high = _answer(MBPP.scenarios[0], {"action": "HIGH"}).utterance
    assert "# Plan:\r\n# 1. Define remove_Occ()" in high


def test_the_action_and_who_chose_it():
    """A branch's action, the mainline by hand, the persona's rule, or MID by default; with the action's prompt."""
    scenario = MBPP.scenarios[3]
    for persona in BUILTIN_PERSONAS:
        reply = _answer(scenario, persona=persona.as_record())
        assert (reply.action, reply.action_by) == (mainline_action(persona), "persona")
        assert reply.prompt == action_prompt("coding", reply.action)
    novice = BUILTIN_PERSONAS[0].as_record()
    assert (_answer(scenario, {"mainline": "HIGH"}, novice).action_by) == "manual"
    assert (_answer(scenario, {"mainline": "HIGH", "action": "MID"}, novice).action) == "MID"
    assert (_answer(scenario, {"action": "MID"}).action_by) == "branch"
    default = _answer(scenario)
    assert (default.action, default.action_by) == ("MID", "default")


def test_planning_and_tasks_without_a_solution():
    """A planning task gets a templated plan; a coding task without a solution a stub that compiles."""
    planning = ProactiveScenarios(synthetic="planning")
    scenario = planning.draw(0, 0)[0]
    asked = [_answer(scenario, {"action": a}, scenarios=planning).utterance.count("?") for a in ("LOW", "MID", "HIGH")]
    assert asked == [0, 1, 2]
    assert "Plan for: 帮我规划今天的待办" in _answer(scenario, {"action": "LOW"}, scenarios=planning).utterance
    coding = ProactiveScenarios(synthetic="coding")
    stub = _answer(coding.draw(0, 0)[0], {"action": "HIGH"}, scenarios=coding).utterance
    assert "No reference solution" in stub and stub.count("?") == 2
    compile(stub, "stub", "exec")


def test_function_name_is_the_tested_one():
    """With helpers defined first, the name is the function the tests call."""
    code = "def helper(x):\r\n    return x\r\ndef main(a):\r\n    return helper(a)"
    assert function_name(code, "assert main(1) == 1") == "main"
    assert function_name(code, None) == "helper"
    assert function_name("x = 1", None) == "the function"


@pytest.mark.parametrize("options, problem", [({"listen": "text"}, "unknown option 'listen'"),
                                              ({"mainline": "low"}, "mainline='low'"),
                                              ({"branches": "no"}, "branches='no'")])
def test_bad_options(options, problem):
    """A bad option is a one-line user error naming it."""
    with pytest.raises(UserError, match=problem):
        ClarifyFactory(None, MBPP, options)
