"""The HTTP agent speaking dialogsim's native protocol "dialogsim/1" (see docs/protocol.md).

The protocol is stateless: every request carries the episode id, the turn index, the scenario's tools,
the conversation so far, the new user turn and the results of the agent's last tool calls; so a
black-box agent can be resumed or forked at any turn. The message and payload Structs here are the
protocol's definition: docs/schemas/*.schema.json are generated from them (``python -m
dialogsim.agents.http.native docs/schemas``) and a test keeps the files in step.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Literal, Union

import msgspec
from msgspec import UNSET

from ...engine.contracts import (AgentReply, EpisodeContext, ExecutedCall, FaultReport, Observation, ToolCall, ToolResult,
                                 ToolSpec)
from ...engine.events import (Act, AgentTurn, DialogueState, Event, Frame, SlotSpan, ToolCalled, ToolReturned, Usage,
                              UserTurn)
from ...engine.memo import IdentityMemo
from .client import ProtocolError
from .factory import HttpAgentFactory

PROTOCOL = "dialogsim/1"

# -- the protocol's messages ------------------------------------------------------------------------


class UserMessage(msgspec.Struct, tag_field="role", tag="user", kw_only=True, omit_defaults=True):
    """A user turn: utterance, and the user's acts and slot spans per service when the simulator has them."""

    turn: int
    utterance: str
    frames: list[Frame] = []
    end: bool = False


class AgentMessage(msgspec.Struct, tag_field="role", tag="agent", kw_only=True, omit_defaults=True):
    """An agent turn as it was logged: utterance, acts, and the state the agent reported."""

    turn: int
    utterance: str
    frames: list[Frame] = []
    state: dict[str, DialogueState] | None = None
    end: bool = False


class ToolCallMessage(msgspec.Struct, tag_field="role", tag="tool_call", kw_only=True, omit_defaults=True):
    """A tool call the agent made (an SGD service intent) and the engine ran; ``executed_by`` "agent" when the
    agent ran it itself and reported it (``executed`` in its response)."""

    call_id: str
    service: str
    method: str
    parameters: dict[str, Any] = {}
    executed_by: str | None = None


class ToolResultMessage(msgspec.Struct, tag_field="role", tag="tool_result", kw_only=True, omit_defaults=True):
    """What a tool call gave back: result rows, or an error message."""

    call_id: str
    results: list[dict[str, Any]] | None = None
    error: str | None = None


Message = Union[UserMessage, AgentMessage, ToolCallMessage, ToolResultMessage]


class ScenarioInfo(msgspec.Struct, kw_only=True):
    """The scenario of the episode (id, kind, data), so that a server can run a schema-guided agent."""

    id: str
    kind: str
    data: dict[str, Any] = {}


class NativeRequest(msgspec.Struct, kw_only=True):
    """One request of protocol dialogsim/1: everything the agent needs to answer, with no server state."""

    protocol: Literal["dialogsim/1"] = "dialogsim/1"
    episode_id: str
    turn_index: int  # the `turn` number the agent's answer will have (the user turn's + 1)
    step: int = 0  # tool calls already made for this turn: 0 on its first request
    tools: list[ToolSpec] = []
    messages: list[Message] = []  # the conversation so far, up to and including `user` and this turn's tools
    user: UserMessage
    tool_results: list[ToolResult] = []  # results of the calls in the agent's previous answer
    scenario: ScenarioInfo | None = None
    seed: int | None = None  # the agent's episode seed, for agents that draw random numbers


