"""Chat-completions calls with their record, shared by the OpenAI agent and the model-driven user.

A call's request body is encoded as canonical JSON (sorted keys, no spaces, no ``stream`` field) and named by
its digest, ``sha256:`` and the hex SHA-256 of those bytes; headers (the API key) are never part of it. The
answer comes from the first that has it: the episode's record (``EpisodeContext.recorded``: the calls its log
already holds, so a resumed episode never asks the model again for its logged part), the llm cache
(``--llm-cache DIR``), then the network, through the factory's ``HttpPool`` with its timeouts and retries. The
request says ``"stream": false``; a server that streams anyway is read as server-sent events and its chunks
assembled, and a server that refuses the field (400) is asked once more without it, and from then on never
sent it. Every answer becomes a ``ModelCall`` that the participant's reply carries to the log (docs/llm.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

import msgspec

from ...engine.contracts import FaultReport, ModelCall
from ...engine.errors import UserError
from ...engine.events import ModelToolCall, Usage
from ...engine.oplog import get_logger
from .client import HttpPool, ProtocolError

R = TypeVar("R")
log = get_logger("chat")

_canonical = msgspec.json.Encoder(order="sorted")
_NO_STREAM = b',"stream":false}'


def canonical_request(body: Mapping[str, Any]) -> bytes:
    """The request body as canonical JSON: sorted keys, no spaces (the bytes its digest is taken of)."""
    return _canonical.encode(body)


def request_digest(canonical: bytes) -> str:
    """The digest naming a request: ``sha256:`` and the hex SHA-256 of its canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


# -- the answer ------------------------------------------------------------------------------------


class _Function(msgspec.Struct):
    name: str
    arguments: str = "{}"


class _ChatToolCall(msgspec.Struct):
    function: _Function
    id: str = ""
    type: str = "function"


class _ChatMessage(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ChatToolCall] | None = None


class _Choice(msgspec.Struct):
    message: _ChatMessage
    finish_reason: str | None = None


class _ChatUsage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ChatCompletion(msgspec.Struct):
    """The parts of a chat completion a participant reads (unknown fields are ignored)."""

    choices: list[_Choice]
    usage: _ChatUsage | None = None


class _DeltaFunction(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _DeltaToolCall(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _DeltaFunction | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_DeltaToolCall] | None = None


class _ChunkChoice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_ChunkChoice] = []
    usage: _ChatUsage | None = None


_completion_decoder = msgspec.json.Decoder(ChatCompletion)
_chunk_decoder = msgspec.json.Decoder(_Chunk)


