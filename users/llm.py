"""The model-driven user (``--user llm:URL``): a chat model behind any OpenAI-compatible endpoint plays the user.

Its system prompt is rendered from the scenario (``users/llm_prompt.py``: an SGD goal in plain words, an
evalset case's plan, a task's query, a persona). In the chat the model writes the user's turns as the
assistant and the agent's turns reach it as user messages; it opens the dialogue (asked for its first message),
except in evalset cases, whose starting prompt is said verbatim. A message containing the stop marker
(``###STOP###`` unless option ``stop`` says otherwise) ends the dialogue, the marker removed; without it the
dialogue goes on until the turn limit. Its turns are annotated by ``users/llm_reading.py`` (acts and spans read
from its words and marked inferred, the true state from its goal) when the scenario is an SGD goal.

A clarify-or-answer task (``--scenarios proactive:...``) is played as the persona user plays it, with the
model's words: a persona per episode drawn as the persona user draws it (options ``persona=NAME``,
``personas=FILE``), in the prompt; the task's query said as it is, with the persona (the assistant picks its
action from it); then the model's answer to the assistant's message, in the persona's voice, as the user's
last word, carrying the rule-based reaction model's signals (``reaction``: what the preference pairs score).

Requests go through ``agents/http/chat.py`` with the live agent's client (timeouts, retries with Retry-After,
the bound on requests in flight, the size cap), so every failed attempt is a ``fault`` with ``who=user``
and every answer a ``model_called`` event before the turn. A resumed episode's logged calls are answered from
its log, never from the model: re-running the user against the logged prefix costs no request, rebuilds its
conversation and checks its turns, which is why it declares ``deterministic = True`` (it is re-run, not read
back); past the log it asks the model, and is as deterministic as the model is. A fork's copied turns are
not asked about: ``warm(history)`` takes them as the conversation so far (docs/prefix.md).
"""

from __future__ import annotations

from typing import Any

from ..agents.http.chat import ChatClient, decode_content
from ..agents.http.client import COMMON_OPTIONS, number_option
from ..agents.http.factory import HttpAgentFactory, model_option
from ..agents.http.openai_chat import chat_url
from ..engine.contracts import EpisodeContext, ModelCall, UserReply, Verdict
from ..engine.events import AgentTurn, UserTurn
from ..scenarios.proactive.reaction import react
from ..scenarios.proactive.records import SCENARIO_KIND as TASK_KIND
from .llm_prompt import STOP, opening_request, render
from .llm_reading import TurnReader
from .persona import persona_cast


