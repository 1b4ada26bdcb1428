"""Metric definitions (docs/evals.md) on hand-made spans and references, and the price table's checks."""

from __future__ import annotations

import json

import pytest

from dialogsim.engine.errors import UserError
from dialogsim.scenarios.evals.golden import ReferenceData, ToolInteraction
from dialogsim.scenarios.evals.metrics import (aggregate, load_prices, reference_metrics, span_metrics, state_match,
                                               tool_metrics, trajectory_metrics)
from dialogsim.scenarios.evals.spans import Span

S = 1_000_000_000


def span(name: str, start: float, end: float, **attributes) -> Span:
    return Span(name=name, span_id="0" * 15 + "1", trace_id="0" * 31 + "1", parent_span_id=None,
                start_time=int(start * S), end_time=int(end * S), attributes=attributes)


def tool(name: str, start: float, end: float, error: bool = False, **args) -> Span:
    attrs = {"gen_ai.tool.name": name, "gen_ai.tool.call.arguments": json.dumps(args)}
    if error:
        attrs["error.type"] = "tool_error"
    return span(f"execute_tool {name}", start, end, **attrs)


SPANS = [
    span("invocation", 0, 3), span("invoke_agent a", 0, 3, **{"gen_ai.agent.name": "a"}),
    span("call_llm", 0, 1, **{"gen_ai.request.model": "m1", "gen_ai.usage.input_tokens": 1000,
                              "gen_ai.usage.output_tokens": 100}),
    tool("search", 1, 1.5, q="x"), tool("book", 1.5, 2, error=True, id=1),
    span("call_llm", 2, 3, **{"gen_ai.request.model": "m2", "gen_ai.usage.input_tokens": 2000,
                              "gen_ai.usage.output_tokens": 0}),
    span("invocation", 10, 12), span("invoke_agent b", 10, 12, **{"gen_ai.agent.name": "b"}),
    span("call_llm", 10, 12),
]


def test_deterministic_metrics_from_spans(tmp_path):
    """Latency sums, tool counts and success, tokens, cost from the price table, hand-offs."""
    prices = tmp_path / "prices.csv"
    prices.write_text("model,input_per_1k,output_per_1k\nm1,0.5,2\n*,0.1,1\n")
    m = span_metrics(SPANS, load_prices(prices))
    assert (m["latency.llm_s"], m["latency.tools_s"], m["latency.total_s"]) == (4.0, 1.0, 5.0)
    assert (m["tool.calls"], m["tool.unique"], m["tool.success_rate"]) == (2, 2, 0.5)
    assert (m["tokens.input"], m["tokens.output"], m["tokens.total"]) == (3000, 100, 3100)
    assert m["cost"] == pytest.approx(1.0 * 0.5 + 0.1 * 2 + 2.0 * 0.1)
    assert (m["agent.invocations"], m["agent.handoffs"]) == (2, 1)


def test_no_calls_means_full_success_and_no_usage_means_no_tokens():
    """tool_success_rate is 1.0 without calls; tokens and cost are None when no span reports usage."""
    m = span_metrics([span("invocation", 0, 1), span("call_llm", 0, 1)])
    assert m["tool.success_rate"] == 1.0 and m["tokens.total"] is None and m["cost"] is None


def test_a_model_without_a_price_is_one_line(tmp_path):
    """Cost needs a price for every model that reported usage (or a '*' row)."""
    prices = tmp_path / "prices.csv"
    prices.write_text("model,input_per_1k,output_per_1k\nm1,0.5,2\n")
    with pytest.raises(UserError, match=r"prices.csv: no price for model 'm2'"):
        span_metrics(SPANS, load_prices(prices))


@pytest.mark.parametrize("text, message", [
    ("model,input_per_1k,output_per_1k,currency\n", "line 1: unknown column 'currency'"),
    ("model,input_per_1k\n", "line 1: missing column 'output_per_1k'"),
    ("model,input_per_1k,output_per_1k\nm1,0.5,cheap\n", "line 2: output_per_1k: expected a price >= 0, got 'cheap'"),
    ("model,input_per_1k,output_per_1k\nm1,-1,2\n", "line 2: input_per_1k: expected a price >= 0"),
    ("model,input_per_1k,output_per_1k\nm1,1,2\nm1,1,2\n", "line 3: model: 'm1' has a row already"),
    ("model,input_per_1k,output_per_1k\nm1,1\n", "line 2: 2 cells, the header has 3"),
    ("", "empty"),
])
def test_bad_price_tables_name_the_file_line_and_column(tmp_path, text, message):
    """Every problem of a price table is one line naming the file, the line and the column."""
    path = tmp_path / "prices.csv"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_prices(path)
    assert str(info.value).startswith(str(path)) and message in str(info.value), info.value


