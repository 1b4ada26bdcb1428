"""An episode as OpenTelemetry spans following the GenAI semantic conventions, derived from its log alone.

Per user turn one trace: ``invocation`` (root) > ``invoke_agent NAME`` > the agent's steps: a ``call_llm``
that asked for tools, an ``execute_tool NAME`` per call, and the ``call_llm`` whose reply was spoken.
Ids are hashes of (run, episode, seq of the event, kind) and times are virtual time mapped onto the run's
wall start, so one log always gives one trace. The mapping is documented in docs/evals.md.
"""

from __future__ import annotations

import json
from hashlib import blake2b
from typing import Any

import msgspec
from msgspec import UNSET

from ...engine.events import AgentTurn
from .episode import EpisodeRecord, Exchange, RunFacts, ToolCallRecord


class Span(msgspec.Struct, kw_only=True):
    """One span as a ``session_trace`` entry: ids in hex, times in unix nanoseconds."""

    name: str
    span_id: str
    trace_id: str
    parent_span_id: str | None
    start_time: int
    end_time: int
    attributes: dict[str, Any]


INVOCATION = "invocation"
INVOKE_AGENT = "invoke_agent"
CALL_LLM = "call_llm"
EXECUTE_TOOL = "execute_tool"
ERROR_TYPE = "error.type"


def hex_id(nbytes: int, *parts: object) -> str:
    """A stable id of ``nbytes`` bytes in hex from the parts' text (never all zeros, which OTLP forbids)."""
    digest = blake2b("\x1f".join(map(str, parts)).encode("utf-8"), digest_size=nbytes).hexdigest()
    return digest if digest.strip("0") else "0" * (2 * nbytes - 1) + "1"


def session_id(record: EpisodeRecord) -> str:
    """The conversation id of an episode: ``RUN/EPISODE``."""
    return f"{record.run}/{record.ep}"


def agent_name(record: EpisodeRecord) -> str:
    """The agent's name in traces: the name its first answer gave (dialogsim/1's ``agent``), else its spec as
    the run recorded it (``schema``, ``openai:http://...``)."""
    for turn in record.agent_turns():
        if turn.agent_name is not UNSET:
            return turn.agent_name
    return record.agent_spec or "agent"


def turn_agent(record: EpisodeRecord, turn: AgentTurn | None) -> str:
    """The agent that answered ``turn``: the name it gave, else the episode's agent name."""
    return turn.agent_name if turn is not None and turn.agent_name is not UNSET else agent_name(record)


def agent_trajectory(record: EpisodeRecord) -> list[str]:
    """The agents that answered, in order, a run of the same agent counted once."""
    names = [turn_agent(record, x.agent) for x in record.exchanges]
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


def to_ns(facts: RunFacts, t: float) -> int:
    """Virtual seconds -> unix nanoseconds on the run's wall clock."""
    return facts.epoch_ns + round(t * 1_000_000_000)


def episode_spans(record: EpisodeRecord, facts: RunFacts) -> list[Span]:
    """Every span of an episode, parents before children, in time order."""
    out: list[Span] = []
    for index, x in enumerate(record.exchanges):
        end_t = x.agent.t if x.agent is not None else _next_start(record, index)
        out.extend(_exchange_spans(record, facts, x, end_t))
    return out


def _next_start(record: EpisodeRecord, index: int) -> float:
    """Where an unanswered user turn's invocation ends: the next user turn, or the episode's end."""
    later = record.exchanges[index + 1:]
    return later[0].user.t if later else max(record.end_t, record.exchanges[index].user.t)


