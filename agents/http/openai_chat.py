"""The HTTP agent for any OpenAI-compatible ``/v1/chat/completions`` endpoint, with the tool-call loop.

The scenario's service intents become function tools named ``Service__Intent``; the conversation is
sent as chat messages (a system prompt naming the services, user and assistant turns, assistant
tool_calls and ``tool`` messages with the results). The API key comes from the environment variable
named by option ``api_key_env`` and only ever travels in the Authorization header.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from typing import Any

import msgspec

from ...engine.contracts import AgentReply, EpisodeContext, ModelCall, Observation, ToolCall, ToolResult, ToolSpec
from ...engine import registry
from ...engine.events import Event, UserTurn
from .chat import ChatClient, canonical_request, sum_calls
from .client import number_option
from .factory import HttpAgentFactory, model_option
from .native import (AgentMessage, Message, ToolCallMessage, ToolResultMessage, UserMessage, event_message,
                     missing_messages)

_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")
_encode = msgspec.json.Encoder().encode


def function_name(service: str, method: str) -> str:
    """The function name of a tool: ``Service__Intent``, made to fit OpenAI's ``^[A-Za-z0-9_-]{1,64}$``."""
    name = _NAME_OK.sub("_", f"{service}__{method}")
    if len(name) > 64:
        name = name[:55] + "_" + hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
    return name


def function_tools(tools: list[ToolSpec]) -> tuple[list[dict[str, Any]], dict[str, ToolSpec]]:
    """The ``tools`` array of a request and the map from function name back to the tool."""
    out, names = [], {}
    for spec in tools:
        name = function_name(spec.service, spec.method)
        names[name] = spec
        params = spec.parameters or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": {
            "name": name, "description": spec.description or f"{spec.method} on {spec.service}",
            "parameters": params}})
    return out, names


def system_prompt(tools: list[ToolSpec]) -> str:
    """A short instruction listing the services and their intents."""
    services: dict[str, list[str]] = {}
    for spec in tools:
        services.setdefault(spec.service, []).append(spec.method)
    lines = ["You are a helpful assistant that serves users through these services:"]
    lines += [f"- {service}: {', '.join(methods)}" for service, methods in services.items()]
    lines.append("Call the functions to look things up and to make transactions; ask the user for any "
                 "required information you lack, and confirm the details before a transaction.")
    if not services:
        lines = ["You are a helpful assistant."]
    return "\n".join(lines)


def chat_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Protocol messages as chat messages; consecutive tool calls form one assistant message."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        _add_chat(out, m)
    return out


def _add_chat(out: list[dict[str, Any]], m: Message, shared: int = 0) -> None:
    """Append ``m`` to ``out`` as chat; a tool call joins the assistant tool-call message before it, which
    is copied first when it is one of the first ``shared`` entries (those belong to a ChatTranscript)."""
    if isinstance(m, UserMessage):
        out.append({"role": "user", "content": m.utterance})
    elif isinstance(m, AgentMessage):
        out.append({"role": "assistant", "content": m.utterance})
    elif isinstance(m, ToolCallMessage):
        call = {"id": m.call_id, "type": "function", "function": {
            "name": function_name(m.service, m.method), "arguments": json.dumps(m.parameters, sort_keys=True)}}
        last = out[-1]
        if last["role"] == "assistant" and last.get("tool_calls"):
            if len(out) <= shared:
                last = out[-1] = {**last, "tool_calls": list(last["tool_calls"])}
            last["tool_calls"].append(call)
        else:
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif isinstance(m, ToolResultMessage):
        body = {"error": m.error} if m.error is not None else {"results": m.results or []}
        out.append({"role": "tool", "tool_call_id": m.call_id, "content": json.dumps(body, sort_keys=True)})


class ChatTranscript:
    """An episode's chat messages, each converted once: a request converts only what is new since the last.

    The result always equals ``chat_messages(system, history_messages(...))`` (a test checks it): a history
    that is shorter or different than the one seen starts the transcript over. A late SGD turn's messages
    cost a few us instead of ~50 us rebuilt from the whole history.
    """

    def __init__(self, system: str) -> None:
        self.system = system
        self.reset()

    def reset(self) -> None:
        """Forget everything seen."""
        self.count = 0  # history events consumed
        self.last: Event | None = None  # the last of them, to notice a history that is not ours
        self.chat: list[dict[str, Any]] = [{"role": "system", "content": self.system}]
        self.users: set[int] = set()
        self.called: set[str] = set()
        self.returned: set[str] = set()

    def messages(self, history: list[Event], user: UserTurn, tool_results: list[ToolResult],
                 last_calls: list[ToolCall]) -> list[dict[str, Any]]:
        """The chat messages of the conversation so far, ending with ``user`` and this turn's tool steps."""
        n = self.count
        if len(history) < n or (n and history[n - 1] is not self.last):
            self.reset()
            n = 0
        for event in history[n:]:
            m = event_message(event)
            if m is None:
                continue
            if isinstance(m, UserMessage):
                self.users.add(m.turn)
            elif isinstance(m, ToolCallMessage):
                self.called.add(m.call_id)
            elif isinstance(m, ToolResultMessage):
                self.returned.add(m.call_id)
            _add_chat(self.chat, m)
        self.count = len(history)
        self.last = history[-1] if history else None
        out = list(self.chat)
        for m in missing_messages(user, tool_results, last_calls, self.users, self.called, self.returned):
            _add_chat(out, m, shared=len(self.chat))
        return out


