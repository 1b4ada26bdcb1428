"""A chat model playing the clarify-or-answer actions: what ``--agent openai:URL`` is with ``--scenarios
proactive:...`` (the scenario set names it as its ``chat_agent``), or ``--agent proactive-chat:URL``.

As the original generator calls its model: the action's prompt (scenarios/proactive/prompts/) is the system
message and ``"[Task]\\n" + query`` the user message, with max_tokens 400 and temperature 0.7 unless the
options say otherwise; no tools. The action is chosen as for the built-in assistant (actions.py: the
persona's mainline, ``mainline=`` by hand, or a branch's ``action=``) and logged on the turn with who chose it
and its prompt; the message is the model's text as it came. If the user goes on, the chat goes on.
"""

from __future__ import annotations

import time
from typing import Any

from msgspec import UNSET

from ...engine.contracts import AgentReply, EpisodeContext, ModelCall, Observation
from ...engine.events import AgentTurn, UserTurn
from ...scenarios.proactive.actions import ACTION_OPTIONS, ActionOptions, branches_of, choose_action, \
    read_action_options
from ...scenarios.proactive.prompts import MAX_TOKENS, TEMPERATURE, action_prompt, user_message
from .client import number_option
from .factory import model_option
from .openai_chat import OpenAIAgentFactory


def task_messages(prompt: str, query: str) -> list[dict[str, Any]]:
    """The chat of an action's call: its prompt as the system message, the task as the user message."""
    return [{"role": "system", "content": prompt}, {"role": "user", "content": user_message(query)}]


class ProactiveChatAgent:
    """One episode of a chat model playing an action (see the module docstring)."""

    deterministic = False

    def __init__(self, factory: ProactiveChatFactory) -> None:
        self.factory = factory

    def start(self, ctx: EpisodeContext) -> None:
        state = ctx.scenario.data
        self.domain, self.query = state.get("domain"), state.get("query")
        if not isinstance(self.query, str) or self.domain not in ("coding", "planning"):
            raise ValueError("the proactive chat agent answers coding and planning tasks with a query "
                             "(--scenarios proactive)")
        self.ctx = ctx
        self.messages: list[dict[str, Any]] | None = None  # the chat, from the decision on
        self.sent = 0.0

    def warm(self, history: list[Any]) -> None:
        """The episode so far (a fork's copied prefix, or a resumed episode's logged turns) as its own chat."""
        self.messages = None
        for event in history:
            if type(event) is AgentTurn and self.messages is None and isinstance(event.prompt, str):
                self.messages = task_messages(event.prompt, self.query)
                self.messages.append({"role": "assistant", "content": event.utterance})
            elif self.messages is not None and type(event) in (UserTurn, AgentTurn):
                role = "user" if type(event) is UserTurn else "assistant"
                self.messages.append({"role": role, "content": event.utterance})

    def respond(self, obs: Observation) -> Any:
        """The turn, or a future of it: the decision on the first call, the chat's next answer after it (from the
        episode's record or the llm cache when they have it, agents/http/chat.py)."""
        f = self.factory
        labels: tuple[str, str, str] | None = None
        if self.messages is None:
            action, chosen_by = choose_action(f.options, obs.user.persona)
            prompt = action_prompt(self.domain, action)
            self.messages = task_messages(prompt, self.query)
            labels = (action, chosen_by, prompt)
        else:
            self.messages.append({"role": "user", "content": obs.user.utterance})
        body = {"model": f.model, "messages": self.messages, "max_tokens": f.max_tokens,
                "temperature": f.temperature, "user": self.ctx.episode_id}
        if f.measured_latency:
            self.sent = time.perf_counter()

        return f.chat.call(body, self.ctx.rng, self.ctx.recorded, lambda call: self.reply(call, labels))

    def reply(self, call: ModelCall, labels: tuple[str, str, str] | None) -> AgentReply:
        """The turn from the model's answer (its text as it came), labelled with the action it played, if any."""
        text = call.content or ""
        self.messages.append({"role": "assistant", "content": text})
        latency = time.perf_counter() - self.sent if self.factory.measured_latency else None
        action, chosen_by, prompt = labels or (None, UNSET, UNSET)
        return AgentReply(utterance=text, usage=call.usage, cost=call.cost, model_calls=[call], latency=latency,
                          action=action, action_by=chosen_by, prompt=prompt)


class ProactiveChatFactory(OpenAIAgentFactory):
    """The run's chat model for the clarify-or-answer tasks: options model (required), max_tokens (400),
    temperature (0.7), mainline, branches (and a branch's action)."""

    own_options = frozenset({"model", "temperature", "max_tokens"}) | ACTION_OPTIONS
    agent = ProactiveChatAgent

    def read_options(self, options: dict[str, Any]) -> None:
        self.model = model_option(options)
        self.temperature = number_option(options, "temperature", TEMPERATURE)
        self.max_tokens = number_option(options, "max_tokens", MAX_TOKENS, integer=True, minimum=1)
        self.options: ActionOptions = read_action_options(options, "openai")
        # the run's mainlines fork into the other actions (as with --agent clarify)
        self.branches = branches_of if self.options.branches else None