def _calls(*items) -> list[ToolInteraction]:
    return [ToolInteraction(tool_name=n, input_arguments=a) for n, a in items]


def test_tool_call_match_of_names_and_arguments():
    """F1 over calls matched by name and arguments, recall, the exact sequence, and names alone."""
    reference = _calls(("cart", {"id": "123"}), ("qr", {"value": 10}), ("crm", None))
    assert tool_metrics(reference, _calls(("cart", {"id": " 123 "}), ("qr", {"value": 10.0}), ("crm", {"x": 1}))) == {
        "tool_call.f1": 1.0, "tool_call.recall": 1.0, "tool_call.exact": 1.0, "tool_name.f1": 1.0}
    got = tool_metrics(reference, _calls(("qr", {"value": 15}), ("cart", {"id": "123"}), ("crm", {}), ("crm", {})))
    assert got["tool_call.f1"] == pytest.approx(2 * 2 / 7) and got["tool_call.recall"] == pytest.approx(2 / 3)
    assert got["tool_call.exact"] == 0.0 and got["tool_name.f1"] == pytest.approx(2 * 3 / 7)
    assert tool_metrics([], [])["tool_call.f1"] == 1.0 and tool_metrics([], _calls(("x", {})))["tool_call.f1"] == 0.0


def test_a_name_only_reference_does_not_take_the_call_a_specific_one_needs():
    """References with arguments are matched first."""
    reference = _calls(("search", None), ("search", {"q": "a"}))
    assert tool_metrics(reference, _calls(("search", {"q": "a"}), ("search", {"q": "b"})))["tool_call.f1"] == 1.0


def test_trajectory_match_modes():
    """EXACT, IN_ORDER (a subsequence) and ANY_ORDER (every item, any order)."""
    assert trajectory_metrics(["a", "b"], ["a", "b"]) == {"trajectory.exact": 1.0, "trajectory.in_order": 1.0,
                                                          "trajectory.any_order": 1.0}
    assert trajectory_metrics(["a", "c"], ["a", "b", "c"]) == {"trajectory.exact": 0.0, "trajectory.in_order": 1.0,
                                                               "trajectory.any_order": 1.0}
    assert trajectory_metrics(["c", "a"], ["a", "b", "c"])["trajectory.in_order"] == 0.0
    assert trajectory_metrics(["c", "a"], ["a", "b", "c"])["trajectory.any_order"] == 1.0
    assert trajectory_metrics(["a", "d"], ["a", "b"])["trajectory.any_order"] == 0.0


def test_state_match_treats_lists_as_alternatives():
    """Strings match case-insensitively; a list holds acceptable values, as SGD's slot values do."""
    reference = {"city": ["San Jose", "SJ"], "party": "2", "date": "2019-03-01", "missing": "x"}
    actual = {"city": ["sj"], "party": ["2"], "date": "2019-03-02"}
    assert state_match(reference, actual) == 0.5


def test_reference_metrics_cover_what_the_reference_has():
    """Absent reference fields are not scored; no agent state makes state.match None."""
    reference = ReferenceData(reference_trajectory=["a", "b"], reference_state_variables={"k": "v"})
    got = reference_metrics(reference, SPANS, None)
    assert got == {"trajectory.exact": 1.0, "trajectory.in_order": 1.0, "trajectory.any_order": 1.0,
                   "state.match": None}


def test_aggregate_skips_missing_values():
    """Means, extremes and sums over the episodes that have a value."""
    got = aggregate([{"x": 1.0, "y": None}, {"x": 3.0, "y": 2.0}])
    assert got == {"x": {"mean": 2.0, "min": 1.0, "max": 3.0, "sum": 4.0, "n": 2},
                   "y": {"mean": 2.0, "min": 2.0, "max": 2.0, "sum": 2.0, "n": 1}}