class LlmUser:
    """One episode of a model playing the user (see the module docstring)."""

    deterministic = True  # re-run against a logged prefix: its logged model calls are answered from the log

    def __init__(self, factory: LlmUserFactory) -> None:
        self._f = factory

    def start(self, ctx: EpisodeContext) -> None:
        """Render the episode's system prompt and get ready to read its turns."""
        f = self._f
        self.ctx = ctx
        self.persona = f.personas.persona(ctx.seed) if ctx.scenario.kind == TASK_KIND else None
        self.record = f.personas.records[self.persona.name] if self.persona is not None else None
        system, self.opening = render(ctx.scenario, f.stop, self.record)
        if self.persona is not None:  # the task as it is: the assistant's task is the state's query
            self.opening = str(ctx.scenario.data["query"])
        self.reaction: str | None = None
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system},
                                               {"role": "user", "content": opening_request()}]
        data = ctx.scenario.data
        goal = data.get("goal")
        self.reader = (TurnReader(f.pack, goal, data.get("schemas") or {})
                       if f.pack is not None and isinstance(goal, dict) and goal.get("subgoals") else None)
        self.stopped = False
        self.agent_ended = False
        self.turns = 0
        self._heard: AgentTurn | None = None

    def respond(self, agent: AgentTurn | None) -> Any:
        """The next user turn: a reply when the log or the llm cache answers, else a future of one."""
        f = self._f
        self._heard = agent
        if agent is not None:
            self.agent_ended = self.agent_ended or agent.end
            self.messages.append({"role": "user", "content": agent.utterance})
        elif self.opening is not None:  # an evalset's starting prompt, said as it is
            self.messages.append({"role": "assistant", "content": self.opening})
            return self._turn(self.opening, [])
        body: dict[str, Any] = {"model": f.model, "messages": self.messages, "user": self.ctx.episode_id}
        if f.temperature is not None:
            body["temperature"] = f.temperature
        if f.max_tokens is not None:
            body["max_tokens"] = f.max_tokens
        return f.chat.call(body, self.ctx.rng, self.ctx.recorded, self._answer)

    def warm(self, history: list[Any]) -> None:
        """Take a logged episode's turns as its own past (a fork's copied prefix): the conversation is rebuilt from
        them, each user turn read again, without asking the model. A turn's words stand for the model's message
        (surrounding spaces aside; a closing turn gets the stop marker back)."""
        heard: AgentTurn | None = None
        for event in history:
            if type(event) is AgentTurn:
                heard = event
                self.agent_ended = self.agent_ended or event.end
                self.messages.append({"role": "user", "content": event.utterance})
            elif type(event) is UserTurn:
                said = self.opening if heard is None and self.opening is not None else event.utterance
                self.messages.append({"role": "assistant",
                                      "content": f"{said} {self._f.stop}" if event.end else said})
                self.stopped = self.stopped or event.end
                self.turns += 1
                if self.reader is not None:
                    self.reader.read(event.utterance, heard)
        self._heard = heard

    def _answer(self, call: ModelCall) -> UserReply:
        """The user's turn from the model's answer (run by the pool as soon as it arrives)."""
        text = call.content or ""
        self.messages.append({"role": "assistant", "content": text})
        return self._turn(text, [call])

    def _turn(self, text: str, calls: list[ModelCall]) -> UserReply:
        stop = self._f.stop
        end = stop in text
        utterance = " ".join(text.replace(stop, " ").split()) if end else text.strip()
        self.stopped = self.stopped or end
        self.turns += 1
        frames = self.reader.read(utterance, self._heard) if self.reader is not None else []
        usage = calls[0].usage if calls else None
        cost = calls[0].cost if calls else None
        reply = UserReply(utterance=utterance, frames=frames, end=end, model_calls=calls, usage=usage, cost=cost,
                          inferred=self.reader is not None)
        if self.persona is not None:
            self.persona_turn(reply)
        return reply

    def persona_turn(self, reply: UserReply) -> None:
        """A persona's turn: it says who it plays; its reply to the assistant is its last word, with the reaction
        model's signals."""
        reply.persona = self.record
        if self._heard is not None:
            reaction = react(self._heard.utterance, self.persona)
            self.reaction = reaction.kind
            reply.end = reply.final = True
            reply.reaction = reaction.meta

    def verdict(self) -> Verdict:
        """Success when the user ended the dialogue with the stop marker (its claims go to the scenario's
        judge); a failure when the agent ended it first."""
        reward = {"turns": self.turns}
        if self.persona is not None:
            if self.reaction is None:
                return Verdict(outcome="failure", reason="the assistant ended the dialogue before the persona reacted",
                               reward=reward)
            return Verdict(outcome="success", reason=f"the persona reacted: {self.reaction}", reward=reward)
        if self.stopped:
            claims = self.reader.claims() if self.reader is not None else []
            return Verdict(outcome="success", reason="the user ended the dialogue", reward=reward, claims=claims)
        if self.agent_ended:
            return Verdict(outcome="failure", reason="the agent ended the dialogue before the user was done",
                           reward=reward)
        return Verdict(outcome="failure", reason="the user did not end the dialogue", reward=reward)


class LlmUserFactory(HttpAgentFactory):
    """``--user llm:URL``: one ChatClient (and HTTP pool) shared by the run's episodes; a user per episode."""

    role = "user"
    protocol = "llm"
    usage = "llm:http://HOST:PORT (an OpenAI-compatible API base URL)"
    own_options = frozenset({"model", "temperature", "max_tokens", "stop", "persona", "personas"})
    common_options = COMMON_OPTIONS - {"latency"}  # a user's think time is the engine's model
    agent = LlmUser

    def __init__(self, arg: str | None, scenarios: Any = None, options: dict[str, Any] | None = None) -> None:
        super().__init__(arg, scenarios, options)
        self.pack = getattr(scenarios, "pack", None)  # SGD scenarios: annotate the user's turns
        self.chat = ChatClient(self.pool, self.url, self.model, self.prices, decode_content)

    def read_options(self, options: dict[str, Any]) -> None:
        """Options model (required), temperature and max_tokens (left to the server when not given), stop."""
        self.model = model_option(options, "the llm user", "user")
        temperature = number_option(options, "temperature", -1.0, who="user")
        self.temperature = None if temperature < 0 else temperature
        max_tokens = number_option(options, "max_tokens", 0, integer=True, who="user")
        self.max_tokens = max_tokens or None
        self.stop = str(options.get("stop") or STOP)
        # clarify-or-answer tasks are played as personas (module docstring)
        self.personas = persona_cast(options.get("personas"), options.get("persona"))

    def endpoint(self, url: str) -> str:
        """The completions URL of the API base URL given."""
        return chat_url(url)

    def use_llm_cache(self, path: str) -> None:
        """``--llm-cache DIR``: answer from (and fill) the cache of model answers by request digest."""
        self.chat.use_cache(path)
