"""``dialogsim eval RUN``: every episode's spans scored, per episode and aggregated, as a table and JSON.

Reference metrics use the golden question each episode played (in its scenario snapshot), or the question
of the same id in ``--golden FILE``; a file whose questions do not match the run's scenarios is an error.
"""

from __future__ import annotations

import os
from pathlib import Path
import msgspec

from ...engine.errors import UserError
from ...engine.log import RunDir, read_episodes
from .episode import EpisodeRecord, agent_state, episode_record, run_facts
from .golden import ReferenceData, convert_item, load_golden
from .metrics import aggregate, load_prices, reference_metrics, span_metrics
from .spans import episode_spans


class EpisodeMetrics(msgspec.Struct, kw_only=True):
    """One episode's figures."""

    episode: str
    scenario_id: str
    outcome: str
    metrics: dict[str, float | None]


class EvalReport(msgspec.Struct, kw_only=True):
    """What ``dialogsim eval`` writes: the aggregate and every episode's figures."""

    run: str
    run_dir: str
    golden: str | None
    prices: str | None
    episodes: int
    aggregate: dict[str, dict[str, float | int]]
    per_episode: list[EpisodeMetrics]


def evaluate_run(run_dir: str | Path, golden: str | Path | None = None, prices: str | Path | None = None, *,
                 skip_corrupt: bool = False) -> EvalReport:
    """Score every finished episode of a run; inputs are checked before anything is read from the log."""
    table = load_prices(prices) if prices is not None else None
    questions = {q.question.id: q.question.reference_data for q in load_golden(golden)} if golden else None
    run = RunDir.open(run_dir)
    facts = run_facts(run)
    rows: list[EpisodeMetrics] = []
    played: set[str] = set()
    for events in read_episodes(run, skip_corrupt=skip_corrupt):
        record = episode_record(events)
        if record is None:
            continue
        played.add(record.scenario_id)
        reference = _reference(record, questions, golden)
        spans = episode_spans(record, facts)
        metrics = span_metrics(spans, table)
        if reference is not None:
            metrics.update(reference_metrics(reference, spans, agent_state(record)))
        rows.append(EpisodeMetrics(episode=record.ep, scenario_id=record.scenario_id, outcome=record.outcome,
                                   metrics=metrics))
    if questions is not None:
        unplayed = next((qid for qid in questions if qid not in played), None)
        if unplayed is not None:
            raise UserError(f"{golden}: question {unplayed!r} is not a scenario of {run.path} "
                            "(the golden file does not match the run)")
    return EvalReport(run=str(run.manifest.get("run_id", "")), run_dir=str(run.path),
                      golden=str(golden) if golden else None, prices=str(prices) if prices else None,
                      episodes=len(rows), aggregate=aggregate([r.metrics for r in rows]), per_episode=rows)


def _reference(record: EpisodeRecord, questions: dict[str, ReferenceData] | None,
               golden: str | Path | None) -> ReferenceData | None:
    """The reference an episode is scored against: the golden file's question, or the one it played."""
    if questions is not None:
        reference = questions.get(record.scenario_id)
        if reference is None:
            raise UserError(f"{golden}: no question {record.scenario_id!r} (scenario of episode {record.ep}); "
                            "the golden file does not match the run")
        return reference
    raw = record.golden.get("reference_data")
    if raw is None:
        return None
    return convert_item(raw, ReferenceData, f"{record.ep}: scenario {record.scenario_id!r}: reference_data")


def render_table(report: EvalReport) -> str:
    """The aggregate as an aligned text table: metric, mean, min, max, episodes measured."""
    header = ("metric", "mean", "min", "max", "n")
    lines = [header] + [(name, _num(a["mean"]), _num(a["min"]), _num(a["max"]), str(a["n"]))
                        for name, a in report.aggregate.items()]
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            for row in lines]
    return f"{report.episodes} episodes of {report.run_dir}\n" + "\n".join(text)


def _num(value: float | int) -> str:
    return f"{value:.4f}" if isinstance(value, float) and not value.is_integer() else f"{value:g}"


def write_report(report: EvalReport, out: str | Path) -> None:
    """Write the report as indented JSON, atomically (a temporary file, then a rename)."""
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    try:
        tmp.write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n")
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

