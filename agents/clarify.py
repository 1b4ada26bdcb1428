"""The built-in offline assistant of the clarify-or-answer tasks (``--agent clarify``): the whole trajectory
pipeline without a model.

It plays one action per episode (scenarios/proactive/actions.py: the persona's mainline, one fixed by hand, or
a branch's) and logs it with the action's prompt. Coding tasks with a reference solution (MBPP) are answered
with that solution, its line ends as the data has them, the action's clarifying questions and plan written
above it as Python comments, so that the message stays a runnable program: LOW asks nothing, MID asks one
question, HIGH two and gives a three-step plan. Coding tasks without one get a stub that says so; planning
tasks a templated plan. Past its decision it says a closing line and ends.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ..engine.contracts import AgentReply, EpisodeContext, Observation
from ..engine.errors import UserError
from ..engine.events import AgentTurn
from ..scenarios.proactive.actions import ACTION_OPTIONS, ActionOptions, branches_of, choose_action, \
    read_action_options
from ..scenarios.proactive.prompts import action_prompt

_DEF = re.compile(r"^def\s+(\w+)\s*\(", re.MULTILINE)
CLOSING = AgentReply(utterance="That is my answer.", end=True)


def function_name(code: str, tests: Any) -> str:
    """The function a solution defines that its tests call (else its first), or a generic name."""
    names = _DEF.findall(code)
    if isinstance(tests, str):
        called = next((n for n in names if n + "(" in tests), None)
        if called is not None:
            return called
    return names[0] if names else "the function"


def coding_answer(action: str, code: str, name: str) -> str:
    """A reference solution with the action's questions and plan above it as comments."""
    nl = "\r\n" if "\r\n" in code else "\n"
    lines = []
    if action == "MID":
        lines = [f"# One question: may {name}() assume that its arguments are valid, or should it check them?",
                 "# Until you say otherwise, I assume they are valid."]
    elif action == "HIGH":
        lines = [f"# Two questions: (1) may {name}() assume that its arguments are valid, or should it check them?",
                 f"# (2) should {name}() return its result, or print it?",
                 "# Until you say otherwise, I assume valid arguments and a returned result.",
                 "# Plan:",
                 f"# 1. Define {name}() with the arguments the task gives.",
                 "# 2. Compute what the task asks for, step by step.",
                 "# 3. Return the result."]
    return nl.join(lines + [code]) if lines else code


def stub_answer(action: str, query: str) -> str:
    """A coding task without a reference solution: a stub that says so, after the action's questions."""
    questions = {"LOW": [], "MID": ["# One question: what should the function return when the input is empty?"],
                 "HIGH": ["# Two questions: (1) what should the function return when the input is empty?",
                          "# (2) which Python version must it run on?", "# Plan:", "# 1. Read the input.",
                          "# 2. Do the work the task asks for.", "# 3. Return the result."]}[action]
    task = " ".join(query.split())
    return "\n".join([*questions, "# No reference solution is known for this task; a stub to complete:",
                      "def solution(*args):", f"    raise NotImplementedError({task!r})"])


_PLAN = ["1. List what has to be done today and by when.", "2. Put the urgent and important items first.",
         "3. Block time for each item, the largest first.",
         "4. Leave a buffer and review the list at the end of the day."]


def planning_answer(action: str, query: str) -> str:
    """A templated plan for a planning task, after the action's questions and outline."""
    task = " ".join(query.split())
    head = {"LOW": [], "MID": ["One question: which deadline matters most today? Until you say, I plan around the "
                               "most urgent item."],
            "HIGH": ["Two questions: (1) which deadline matters most today? (2) how many hours do you have? Until "
                     "you say, I assume the most urgent item and a normal working day.",
                     "Outline: collect the tasks; rank them by deadline and impact; schedule them into time blocks."]}
    return "\n".join([*head[action], f"Plan for: {task}", *_PLAN])


class ClarifyAgent:
    """One episode of the built-in assistant: its decision turn, then a closing line."""

    deterministic = True
    __slots__ = ("factory", "state", "solution", "decided")

    def __init__(self, factory: ClarifyFactory) -> None:
        self.factory = factory

    def start(self, ctx: EpisodeContext) -> None:
        self.state = ctx.scenario.data
        solution = self.factory.solution
        self.solution = solution(ctx.scenario) if solution is not None else None
        self.decided = False

    def warm(self, history: list[Any]) -> None:
        """A fork's copied prefix: decided if it holds the agent's turn (a branch at the decision point does not)."""
        self.decided = any(type(e) is AgentTurn for e in history)

    def respond(self, obs: Observation) -> AgentReply:
        if self.decided:
            return CLOSING
        self.decided = True
        state = self.state
        domain, query = state.get("domain"), state.get("query")
        if not isinstance(query, str) or domain not in ("coding", "planning"):
            raise ValueError("the clarify agent answers coding and planning tasks with a query (--scenarios proactive)")
        action, chosen_by = choose_action(self.factory.options, obs.user.persona)
        if domain == "planning":
            message = planning_answer(action, query)
        elif self.solution:
            message = coding_answer(action, self.solution, function_name(self.solution, state.get("mbpp_tests")))
        else:
            message = stub_answer(action, query)
        return AgentReply(utterance=message, action=action, action_by=chosen_by, prompt=action_prompt(domain, action))


class ClarifyFactory:
    """``--agent clarify``: options mainline=LOW|MID|HIGH, branches=all|none (and a branch's action)."""

    def __init__(self, arg: str | None, scenarios: Any = None, options: dict[str, Any] | None = None) -> None:
        options = options or {}
        unknown = sorted(set(options) - ACTION_OPTIONS)
        if unknown:
            known = ", ".join(sorted(ACTION_OPTIONS))
            raise UserError(f"unknown option {unknown[0]!r} for agent clarify (known: {known})")
        self.options: ActionOptions = read_action_options(options, "clarify")
        self.solution: Callable[[Any], str | None] | None = getattr(scenarios, "solution", None)
        # the run's mainlines fork into the other actions (engine/session.py asks the agent when the scenario
        # set has no branches of its own)
        self.branches = branches_of if self.options.branches else None

    def __call__(self) -> ClarifyAgent:
        return ClarifyAgent(self)