class ResponseToolCall(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A tool call the agent asks for: service, method (intent), parameters, optional call id."""

    service: str
    method: str
    parameters: dict[str, Any] = {}
    call_id: str = ""


class NativeResponse(msgspec.Struct, kw_only=True):
    """The agent's answer: tool calls to run, or its turn (utterance, acts, state, end flag), and usage; with
    either, the tool calls it ran itself for this answer and what they gave back (``executed``: logged before
    the answer, no world called)."""

    protocol: Literal["dialogsim/1"] = "dialogsim/1"
    utterance: str = ""
    acts: list[Act] = []  # shorthand: acts of the user's active service when frames are not given
    frames: list[Frame] = []
    tool_calls: list[ResponseToolCall] = []
    state: dict[str, DialogueState] | None = None
    tagged_slots: dict[str, list[SlotSpan]] | None = None
    end: bool = False
    usage: Usage | None = None
    action: str | None = None
    executed: list[ExecutedCall] = []
    agent: str | None = None  # the (sub-)agent that answered, if the agent names it


_request_encoder = msgspec.json.Encoder()
_PROTOCOL = PROTOCOL.encode()
_response_decoder = msgspec.json.Decoder(NativeResponse)


def decode_response(data: bytes) -> NativeResponse:
    """Decode and validate a response body; any breach of the protocol is a ProtocolError saying where."""
    try:
        response = _response_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"invalid dialogsim/1 response: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"response is not JSON: {exc}") from None
    if not response.tool_calls and not response.utterance.strip() and not response.end:
        raise ProtocolError("invalid dialogsim/1 response: empty utterance without tool_calls or end")
    return response


def protocol_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schemas of the request and the response, keyed by file name."""
    out = {}
    for name, cls in (("native-request", NativeRequest), ("native-response", NativeResponse)):
        schema = msgspec.json.schema(cls)
        if cls is NativeResponse:
            # what decode_response enforces beyond the types: a response must do something
            schema["$defs"]["NativeResponse"]["anyOf"] = [
                {"required": ["tool_calls"], "properties": {"tool_calls": {"minItems": 1}}},
                {"required": ["utterance"], "properties": {"utterance": {"pattern": "\\S"}}},
                {"required": ["end"], "properties": {"end": {"const": True}}}]
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                  "$id": f"https://dialogsim.dev/schemas/{name}.schema.json",
                  "title": f"{PROTOCOL} {name.split('-')[1]}", **schema}
        out[f"{name}.schema.json"] = schema
    return out


# -- history -> messages (shared by both HTTP agents) ----------------------------------------------


def user_message(turn: UserTurn) -> UserMessage:
    """A logged user turn as a protocol message: its acts and slot spans, never the user's true state, and no
    frames at all when its acts were read from its words (a model-driven user's): the agent reads the words."""
    # the true state is the answer key the agent's tracked state is scored against (dst_metrics)
    if turn.inferred is True:
        return UserMessage(turn=turn.turn, utterance=turn.utterance, end=turn.end)
    frames = [Frame(service=f.service, actions=f.actions, slots=f.slots) if f.state is not None else f
              for f in turn.frames]
    return UserMessage(turn=turn.turn, utterance=turn.utterance, frames=frames, end=turn.end)


def agent_message(turn: AgentTurn) -> AgentMessage:
    """A logged agent turn as a protocol message."""
    return AgentMessage(turn=turn.turn, utterance=turn.utterance, frames=turn.frames, state=turn.state,
                        end=turn.end)


def event_message(event: Event) -> Message | None:
    """A logged event as a protocol message (None for events that are not part of the conversation)."""
    if isinstance(event, UserTurn):
        return user_message(event)
    if isinstance(event, AgentTurn):
        return agent_message(event)
    if isinstance(event, ToolCalled):
        return ToolCallMessage(call_id=event.call_id, service=event.service, method=event.method,
                               parameters=event.parameters,
                               executed_by=None if event.executed_by is UNSET else event.executed_by)
    if isinstance(event, ToolReturned):
        return ToolResultMessage(call_id=event.call_id, results=event.results, error=event.error)
    return None


def missing_messages(user: UserTurn, tool_results: list[ToolResult], last_calls: list[ToolCall], users: set[int],
                     called: set[str], returned: set[str]) -> list[Message]:
    """What the history lacks of the current step: the new user turn, the agent's calls and their results."""
    out: list[Message] = []
    if user.turn not in users:
        out.append(user_message(user))
    for i, result in enumerate(tool_results):
        if result.call_id in returned:
            continue
        if result.call_id not in called:
            call = next((c for c in last_calls if c.call_id == result.call_id), None)
            if call is None and i < len(last_calls):
                call = last_calls[i]
            if call is not None:
                out.append(ToolCallMessage(call_id=result.call_id, service=call.service, method=call.method,
                                           parameters=call.parameters))
        out.append(ToolResultMessage(call_id=result.call_id, results=result.results, error=result.error))
    return out


def history_messages(history: list[Event], user: UserTurn, tool_results: list[ToolResult],
                     last_calls: list[ToolCall]) -> list[Message]:
    """The conversation so far as messages, ending with ``user`` and this turn's tool calls and results.

    The history is taken as logged; whatever it lacks of the current step (the new user turn, the
    calls the agent just made and their results) is appended, so the messages are complete whether
    or not the engine has already put those events in the history.
    """
    messages = [m for m in map(event_message, history) if m is not None]
    users = {m.turn for m in messages if isinstance(m, UserMessage)}
    called = {m.call_id for m in messages if isinstance(m, ToolCallMessage)}
    returned = {m.call_id for m in messages if isinstance(m, ToolResultMessage)}
    return messages + missing_messages(user, tool_results, last_calls, users, called, returned)