def assemble_stream(data: bytes) -> ChatCompletion:
    """A completion from a server-sent-events body of chat-completion chunks (``data: {...}`` lines up to
    ``data: [DONE]``): the content pieces joined, each tool call's pieces joined by index."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: _ChatUsage | None = None
    done = False
    for line in data.splitlines():
        if not line.startswith(b"data:"):
            continue  # comments, event names, ids, blank separators
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            break
        try:
            chunk = _chunk_decoder.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ProtocolError(f"invalid chat completion chunk: {exc}") from None
        usage = chunk.usage or usage
        for choice in chunk.choices[:1]:
            finish = choice.finish_reason or finish
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                content.append(delta.content)
            for piece in delta.tool_calls or ():
                call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = piece.id or call["id"]
                if piece.function is not None:
                    call["name"] += piece.function.name or ""
                    call["arguments"] += piece.function.arguments or ""
    if not done and finish is None:
        raise ProtocolError("chat completion stream ended before its last chunk")
    tool_calls = [_ChatToolCall(function=_Function(name=c["name"], arguments=c["arguments"] or "{}"), id=c["id"])
                  for _, c in sorted(calls.items())]
    message = _ChatMessage(content="".join(content) if content else None, tool_calls=tool_calls or None)
    return ChatCompletion(choices=[_Choice(message=message, finish_reason=finish)], usage=usage)


def decode_completion(data: bytes, need_content: bool = False) -> ChatCompletion:
    """Decode and check a completion (JSON, or a stream of chunks); a wrong shape or an unusable answer is a
    ProtocolError (retried: a resample may fix it). ``need_content``: an answer without words is unusable."""
    head = data.lstrip()[:6]
    if head.startswith((b"data:", b":", b"event:", b"id:")):
        completion = assemble_stream(data)
    else:
        try:
            completion = _completion_decoder.decode(data)
        except msgspec.ValidationError as exc:
            raise ProtocolError(f"invalid chat completion: {exc}") from None
        except msgspec.DecodeError as exc:
            raise ProtocolError(f"chat completion is not JSON: {exc}") from None
    if not completion.choices:
        raise ProtocolError("invalid chat completion: no choices")
    message = completion.choices[0].message
    for call in message.tool_calls or []:
        try:
            args = json.loads(call.function.arguments or "{}")
        except ValueError:
            raise ProtocolError(f"tool call {call.function.name!r} has arguments that are not JSON") from None
        if not isinstance(args, dict):
            raise ProtocolError(f"tool call {call.function.name!r} has arguments that are not a JSON object")
    if need_content and not (message.content or "").strip():
        raise ProtocolError("chat completion has no content")
    if not message.tool_calls and not (message.content or "").strip():
        raise ProtocolError("chat completion has neither content nor tool_calls")
    return completion


def decode_content(data: bytes) -> ChatCompletion:
    """``decode_completion`` for a participant that needs words (a user)."""
    return decode_completion(data, need_content=True)


# -- the llm cache ---------------------------------------------------------------------------------


class CachedAnswer(msgspec.Struct, kw_only=True):
    """One model answer as the llm cache keeps it (the request is named by its digest only)."""

    digest: str
    model: str
    content: str | None = None
    tool_calls: list[ModelToolCall] = []
    finish_reason: str | None = None
    usage: Usage | None = None


_cached_decoder = msgspec.json.Decoder(CachedAnswer)
_encode = msgspec.json.Encoder().encode


class LlmCache:
    """``--llm-cache DIR``: model answers by request digest, one file each (``ab/abcdef....json``), written
    atomically (a temporary file renamed), so concurrent runs may share a directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--llm-cache {path}: cannot use it as a directory ({exc.strerror or exc})") from None

    def _file(self, digest: str) -> Path:
        name = digest.partition(":")[2] or digest
        return self.path / name[:2] / f"{name}.json"

    def get(self, digest: str) -> CachedAnswer | None:
        """The answer cached for ``digest``, or None (a file that cannot be read counts as none, with a warning)."""
        file = self._file(digest)
        try:
            answer = _cached_decoder.decode(file.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.warning("llm cache entry unreadable, asking the model", file=str(file), error=str(exc)[:200])
            return None
        return answer if answer.digest == digest else None

    def put(self, answer: CachedAnswer) -> None:
        """Keep ``answer`` under its digest."""
        file = self._file(answer.digest)
        file.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_encode(answer))
            os.replace(tmp, file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


# -- the client ------------------------------------------------------------------------------------


def price(usage: Usage | None, prices: tuple[float | None, float | None]) -> float | None:
    """The cost of ``usage`` at ``prices`` (USD per 1K input and output tokens); None without a price."""
    p_in, p_out = prices
    if p_in is None and p_out is None:
        return None
    if usage is None:
        return 0.0
    return round(usage.input_tokens / 1000 * (p_in or 0.0) + usage.output_tokens / 1000 * (p_out or 0.0), 10)


def sum_calls(calls: list[ModelCall]) -> tuple[Usage | None, float | None]:
    """A turn's usage and cost from its model calls (None when none reported any)."""
    usage = cost = None
    for call in calls:
        if call.usage is not None:
            usage = usage or Usage()
            usage.input_tokens += call.usage.input_tokens
            usage.output_tokens += call.usage.output_tokens
        if call.cost is not None:
            cost = round((cost or 0.0) + call.cost, 10)
    return usage, cost


class ChatClient:
    """A factory's way to its model: one per run and role, shared by the episodes (see the module docstring)."""

    def __init__(self, pool: HttpPool, url: str, model: str, prices: tuple[float | None, float | None],
                 decode: Callable[[bytes], ChatCompletion] = decode_completion) -> None:
        self.pool, self.url, self.model, self.prices, self.decode = pool, url, model, prices, decode
        self.cache: LlmCache | None = None
        self.say_no_stream = True  # until a server refuses the field
        self.stats = {"recorded": 0, "cached": 0, "sent": 0}

    def use_cache(self, path: str | Path) -> None:
        """Answer from (and fill) the llm cache in ``path``."""
        self.cache = LlmCache(path)

    def call(self, body: dict[str, Any], rng: Any, recorded: Mapping[str, ModelCall],
             finish: Callable[[ModelCall], R]) -> R | Any:
        """``finish(the call)`` at once when the record or the cache answers ``body``, else a future of it (the
        pool's, which runs ``finish`` as soon as the answer arrives)."""
        data = canonical_request(body)
        digest = request_digest(data)
        known = recorded.get(digest)
        if known is not None:
            self.stats["recorded"] += 1
            return finish(known)
        if self.cache is not None:
            hit = self.cache.get(digest)
            if hit is not None:
                self.stats["cached"] += 1
                return finish(ModelCall(model=self.model, digest=digest, content=hit.content, tool_calls=hit.tool_calls,
                                        finish_reason=hit.finish_reason, usage=hit.usage, cached=True,
                                        cost=price(None, self.prices)))  # nothing was spent on it now
        self.stats["sent"] += 1
        wire = data[:-1] + _NO_STREAM if self.say_no_stream and data.endswith(b"}") else data

        def made(completion: ChatCompletion, faults: list[FaultReport], seconds: float) -> R:
            return finish(self.record(digest, completion, faults))

        def without_stream(status: int) -> bytes | None:
            if status != 400 or wire is data:
                return None
            if self.say_no_stream:
                log.warning("the server refused the stream field; leaving it out from now on", url=self.url)
                self.say_no_stream = False
            return data

        return self.pool.submit(self.url, wire, None, rng, self.decode, made, without_stream)

    def record(self, digest: str, completion: ChatCompletion, faults: list[FaultReport]) -> ModelCall:
        """The call an answer from the network makes (put in the cache when there is one)."""
        choice = completion.choices[0]
        message = choice.message
        usage = (Usage(input_tokens=max(0, completion.usage.prompt_tokens),
                       output_tokens=max(0, completion.usage.completion_tokens))
                 if completion.usage is not None else None)
        tool_calls = [ModelToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
                      for c in message.tool_calls or ()]
        call = ModelCall(model=self.model, digest=digest, content=message.content, tool_calls=tool_calls,
                         finish_reason=choice.finish_reason, usage=usage, cost=price(usage, self.prices),
                         attempt=len(faults) + 1, faults=list(faults))
        if self.cache is not None:
            try:
                self.cache.put(CachedAnswer(digest=digest, model=self.model, content=call.content,
                                            tool_calls=tool_calls, finish_reason=call.finish_reason, usage=usage))
            except OSError as exc:  # a full disk must not fail the episode: the answer is logged anyway
                log.warning("llm cache write failed", error=str(exc)[:200])
        return call
