"""The agent server: any built-in agent served over HTTP (dialogsim/1 or OpenAI chat completions).

Both protocols are stateless, but a built-in agent keeps per-episode state (its tracked dialogue state,
say). The server keeps a bounded LRU cache of per-episode agent instances together with how far into
the conversation each has been fed; a request that continues exactly where its cached agent stopped
feeds it only the new messages. On a miss (a new episode, an evicted one, a resumed or replayed run,
another server process) a fresh agent is built and the request's conversation is replayed through
it, feeding back the logged tool results, before it answers the new turn. Built-in agents are
deterministic per seed, so a replayed agent is in the state the cached one would have been in.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import re
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec
from aiohttp import web

from ...engine.contracts import AgentReply, EpisodeContext, Observation, Scenario, ToolResult, ToolSpec
from ...engine.events import AgentTurn, Event, ToolCalled, ToolReturned, UserTurn
from ...engine.oplog import get_logger
from ...engine.seeding import stable_hash, stream
from .native import (AgentMessage, Message, NativeRequest, NativeResponse, PROTOCOL, ResponseToolCall, ToolCallMessage,
                     ToolResultMessage, UserMessage)
from .openai_chat import function_name

log = get_logger("server")

MAX_BODY = 4 * 1024 * 1024
# Header bounds handed to aiohttp's request parser (line and field length, number of headers).
HEADER_LIMITS = {"max_line_size": 8190, "max_field_size": 8190, "max_headers": 64}


@dataclass
class _Session:
    """A built-in agent of one episode and how much of its conversation it has been fed."""

    agent: Any
    pos: int = 0  # messages consumed
    digest: bytes = b""  # of the consumed messages, to check that a request continues this very conversation
    pending: int = 0  # tool calls the agent asked for and whose results it has not been given yet
    user: UserTurn | None = None
    events: list[Event] = field(default_factory=list)


def _event(m: Message, ep: str, seq: int) -> Event:
    if isinstance(m, UserMessage):
        return UserTurn(run="", ep=ep, seq=seq, t=0.0, wall=0, turn=m.turn, utterance=m.utterance,
                        frames=m.frames, end=m.end)
    if isinstance(m, AgentMessage):
        return AgentTurn(run="", ep=ep, seq=seq, t=0.0, wall=0, turn=m.turn, utterance=m.utterance,
                         frames=m.frames, state=m.state, end=m.end)
    if isinstance(m, ToolCallMessage):
        called = ToolCalled(run="", ep=ep, seq=seq, t=0.0, wall=0, call_id=m.call_id, service=m.service,
                            method=m.method, parameters=m.parameters)
        if m.executed_by is not None:
            called.executed_by = m.executed_by
        return called
    return ToolReturned(run="", ep=ep, seq=seq, t=0.0, wall=0, call_id=m.call_id, results=m.results,
                        error=m.error)


class AgentHost:
    """Answers stateless requests with stateful built-in agents (cache of sessions, replay on a miss)."""

    def __init__(self, make_agent: Callable[[], Any], max_sessions: int = 1024) -> None:
        self.make_agent = make_agent
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[str, _Session] = OrderedDict()
        self.stats = {"requests": 0, "hits": 0, "replays": 0}
        self._enc = msgspec.json.Encoder()

    async def answer(self, episode_id: str, messages: list[Message], tools: list[ToolSpec],
                     scenario: Scenario | None, seed: int | None) -> AgentReply:
        """The agent's answer to a conversation ending in a user turn or in tool results."""
        self.stats["requests"] += 1
        if not any(isinstance(m, UserMessage) for m in messages):
            raise ValueError("the conversation has no user turn")
        # Take the session out while answering: a concurrent duplicate (a client retry) replays instead.
        session = self.sessions.pop(episode_id, None)
        if (session is not None and 0 < session.pos < len(messages)
                and self._digest(messages[:session.pos]) == session.digest):
            self.stats["hits"] += 1
        else:
            self.stats["replays"] += session is not None or len(messages) > 1
            session = self._fresh(episode_id, tools, scenario, seed)
        reply = await self._feed(session, messages, episode_id)
        session.pos = len(messages)
        session.digest = self._digest(messages)
        session.pending = len(reply.tool_calls)
        self.sessions[episode_id] = session
        while len(self.sessions) > self.max_sessions:
            self.sessions.popitem(last=False)
        return reply

    def _digest(self, messages: list[Message]) -> bytes:
        return hashlib.blake2b(self._enc.encode(messages), digest_size=16).digest()

    def _fresh(self, episode_id: str, tools: list[ToolSpec], scenario: Scenario | None,
               seed: int | None) -> _Session:
        agent = self.make_agent()
        seed = stable_hash("served-agent", episode_id) if seed is None else seed
        scenario = scenario or Scenario(id=episode_id, kind="unknown")
        start = getattr(agent, "start", None)  # optional, as in the engine: an agent may only respond
        if start is not None:
            start(EpisodeContext(episode_id=episode_id, scenario=scenario, tools=tools, rng=stream(seed, "agent"),
                                 seed=seed))
        return _Session(agent=agent)

    async def _call(self, session: _Session, results: list[ToolResult]) -> AgentReply:
        assert session.user is not None
        out = session.agent.respond(Observation(user=session.user, history=list(session.events),
                                                tool_results=results, turn_index=session.user.turn + 1))
        if inspect.isawaitable(out):
            out = await out
        return out

    async def _feed(self, session: _Session, messages: list[Message], ep: str) -> AgentReply:
        """Feed the messages after ``session.pos``; the reply to the last of them is the answer."""
        reply: AgentReply | None = None
        group: list[ToolResult] = []
        executed: set[str] = set()  # calls the agent ran itself: their results answer no step of the engine's
        n = len(messages)
        for i in range(session.pos, n):
            m = messages[i]
            session.events.append(_event(m, ep, len(session.events)))
            reply = None
            if isinstance(m, UserMessage):
                session.user = session.events[-1]  # type: ignore[assignment]
                group = []
                reply = await self._call(session, [])
                session.pending = len(reply.tool_calls)
            elif isinstance(m, AgentMessage):
                session.pending, group = 0, []
            elif isinstance(m, ToolCallMessage) and m.executed_by is not None:
                executed.add(m.call_id)
            elif isinstance(m, ToolResultMessage) and m.call_id not in executed:
                group.append(ToolResult(call_id=m.call_id, results=m.results, error=m.error))
                nxt = messages[i + 1] if i + 1 < n else None
                # A step ends when the agent has all the results it asked for, or the tool run ends.
                if len(group) >= session.pending or not isinstance(nxt, (ToolCallMessage, ToolResultMessage)):
                    if session.user is not None:
                        reply = await self._call(session, group)
                        session.pending = len(reply.tool_calls)
                    group = []
        if reply is None:
            raise ValueError("the conversation must end with a user turn or tool results")
        return reply