class Transcript:
    """An episode's messages, each encoded once: a request re-encodes only what is new since the last.

    The engine's history only grows during an episode; if it is ever shorter or different than what
    was seen, the transcript starts over, so the result always equals ``history_messages``.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything seen."""
        self.count = 0  # history events consumed
        self.last: Event | None = None  # the last of them, to notice a history that is not ours
        self.raw: list[bytes] = []
        self.user_raw: bytes | None = None  # the encoding of the last user turn seen, for ``user``
        self.user: UserTurn | None = None
        self.calls_since_user = 0
        self.users: set[int] = set()
        self.called: set[str] = set()
        self.returned: set[str] = set()

    def messages(self, history: list[Event], user: UserTurn, tool_results: list[ToolResult],
                 last_calls: list[ToolCall]) -> tuple[list[bytes], int, bytes]:
        """The encoded messages of ``history_messages``, the request's ``step`` and the encoded ``user``.

        The list returned may be this transcript's own: use it before the next call.
        """
        n = self.count
        if len(history) < n or (n and history[n - 1] is not self.last):
            self.reset()
            n = 0
        encode = _request_encoder.encode
        for event in history[n:]:
            kind = type(event)
            if kind is AgentTurn:  # the most frequent kinds first, without event_message's isinstance chain
                raw = encode(agent_message(event))
            elif kind is UserTurn:
                raw = encode(user_message(event))
                self.users.add(event.turn)
                self.calls_since_user = 0
                self.user, self.user_raw = event, raw
            else:  # tool calls and results; other events are not messages
                m = event_message(event)
                if m is None:
                    continue
                raw = encode(m)
                if isinstance(m, ToolCallMessage):
                    self.called.add(m.call_id)
                    self.calls_since_user += 1
                elif isinstance(m, ToolResultMessage):
                    self.returned.add(m.call_id)
            self.raw.append(raw)
        self.count = len(history)
        self.last = history[-1] if history else None
        user_raw = self.user_raw if user is self.user else encode(user_message(user))
        if not tool_results and user.turn in self.users:
            return self.raw, self.calls_since_user, user_raw  # the usual case: the history holds it all
        extra = missing_messages(user, tool_results, last_calls, self.users, self.called, self.returned)
        step = self.calls_since_user
        for m in extra:
            if isinstance(m, UserMessage):
                step = 0
            elif isinstance(m, ToolCallMessage):
                step += 1
        return self.raw + [encode(m) for m in extra], step, user_raw


def calls_this_turn(messages: list[Message]) -> int:
    """Tool calls after the last user message: the request's ``step``, derived from the log alone so
    that it is the same after a resume."""
    n = 0
    for m in reversed(messages):
        if isinstance(m, UserMessage):
            break
        n += isinstance(m, ToolCallMessage)
    return n


class TurnMeter:
    """Token usage and cost summed over the model calls of one turn, reported on the spoken reply.

    Tool-call replies carry no usage, so the total is right whether the engine sums replies or not.
    """

    def __init__(self, price_in: float | None, price_out: float | None) -> None:
        self.price_in = price_in
        self.price_out = price_out
        self.input_tokens = 0
        self.output_tokens = 0
        self.seen = False

    def add(self, input_tokens: int, output_tokens: int) -> None:
        """Count one model call."""
        self.input_tokens += max(0, int(input_tokens))
        self.output_tokens += max(0, int(output_tokens))
        self.seen = True

    def take(self) -> tuple[Usage | None, float | None]:
        """The turn's usage and cost (None when unknown), and reset for the next turn."""
        if not self.seen:
            return None, None
        usage = Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)
        cost = None
        if self.price_in is not None or self.price_out is not None:
            cost = round(self.input_tokens / 1000 * (self.price_in or 0.0)
                         + self.output_tokens / 1000 * (self.price_out or 0.0), 10)
        self.input_tokens = self.output_tokens = 0
        self.seen = False
        return usage, cost


# -- the agent -------------------------------------------------------------------------------------


_NO_CALLS: list[ToolCall] = []  # the last calls of an agent whose last answer made none (never changed)


