"""The ``eval_csv`` projection: one row per episode with the columns of real simulation-run CSVs.

Output: ``simulation_run.csv`` (UTF-8, comma-separated, minimal quoting, ``\\n`` line ends, as the real files
are), columns COLUMNS in that order; JSON-valued cells are JSON text. A column whose source a run does not
have (LLM-judge scores, the agent's system instructions, a session state the agent never reported) is
present and empty. The cells are defined in docs/evals.md.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import msgspec

from .episode import EpisodeProjection, EpisodeRecord, RunFacts, agent_state
from .spans import agent_name, episode_spans, session_id, to_ns, turn_agent

COLUMNS = [
    "eval_id", "session_id", "agent_name", "timestamp", "score.hallucinations_v1", "score.safety_v1",
    "metric.duration_sec", "metric.total_tokens", "metric.turn_count", "metric.tool_calls", "metric.tool_errors",
    "metric.unique_tools", "eval_set_result_id", "question_id", "user_id", "agents_evaluated", "final_response",
    "system_instructions", "sub_agent_trace", "trace_summary", "user_inputs", "extracted_data", "custom_extract",
    "session_state", "session_trace",
]

_rows = msgspec.json.Decoder(list[str])


def cell(value: Any) -> str:
    """A JSON-valued cell: the value's JSON text."""
    return json.dumps(value, ensure_ascii=False)


def iso_time(ns: int) -> str:
    """Unix nanoseconds as the real files' timestamp: ISO 8601 with microseconds, UTC, no zone suffix."""
    seconds, rest = divmod(ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc).replace(microsecond=rest // 1000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")


def episode_row(record: EpisodeRecord, facts: RunFacts) -> list[str]:
    """One episode's cells, in COLUMNS order."""
    name = agent_name(record)
    turns = record.agent_turns()
    calls = record.calls()
    spans = episode_spans(record, facts)
    sub_agent_trace = [{"agent_name": turn_agent(record, t), "text_response": t.utterance} for t in turns]
    used = [t.usage for t in turns if t.usage is not None]
    state = agent_state(record)
    golden = record.golden
    last_t = turns[-1].t if turns else record.end_t
    row = {
        "eval_id": record.scenario_id,
        "session_id": session_id(record),
        "agent_name": name,
        "timestamp": iso_time(to_ns(facts, last_t)),
        "metric.duration_sec": repr(round(last_t - record.exchanges[0].user.t, 2)) if record.exchanges else "",
        "metric.total_tokens": str(sum(u.input_tokens + u.output_tokens for u in used)) if used else "",
        "metric.turn_count": str(len(record.exchanges)),
        "metric.tool_calls": str(len(calls)),
        "metric.tool_errors": str(sum(c.error is not None or not c.returned for c in calls)),
        "metric.unique_tools": cell(sorted({c.name for c in calls})),
        "eval_set_result_id": record.run,
        "question_id": record.scenario_id if golden else "",
        "user_id": record.user_spec,
        "agents_evaluated": cell(golden.get("agents_evaluated") or [name]),
        "final_response": turns[-1].utterance if turns else "",
        "sub_agent_trace": cell(sub_agent_trace),
        "trace_summary": trace_summary(record, name),
        "user_inputs": cell([x.user.utterance for x in record.exchanges]),
        "extracted_data": cell({"sub_agent_trace": sub_agent_trace, "state_variables": state,
                                "tool_interactions": [{"tool_name": c.name, "input_arguments": c.arguments}
                                                      for c in calls]}),
        "custom_extract": cell(custom_extract(record, facts, name)),
        "session_state": "" if state is None else cell(
            {"id": session_id(record), "appName": name, "userId": record.user_spec, "state": state,
             "lastUpdateTime": to_ns(facts, last_t) / 1e9}),
        "session_trace": cell(msgspec.to_builtins(spans)),
    }
    return [row.get(column, "") for column in COLUMNS]


def trace_summary(record: EpisodeRecord, name: str) -> str:
    """The conversation as plain text: ``User: ...`` and ``AGENT: ...`` lines."""
    lines = []
    for x in record.exchanges:
        lines.append(f"User: {x.user.utterance}")
        if x.agent is not None:
            lines.append(f"{name}: {x.agent.utterance}")
    return "\n".join(lines)


def custom_extract(record: EpisodeRecord, facts: RunFacts, name: str) -> list[dict[str, Any]]:
    """Per step of the conversation: who, when, the text, the tool calls or responses, the model and usage."""
    out: list[dict[str, Any]] = []

    def step(role: str, t: float, text: str | None, *, calls: list | None = None, responses: list | None = None,
             model: str | None = None, usage: Any = None) -> None:
        tokens = None if usage is None else {"prompt_token_count": usage.input_tokens,
                                             "candidates_token_count": usage.output_tokens,
                                             "total_token_count": usage.input_tokens + usage.output_tokens}
        out.append({"turn_index": len(out), "role": role, "timestamp": iso_time(to_ns(facts, t)), "model": model,
                    "token_usage": tokens, "content_text": text, "tool_calls": calls or [],
                    "tool_responses": responses or [], "thought": None})

    for x in record.exchanges:
        step("user", x.user.t, x.user.utterance)
        if x.calls:
            step(name, x.calls[0].t, None, calls=[{"name": c.name, "args": c.arguments} for c in x.calls],
                 model=facts.model)
            step(name, x.calls[-1].t + x.calls[-1].latency, None, responses=[
                {"name": c.name, "response": {"error": c.error} if c.error is not None else {"results": c.results}}
                for c in x.calls if c.returned])
        if x.agent is not None:
            step(name, x.agent.t, x.agent.utterance, model=facts.model, usage=x.agent.usage)
    return out


def encode_csv(rows: Iterator[list[str]]) -> bytes:
    """The CSV text of a header and rows: minimal quoting, ``\\n`` line ends."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")


class EvalCsvProjection(EpisodeProjection):
    """Episodes -> one simulation-run CSV."""

    name = "eval_csv"
    version = 1

    def fold_record(self, record: EpisodeRecord) -> list[str]:
        return episode_row(record, self.facts)

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
        yield "simulation_run.csv", encode_csv(_rows.decode(raw) for raw in outputs)