def native_response(reply: AgentReply) -> NativeResponse:
    """An agent's reply as a dialogsim/1 response."""
    return NativeResponse(utterance=reply.utterance, frames=reply.frames, state=reply.state,
                          tagged_slots=reply.tagged_slots, end=reply.end,
                          usage=reply.usage, action=reply.action, executed=reply.executed, agent=reply.agent_name,
                          tool_calls=[ResponseToolCall(service=c.service, method=c.method, parameters=c.parameters,
                                                       call_id=c.call_id) for c in reply.tool_calls])


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


_native_decoder = msgspec.json.Decoder(NativeRequest)
_encoder = msgspec.json.Encoder()


def native_handler(host: AgentHost) -> Callable[[web.Request], Any]:
    """The POST handler of dialogsim/1."""

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            req = _native_decoder.decode(await request.read())
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return _error(400, f"invalid {PROTOCOL} request: {exc}")
        scenario = (Scenario(id=req.scenario.id, kind=req.scenario.kind, data=req.scenario.data)
                    if req.scenario else None)
        messages = list(req.messages)
        if not messages or not isinstance(messages[-1], (UserMessage, ToolResultMessage)):
            messages.append(req.user)  # a client that sent only the history before the new turn
        try:
            reply = await host.answer(req.episode_id, messages, req.tools, scenario, req.seed)
        except ValueError as exc:
            return _error(400, str(exc))
        except Exception as exc:  # the agent itself failed: a 500 the client may retry
            log.warning("agent failed", episode=req.episode_id, error=f"{type(exc).__name__}: {exc}")
            return _error(500, f"agent failed: {type(exc).__name__}")
        return web.Response(body=_encoder.encode(native_response(reply)), content_type="application/json")

    return handle