def _exchange_spans(record: EpisodeRecord, facts: RunFacts, x: Exchange, end_t: float) -> list[Span]:
    run, ep, seq = record.run, record.ep, x.user.seq
    trace = hex_id(16, run, ep, seq, "trace")
    start_ns, end_ns = to_ns(facts, x.user.t), to_ns(facts, end_t)
    name = turn_agent(record, x.agent)
    invocation = Span(name=INVOCATION, span_id=hex_id(8, run, ep, seq, INVOCATION), trace_id=trace,
                      parent_span_id=None, start_time=start_ns, end_time=end_ns, attributes={})
    agent = Span(name=f"{INVOKE_AGENT} {name}", span_id=hex_id(8, run, ep, seq, INVOKE_AGENT), trace_id=trace,
                 parent_span_id=invocation.span_id, start_time=start_ns, end_time=end_ns,
                 attributes={"gen_ai.operation.name": INVOKE_AGENT, "gen_ai.agent.name": name,
                             "gen_ai.conversation.id": session_id(record)})
    out = [invocation, agent]
    if x.model_calls:
        out.extend(_logged_steps(record, facts, x, trace, agent.span_id))
        return out
    model_attrs = {"gen_ai.operation.name": "chat"}
    if facts.model:
        model_attrs["gen_ai.request.model"] = facts.model
    t = x.user.t
    if x.calls:
        # the step that asked for the tools: from the user's turn to the first call (each agent call has its own
        # latency; consecutive calls count as one round here)
        out.append(Span(name=CALL_LLM, span_id=hex_id(8, run, ep, x.calls[0].seq, CALL_LLM), trace_id=trace,
                        parent_span_id=agent.span_id, start_time=to_ns(facts, t),
                        end_time=to_ns(facts, max(t, x.calls[0].t)), attributes=dict(model_attrs)))
    for call in x.calls:
        start = max(t, call.t)
        t = start + call.latency
        out.append(Span(name=f"{EXECUTE_TOOL} {call.name}", span_id=hex_id(8, run, ep, call.seq, EXECUTE_TOOL),
                        trace_id=trace, parent_span_id=agent.span_id, start_time=to_ns(facts, start),
                        end_time=to_ns(facts, t), attributes=_tool_attributes(call)))
    if x.agent is not None:
        attrs = dict(model_attrs)
        if x.agent.usage is not None:
            attrs["gen_ai.usage.input_tokens"] = x.agent.usage.input_tokens
            attrs["gen_ai.usage.output_tokens"] = x.agent.usage.output_tokens
        start = min(t, x.agent.t)
        out.append(Span(name=CALL_LLM, span_id=hex_id(8, run, ep, x.agent.seq, CALL_LLM), trace_id=trace,
                        parent_span_id=agent.span_id, start_time=to_ns(facts, start),
                        end_time=to_ns(facts, x.agent.t), attributes=attrs))
    return out


def _logged_steps(record: EpisodeRecord, facts: RunFacts, x: Exchange, trace: str, parent: str) -> list[Span]:
    """The steps of an exchange whose model calls were logged: a ``call_llm`` per call, with its model, usage and
    finish reason, each from the end of the step before it to its answer; the tool calls in between."""
    run, ep = record.run, record.ep
    out: list[Span] = []
    t = x.user.t
    steps: list[Any] = sorted([*x.model_calls, *x.calls], key=lambda step: step.seq)
    for step in steps:
        start = max(t, step.t) if type(step) is ToolCallRecord else t
        if type(step) is ToolCallRecord:
            t = start + step.latency
            out.append(Span(name=f"{EXECUTE_TOOL} {step.name}", span_id=hex_id(8, run, ep, step.seq, EXECUTE_TOOL),
                            trace_id=trace, parent_span_id=parent, start_time=to_ns(facts, start),
                            end_time=to_ns(facts, t), attributes=_tool_attributes(step)))
            continue
        t = max(t, step.t)
        attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": step.model}
        if step.finish_reason:
            attrs["gen_ai.response.finish_reasons"] = [step.finish_reason]
        if step.usage is not None:
            attrs["gen_ai.usage.input_tokens"] = step.usage.input_tokens
            attrs["gen_ai.usage.output_tokens"] = step.usage.output_tokens
        out.append(Span(name=CALL_LLM, span_id=hex_id(8, run, ep, step.seq, CALL_LLM), trace_id=trace,
                        parent_span_id=parent, start_time=to_ns(facts, start), end_time=to_ns(facts, t),
                        attributes=attrs))
    return out


def _tool_attributes(call: ToolCallRecord) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.operation.name": EXECUTE_TOOL, "gen_ai.tool.name": call.name,
                             "gen_ai.tool.type": "function", "gen_ai.tool.call.id": call.call_id,
                             "gen_ai.tool.call.arguments": json.dumps(call.arguments, ensure_ascii=False)}
    if call.error is not None:
        attrs["gen_ai.tool.call.result"] = json.dumps({"error": call.error}, ensure_ascii=False)
        attrs[ERROR_TYPE] = "tool_error"
    elif not call.returned:
        attrs[ERROR_TYPE] = "no_result"
    else:
        attrs["gen_ai.tool.call.result"] = json.dumps(call.results or [], ensure_ascii=False)
    return attrs


def span_kind(name: str) -> str:
    """A span name's kind: ``call_llm``, ``execute_tool``, ``invoke_agent`` or ``invocation``."""
    return name.split(" ", 1)[0]


def duration_s(span: Span) -> float:
    """A span's duration in seconds."""
    return (span.end_time - span.start_time) / 1e9