# -- the agent -------------------------------------------------------------------------------------


class OpenAIChatAgent:
    """One episode of a model behind an OpenAI-compatible chat completions endpoint."""

    deterministic = False

    def __init__(self, factory: OpenAIAgentFactory) -> None:
        self._f = factory
        self._turn_calls: list[ModelCall] = []  # the model calls of the turn so far (their usage is the turn's)
        self._last_calls: list[ToolCall] = []
        self._turn = -1
        self._elapsed = 0.0

    def start(self, ctx: EpisodeContext) -> None:
        """Build the function tools and the system prompt of the episode."""
        self.ctx = ctx
        tools, self._names = function_tools(ctx.tools)
        # The tools are the same in every request of the episode: encoded once (a few kB for SGD services),
        # as canonical JSON, since the request they go into is digested as such.
        self._tools = msgspec.Raw(canonical_request(tools)) if tools else None
        self._chat = ChatTranscript(self._f.system_prompt or system_prompt(ctx.tools))

    def respond(self, obs: Observation) -> AgentReply | asyncio.Future[AgentReply]:
        """Send the chat so far: the reply, or a future of it (tool_calls go to the engine, content is the turn).

        The reply itself when the episode's record or the llm cache answers (agents/http/chat.py); else a
        future rather than a coroutine, so that the engine waits on the pool's answer directly, without a
        task per request.
        """
        f = self._f
        if obs.user.turn != self._turn:
            self._turn, self._elapsed = obs.user.turn, 0.0
        messages = self._chat.messages(obs.history, obs.user, obs.tool_results, self._last_calls)
        # `user` (OpenAI's end-user id) carries the episode id, so a server can keep per-episode state.
        body: dict[str, Any] = {"model": f.model, "messages": messages,
                                "user": self.ctx.episode_id}
        if self._tools is not None:
            body["tools"] = self._tools
        if f.temperature is not None:
            body["temperature"] = f.temperature
        if f.measured_latency:
            self._sent = time.perf_counter()
        return f.chat.call(body, self.ctx.rng, self.ctx.recorded, self._reply)

    def _reply(self, call: ModelCall) -> AgentReply:
        """Turn the model's answer into the agent's reply (run by the pool when the answer arrives)."""
        f = self._f
        if f.measured_latency:
            self._elapsed += time.perf_counter() - self._sent
        self._turn_calls.append(call)
        if call.tool_calls:
            calls = []
            for i, c in enumerate(call.tool_calls):
                spec = self._names.get(c.name)
                service, method = (spec.service, spec.method) if spec is not None else c.name.partition("__")[::2]
                calls.append(ToolCall(service=service, method=method, call_id=c.id or f"call_{i}",
                                      parameters=json.loads(c.arguments or "{}")))
            self._last_calls = calls
            return AgentReply(tool_calls=calls, model_calls=[call])
        self._last_calls = []
        usage, cost = sum_calls(self._turn_calls)
        self._turn_calls = []
        return AgentReply(utterance=(call.content or "").strip(), usage=usage, cost=cost, model_calls=[call],
                          latency=self._elapsed if f.measured_latency else None, agent_name=f.name)


def chat_url(base: str) -> str:
    """The completions URL of a base URL (``http://h:p``, ``.../v1`` or the full path)."""
    base, sep, query = base.partition("?")
    base = base.rstrip("/")
    if not base.endswith("/chat/completions"):
        base += "/chat/completions" if base.endswith("/v1") else "/v1/chat/completions"
    return base + sep + query


class OpenAIAgentFactory(HttpAgentFactory):
    """``--agent openai:URL``: a model behind chat completions (the factory shape is ``HttpAgentFactory``'s)."""

    protocol = "openai"
    usage = "openai:http://HOST:PORT (the API base URL)"
    own_options = frozenset({"model", "temperature", "system_prompt", "name"})
    agent = OpenAIChatAgent

    def __init__(self, arg: str | None, scenarios: Any = None, options: dict[str, Any] | None = None) -> None:
        super().__init__(arg, scenarios, options)
        self.chat = ChatClient(self.pool, self.url, self.model, self.prices)

    def use_llm_cache(self, path: str) -> None:
        """``--llm-cache DIR``: answer from (and fill) the cache of model answers by request digest."""
        self.chat.use_cache(path)

    def read_options(self, options: dict[str, Any]) -> None:
        """Options model (required), temperature (left to the server when not given), system_prompt, and name (the
        agent's name in traces and trajectories, as a dialogsim/1 agent gives its own)."""
        self.model = model_option(options)
        temperature = number_option(options, "temperature", -1.0)
        self.temperature = None if temperature < 0 else temperature
        self.system_prompt = options.get("system_prompt") or None
        self.name = str(options["name"]) if options.get("name") else None

    def endpoint(self, url: str) -> str:
        """The completions URL of the API base URL given."""
        return chat_url(url)


def make_factory(arg: str | None, scenarios: Any = None, options: dict[str, Any] | None = None) -> Any:
    """``--agent openai:URL``: a chat model; a scenario set whose episodes a chat model plays in a way of its
    own names that agent (``chat_agent``, a registered agent name: the clarify-or-answer tasks' action prompts)."""
    own = getattr(scenarios, "chat_agent", None)
    if own:
        return registry.lookup("agent", own)(arg, scenarios, options)
    return OpenAIAgentFactory(arg, scenarios, options)