def _openai_conversation(body: dict[str, Any]) -> tuple[list[Message], list[ToolSpec], str]:
    """Chat messages and function tools as protocol messages, tool specs and the system prompt."""
    tools, names = [], {}
    for t in body.get("tools") or []:
        fn = t.get("function") or {}
        service, _, method = str(fn.get("name", "")).partition("__")
        spec = ToolSpec(service=service, method=method, description=fn.get("description", ""),
                        parameters=fn.get("parameters") or {})
        tools.append(spec)
        names[function_name(service, method)] = spec
    out: list[Message] = []
    system, turn = "", 0
    for m in body.get("messages") or []:
        role = m.get("role")
        if role in ("system", "developer"):
            system = str(m.get("content") or "")
        elif role == "user":
            out.append(UserMessage(turn=turn, utterance=str(m.get("content") or "")))
            turn += 1
        elif role == "assistant" and m.get("tool_calls"):
            for c in m["tool_calls"]:
                fn = c.get("function") or {}
                spec = names.get(fn.get("name", ""))
                service, method = ((spec.service, spec.method) if spec
                                   else str(fn.get("name", "")).partition("__")[::2])
                args = json.loads(fn.get("arguments") or "{}")
                out.append(ToolCallMessage(call_id=str(c.get("id", "")), service=service, method=method,
                                           parameters=args if isinstance(args, dict) else {}))
        elif role == "assistant":
            out.append(AgentMessage(turn=turn, utterance=str(m.get("content") or "")))
            turn += 1
        elif role == "tool":
            content = json.loads(m.get("content") or "{}")
            content = content if isinstance(content, dict) else {"results": content}
            out.append(ToolResultMessage(call_id=str(m.get("tool_call_id", "")), results=content.get("results"),
                                         error=content.get("error")))
        else:
            raise ValueError(f"unknown message role {role!r}")
    return out, tools, system


SILENT_CONTENT = "..."  # the content of an assistant turn for an agent reply with neither words nor tool calls