class NativeHttpAgent:
    """One episode of a live agent behind a dialogsim/1 endpoint."""

    deterministic = False

    def __init__(self, factory: NativeAgentFactory) -> None:
        self._f = factory
        self._meter: TurnMeter | None = None  # made when the server first reports usage
        self._last_calls: list[ToolCall] = _NO_CALLS
        self._transcript = Transcript()
        self._turn = -1
        self._elapsed = 0.0

    def start(self, ctx: EpisodeContext) -> None:
        """Remember the episode's context and encode its fixed parts; nothing is sent until the first turn."""
        self.ctx = ctx
        f, enc, scenario, data = self._f, _request_encoder.encode, ctx.scenario, ctx.scenario.data
        # A request is NativeRequest's JSON, field by field in its order (a test checks the bytes against
        # msgspec's encoding): the parts fixed for the episode are encoded here, once; the tools and the
        # scenario once per run when episodes share them (each episode's view of a scenario is a new
        # object, but made of the scenario's own objects).
        self._head = b'{"protocol":"%s","episode_id":%s,"turn_index":' % (_PROTOCOL, enc(ctx.episode_id))
        self._tools = f.shared.get((ctx.tools,), lambda: b',"tools":%s,"messages":[' % enc(ctx.tools))

        def scenario_part() -> bytes:  # built only when these objects were not seen before
            info = ScenarioInfo(id=scenario.id, kind=scenario.kind, data=data) if f.send_scenario else None
            return b',"scenario":%s' % enc(info)

        self._scenario = f.shared.get((scenario.id, scenario.kind, *data, *data.values()), scenario_part)
        self._seed = b',"seed":%s}' % enc(ctx.seed)

    def request(self, obs: Observation) -> bytes:
        """The body of the request for ``obs`` (the next step of the current turn)."""
        turn_index = obs.user.turn + 1
        if turn_index != self._turn:
            self._turn, self._elapsed = turn_index, 0.0
        messages, step, user = self._transcript.messages(obs.history, obs.user, obs.tool_results, self._last_calls)
        results = _request_encoder.encode(obs.tool_results) if obs.tool_results else b"[]"
        return b'%s%d,"step":%d%s%s],"user":%s,"tool_results":%s%s%s' % (
            self._head, turn_index, step, self._tools, b",".join(messages), user, results, self._scenario, self._seed)

    def respond(self, obs: Observation) -> asyncio.Future[AgentReply]:
        """POST the conversation so far: a future of the reply (retrying per the settings).

        A future rather than a coroutine, so that the engine waits on the pool's answer directly,
        without a task per request.
        """
        f = self._f
        body = self.request(obs)
        self._obs = obs
        if f.measured_latency:
            self._sent = time.perf_counter()
        return f.pool.submit(f.url, body, None, self.ctx.rng, decode_response, self._reply)

    def _reply(self, response: NativeResponse, faults: list[FaultReport], seconds: float) -> AgentReply:
        """Turn a decoded answer into the agent's reply (run by the pool when the answer arrives)."""
        if self._f.measured_latency:
            self._elapsed += time.perf_counter() - self._sent
        if response.usage is not None:
            if self._meter is None:
                self._meter = TurnMeter(*self._f.prices)
            self._meter.add(response.usage.input_tokens, response.usage.output_tokens)
        if response.tool_calls:
            self._last_calls = [ToolCall(service=c.service, method=c.method, parameters=c.parameters,
                                         call_id=c.call_id) for c in response.tool_calls]
            return AgentReply(tool_calls=self._last_calls, faults=faults, executed=response.executed)
        self._last_calls = _NO_CALLS
        frames = response.frames
        if not frames and response.acts:
            user = self._obs.user
            frames = [Frame(service=user.frames[0].service if user.frames else "", actions=response.acts)]
        usage, cost = self._meter.take() if self._meter is not None else (None, None)
        reply = AgentReply(utterance=response.utterance, frames=frames, state=response.state,
                           tagged_slots=response.tagged_slots, end=response.end,
                           usage=usage, cost=cost, action=response.action, faults=faults,
                           latency=self._elapsed if self._f.measured_latency else None)
        if response.executed:
            reply.executed = response.executed
        if response.agent is not None:
            reply.agent_name = response.agent
        return reply


class NativeAgentFactory(HttpAgentFactory):
    """``--agent http:URL``: a live agent speaking dialogsim/1 (the factory shape is ``HttpAgentFactory``'s)."""

    protocol = "http"
    usage = "http:http://HOST:PORT/PATH"
    own_options = frozenset({"send_scenario"})
    extra_headers = {"User-Agent": "dialogsim/" + PROTOCOL.split("/")[1]}
    agent = NativeHttpAgent

    def read_options(self, options: dict[str, Any]) -> None:
        """Option send_scenario (default true): whether requests carry the scenario's id, kind and data."""
        self.send_scenario = str(options.get("send_scenario", "true")).lower() not in ("0", "false", "no", "off")
        self.shared = IdentityMemo()  # encoded tools and scenarios, for the episodes that share them


def _write_schemas(folder: str) -> None:
    for name, schema in protocol_schemas().items():
        Path(folder, name).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    _write_schemas(sys.argv[1] if len(sys.argv) > 1 else "docs/schemas")
