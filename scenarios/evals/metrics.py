"""The metrics of ``dialogsim eval``: deterministic ones read from an episode's spans, reference ones against a
golden question, and their aggregation. Definitions: docs/evals.md."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from ...engine.errors import UserError
from .golden import ReferenceData, ToolInteraction
from .spans import CALL_LLM, ERROR_TYPE, EXECUTE_TOOL, INVOCATION, INVOKE_AGENT, Span, duration_s, span_kind

PRICE_COLUMNS = ("model", "input_per_1k", "output_per_1k")
ANY_MODEL = "*"


class Prices(msgspec.Struct):
    """Prices per 1K tokens by model: ``{model: (input, output)}``; ``*`` prices any model not listed."""

    by_model: dict[str, tuple[float, float]]
    path: str = ""

    def of(self, model: str | None) -> tuple[float, float]:
        """The (input, output) price of ``model``; a model without a row (nor a ``*`` row) is a UserError."""
        price = self.by_model.get(model or "") or self.by_model.get(ANY_MODEL)
        if price is None:
            shown = repr(model) if model else "(none: the agent names no model)"
            raise UserError(f"{self.path}: no price for model {shown}; add a row for it or a '*' row")
        return price


def load_prices(path: str | Path) -> Prices:
    """A price table: CSV with columns model,input_per_1k,output_per_1k; one UserError line per problem."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise UserError(f"{path}: no such price table") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{path}: not a readable CSV file ({exc})") from None
    if not rows:
        raise UserError(f"{path}: empty; expected the header {','.join(PRICE_COLUMNS)}")
    header = [h.strip() for h in rows[0]]
    for name in header:
        if name not in PRICE_COLUMNS:
            raise UserError(f"{path}: line 1: unknown column {name!r} (the columns are {', '.join(PRICE_COLUMNS)})")
    for name in PRICE_COLUMNS:
        if name not in header:
            raise UserError(f"{path}: line 1: missing column {name!r}")
    out: dict[str, tuple[float, float]] = {}
    for lineno, row in enumerate(rows[1:], 2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise UserError(f"{path}: line {lineno}: {len(row)} cells, the header has {len(header)}")
        cells = dict(zip(header, (c.strip() for c in row)))
        model = cells["model"]
        if not model:
            raise UserError(f"{path}: line {lineno}: model: empty (use '*' for any model)")
        if model in out:
            raise UserError(f"{path}: line {lineno}: model: {model!r} has a row already")
        prices = []
        for column in ("input_per_1k", "output_per_1k"):
            try:
                value = float(cells[column])
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value >= 0):
                raise UserError(f"{path}: line {lineno}: {column}: expected a price >= 0, got {cells[column]!r}")
            prices.append(value)
        out[model] = (prices[0], prices[1])
    return Prices(by_model=out, path=str(path))


# -- deterministic metrics, from spans -------------------------------------------------------------


def span_metrics(spans: list[Span], prices: Prices | None = None) -> dict[str, float | None]:
    """Latency, tool use, tokens, cost and agent hand-offs of one episode's spans."""
    llm = [s for s in spans if span_kind(s.name) == CALL_LLM]
    tools = [s for s in spans if span_kind(s.name) == EXECUTE_TOOL]
    agents = [s.attributes.get("gen_ai.agent.name", s.name) for s in spans if span_kind(s.name) == INVOKE_AGENT]
    used = [s for s in llm if "gen_ai.usage.input_tokens" in s.attributes]
    tokens_in = sum(int(s.attributes["gen_ai.usage.input_tokens"]) for s in used)
    tokens_out = sum(int(s.attributes.get("gen_ai.usage.output_tokens", 0)) for s in used)
    cost = None
    if prices is not None and used:
        cost = 0.0
        for s in used:
            price_in, price_out = prices.of(s.attributes.get("gen_ai.request.model"))
            cost += int(s.attributes["gen_ai.usage.input_tokens"]) / 1000 * price_in + \
                int(s.attributes.get("gen_ai.usage.output_tokens", 0)) / 1000 * price_out
    return {
        "latency.llm_s": sum(duration_s(s) for s in llm),
        "latency.tools_s": sum(duration_s(s) for s in tools),
        "latency.total_s": sum(duration_s(s) for s in spans if s.name == INVOCATION),
        "tool.calls": float(len(tools)),
        "tool.unique": float(len({s.attributes.get("gen_ai.tool.name", s.name) for s in tools})),
        "tool.success_rate": sum(ERROR_TYPE not in s.attributes for s in tools) / len(tools) if tools else 1.0,
        "tokens.input": float(tokens_in) if used else None,
        "tokens.output": float(tokens_out) if used else None,
        "tokens.total": float(tokens_in + tokens_out) if used else None,
        "cost": cost,
        "agent.invocations": float(len(agents)),
        "agent.handoffs": float(sum(a != b for a, b in zip(agents, agents[1:]))),
    }