def openai_handler(host: AgentHost, served: str = "dialogsim") -> Callable[[web.Request], Any]:
    """The POST handler of /v1/chat/completions: a completion, or its chunks as server-sent events when the
    request says ``"stream": true``."""

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("the body is not a JSON object")
            messages, tools, system = _openai_conversation(body)
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(400, f"invalid chat completion request: {exc}")
        first = next((m.utterance for m in messages if isinstance(m, UserMessage)), "")
        # Chat requests have no episode id: the `user` field, else the system prompt and opening turn.
        episode_id = str(body.get("user") or hashlib.blake2b(
            f"{system}\x1f{first}".encode(), digest_size=8).hexdigest())
        scenario = Scenario(id=episode_id, kind="chat", data={"system": system})
        try:
            reply = await host.answer(episode_id, messages, tools, scenario, None)
        except ValueError as exc:
            return _error(400, str(exc))
        except Exception as exc:
            log.warning("agent failed", episode=episode_id, error=f"{type(exc).__name__}: {exc}")
            return _error(500, f"agent failed: {type(exc).__name__}")
        n_user = sum(isinstance(m, UserMessage) for m in messages)
        content = reply.utterance or None
        if not reply.tool_calls and not (content or "").strip():
            # an assistant message needs content or tool calls (clients reject a blank one): say so
            content = SILENT_CONTENT
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.call_id or f"call_{n_user}_{len(messages)}_{i}", "type": "function",
                 "function": {"name": function_name(c.service, c.method),
                              "arguments": json.dumps(c.parameters, sort_keys=True)}}
                for i, c in enumerate(reply.tool_calls)]
        usage = reply.usage
        head = {"id": f"chatcmpl-{episode_id}-{len(messages)}", "created": int(time.time()),
                "model": str(body.get("model") or served)}
        finish = "tool_calls" if reply.tool_calls else "stop"
        counts = {"prompt_tokens": usage.input_tokens if usage else 0,
                  "completion_tokens": usage.output_tokens if usage else 0,
                  "total_tokens": (usage.input_tokens + usage.output_tokens) if usage else 0}
        if body.get("stream") is True:
            options = body.get("stream_options")
            with_usage = isinstance(options, dict) and options.get("include_usage") is True
            return await stream_completion(request, head, message, finish, counts if with_usage else None)
        return web.json_response({**head, "object": "chat.completion",
                                  "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                  "usage": counts})

    return handle


_PIECE = re.compile(r"\s*\S+|\s+")  # a word with the space before it: how a model streams text


def completion_chunks(head: dict[str, Any], message: dict[str, Any], finish: str,
                      usage: dict[str, int] | None) -> list[dict[str, Any]]:
    """A completion as the chunks of a stream: the role, the content word by word, each tool call (its name,
    then its arguments), the finish reason, and the usage when asked for (``stream_options.include_usage``)."""
    head = {**head, "object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        out = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
        if usage is not None:
            out["usage"] = None
        return out

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in _PIECE.findall(message.get("content") or "")]
    for i, call in enumerate(message.get("tool_calls") or ()):
        chunks.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        chunks.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": call["function"]["arguments"]}}]}))
    chunks.append(chunk({}, finish))
    if usage is not None:
        chunks.append({**head, "choices": [], "usage": usage})
    return chunks


async def stream_completion(request: web.Request, head: dict[str, Any], message: dict[str, Any], finish: str,
                            usage: dict[str, int] | None) -> web.StreamResponse:
    """Send a completion as server-sent events in the chat-completion chunk format, ending with [DONE]."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    for chunk in completion_chunks(head, message, finish, usage):
        await resp.write(b"data: " + _encoder.encode(chunk) + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


HOST = web.AppKey("host", AgentHost)


def make_app(make_agent: Callable[[], Any], protocol: str = "native", *, max_body: int = MAX_BODY,
             max_sessions: int = 1024, path: str = "/", model: str = "dialogsim") -> web.Application:
    """An aiohttp app serving ``make_agent``'s agents: dialogsim/1 at ``path``, or chat completions with the
    model list (``GET /v1/models`` names ``model``; requests may name any model)."""
    host = AgentHost(make_agent, max_sessions=max_sessions)
    app = web.Application(client_max_size=max_body)
    app[HOST] = host
    if protocol == "native":
        app.router.add_post(path, native_handler(host))
    elif protocol == "openai":
        app.router.add_post("/v1/chat/completions", openai_handler(host, model))
        entry = {"id": model, "object": "model", "created": 0, "owned_by": "dialogsim"}

        async def models(_: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [entry]})

        async def one_model(request: web.Request) -> web.Response:
            if request.match_info["model"] != model:
                return _error(404, f"no model {request.match_info['model']!r} (this server has {model!r})")
            return web.json_response(entry)

        app.router.add_get("/v1/models", models)
        app.router.add_get("/v1/models/{model}", one_model)
    else:
        raise ValueError(f"unknown protocol {protocol!r}")

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"ok": True, "protocol": PROTOCOL if protocol == "native" else "openai"})

    app.router.add_get("/healthz", health)
    return app


async def start_site(app: web.Application, host: str = "127.0.0.1", port: int = 0,
                     ssl_context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, int]:
    """Start ``app`` on host:port (0 picks a free port) with bounded headers; returns the runner and port."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, **HEADER_LIMITS)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    return runner, runner.addresses[0][1]


async def serve_forever(app: web.Application, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Serve until cancelled, announcing the URL once the socket is bound."""
    runner, bound = await start_site(app, host, port)
    announce(f"listening on http://{host}:{bound}")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