def span_tool_calls(spans: list[Span]) -> list[ToolInteraction]:
    """The tool calls among the spans, with their arguments, in order."""
    out = []
    for s in spans:
        if span_kind(s.name) == EXECUTE_TOOL:
            args = json.loads(s.attributes.get("gen_ai.tool.call.arguments") or "{}")
            out.append(ToolInteraction(tool_name=s.attributes.get("gen_ai.tool.name", s.name.partition(" ")[2]),
                                       input_arguments=args))
    return out


def trajectory(spans: list[Span]) -> list[str]:
    """The agents invoked, in order, a run of the same agent counted once."""
    names = [s.attributes.get("gen_ai.agent.name", s.name.partition(" ")[2]) for s in spans
             if span_kind(s.name) == INVOKE_AGENT]
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


# -- reference metrics ----------------------------------------------------------------------------


def normalize(value: Any) -> Any:
    """A value compared the lenient way: strings stripped and case-folded, numbers as floats, deep."""
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    return value


def arguments_match(reference: dict[str, Any] | None, actual: dict[str, Any] | None) -> bool:
    """Whether a call's arguments are the reference's (no reference arguments: any will do)."""
    return reference is None or normalize(reference) == normalize(actual or {})


def matched_calls(reference: list[ToolInteraction], actual: list[ToolInteraction]) -> int:
    """How many reference calls find a distinct actual call of the same name and arguments."""
    free = list(actual)
    count = 0
    # references with arguments first, so that a name-only one cannot take the call a specific one needs
    for ref in sorted(reference, key=lambda r: r.input_arguments is None):
        for i, call in enumerate(free):
            if call.tool_name == ref.tool_name and arguments_match(ref.input_arguments, call.input_arguments):
                del free[i]
                count += 1
                break
    return count


def f1(matched: int, reference: int, actual: int) -> float:
    """2m / (|reference| + |actual|); 1.0 when both are empty."""
    return 1.0 if reference + actual == 0 else 2 * matched / (reference + actual)


def tool_metrics(reference: list[ToolInteraction], actual: list[ToolInteraction]) -> dict[str, float]:
    """Tool-call match of names and arguments (F1, recall, exact sequence) and of names alone (F1)."""
    m = matched_calls(reference, actual)
    names = sum((Counter(r.tool_name for r in reference) & Counter(a.tool_name for a in actual)).values())
    exact = len(reference) == len(actual) and all(
        r.tool_name == a.tool_name and arguments_match(r.input_arguments, a.input_arguments)
        for r, a in zip(reference, actual))
    return {"tool_call.f1": f1(m, len(reference), len(actual)),
            "tool_call.recall": m / len(reference) if reference else 1.0,
            "tool_call.exact": float(exact),
            "tool_name.f1": f1(names, len(reference), len(actual))}


def trajectory_metrics(reference: list[str], actual: list[str]) -> dict[str, float]:
    """EXACT (the same list), IN_ORDER (the reference is a subsequence), ANY_ORDER (every reference item, in
    any order)."""
    it = iter(actual)
    in_order = all(any(step == a for a in it) for step in reference)
    any_order = not (Counter(reference) - Counter(actual))
    return {"trajectory.exact": float(reference == actual), "trajectory.in_order": float(in_order),
            "trajectory.any_order": float(any_order)}


def value_match(reference: Any, actual: Any) -> bool:
    """A state variable's match: equal (the lenient way); a list is a set of acceptable values (SGD's
    alternatives), so a list matches a value in it or a list sharing one."""
    ref, got = normalize(reference), normalize(actual)
    if isinstance(ref, list) and isinstance(got, list):
        return ref == got or any(r == g for r in ref for g in got)
    if isinstance(ref, list):
        return got in ref
    if isinstance(got, list):
        return ref in got
    return ref == got


def state_match(reference: dict[str, Any], actual: dict[str, Any]) -> float:
    """The share of reference state variables the agent's final state holds with a matching value."""
    return sum(k in actual and value_match(v, actual[k]) for k, v in reference.items()) / len(reference)


def reference_metrics(reference: ReferenceData, spans: list[Span], state: dict[str, Any] | None) -> dict[str, float | None]:
    """Every reference metric the reference has data for; None where it has none or the agent reported no state."""
    out: dict[str, float | None] = {}
    if reference.reference_trajectory is not None:
        out.update(trajectory_metrics(reference.reference_trajectory, trajectory(spans)))
    if reference.reference_tool_interactions is not None:
        out.update(tool_metrics(reference.reference_tool_interactions, span_tool_calls(spans)))
    if reference.reference_state_variables:
        out["state.match"] = None if state is None else state_match(reference.reference_state_variables, state)
    return out


# -- aggregation ----------------------------------------------------------------------------------


def aggregate(per_episode: list[dict[str, float | None]]) -> dict[str, dict[str, float | int]]:
    """Per metric over the episodes that have it: mean, min, max, sum and n."""
    values: dict[str, list[float]] = {}
    for metrics in per_episode:
        for name, value in metrics.items():
            if value is not None:
                values.setdefault(name, []).append(value)
    return {name: {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "sum": sum(v), "n": len(v)}
            for name, v in values.items()}
