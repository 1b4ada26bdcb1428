"""Two runs compared episode by episode (``dialogsim diff``): pairs by (scenario, trial, branch) (then, for
episodes left over, by scenario and trial where each is alone with them: a fork against its parent), outcome
transitions, the first turn where each pair differs, and metric deltas with paired statistics (engine/paired.py).

Metrics per episode: success, turns, tool calls, latency (per agent turn), cost (when either run has any), and
every ``metric`` plug-in (engine/plugins.py: the SGD DST joint goal accuracy), each over the pairs where both
episodes have it. Pairs missing on one side are counted and named, never dropped silently.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable

import msgspec

from . import registry
from .events import AgentTurn, EpisodeEnded, EpisodeStarted, ToolCalled, UserTurn
from .log import RunDir, read_episodes
from .paired import RESAMPLES, Columns, Interval, mcnemar_exact, paired_bootstrap

Key = tuple[str, int, str]  # scenario id, trial, branch ("" for none)


class Episode(msgspec.Struct, kw_only=True):
    """What diff needs of one episode: its key and id, outcome, metrics as (sum, count), and turn fingerprints."""

    key: Key
    ep: str
    outcome: str
    metrics: dict[str, tuple[float, float]]
    turns: list[int]  # a hash per turn of (speaker, utterance, acts), to find the first difference


class Pair(msgspec.Struct, kw_only=True):
    """Two paired episodes: their ids and outcomes, and the first turn where they differ (None: identical)."""

    scenario: str
    trial: int
    branch: str
    a: str
    b: str
    outcome_a: str
    outcome_b: str
    first_differing_turn: int | None


class Metric(Interval, kw_only=True):
    """A metric's paired comparison: each run's figure, B - A with its bootstrap interval, and for success the
    McNemar exact test on the discordant pairs (b: success in A only, c: in B only)."""

    name: str
    mcnemar_p: float | None = None
    discordant: tuple[int, int] | None = None


class Diff(msgspec.Struct, kw_only=True):
    """The comparison of run B with run A."""

    run_a: str
    run_b: str
    pairs: int
    only_in_a: list[str]
    only_in_b: list[str]
    duplicates: int
    transitions: dict[str, list[str]]  # "success -> failure": the pairs' episode ids in A
    metrics: list[Metric]
    resamples: int
    seed: int
    episodes: list[Pair]


METRIC_LABELS = {"success": "success rate", "turns": "turns per episode", "tool_calls": "tool calls per episode",
                 "latency": "latency per agent turn (s)", "cost": "cost per episode"}


def summarize(events: list[Any], metric_plugins: dict[str, Callable[[list[Any]], Any]]) -> Episode | None:
    """One episode's summary (None for an episode that did not start and end)."""
    started, ended = events[0], events[-1]
    if type(started) is not EpisodeStarted or type(ended) is not EpisodeEnded:
        return None
    tools, latency, agent_turns, cost, costed = 0, 0.0, 0, 0.0, False
    turns: list[int] = []
    for e in events:
        kind = type(e)
        if kind is UserTurn or kind is AgentTurn:
            turns.append(hash((kind is UserTurn, e.utterance, e.end, tuple(
                (f.service, tuple((a.act, a.slot, tuple(a.values)) for a in f.actions)) for f in e.frames))))
            if kind is AgentTurn:
                agent_turns += 1
                latency += e.latency
                if e.cost is not None:
                    cost, costed = cost + e.cost, True
        elif kind is ToolCalled:
            tools += 1
    metrics = {"success": (float(ended.outcome == "success"), 1.0), "turns": (float(ended.turns), 1.0),
               "tool_calls": (float(tools), 1.0), "latency": (latency, float(agent_turns))}
    if costed:
        metrics["cost"] = (cost, 1.0)
    for name, fold in metric_plugins.items():
        value = fold(events)
        if value is not None:
            metrics[name] = (float(value[0]), float(value[1]))
    return Episode(key=(started.scenario_id, started.trial, started.branch or ""), ep=started.ep,
                   outcome=ended.outcome, metrics=metrics, turns=turns)


def read_run(path: str | Path, metric_plugins: dict[str, Callable[[list[Any]], Any]]) -> tuple[RunDir, list[Episode]]:
    """A run's ended episodes, summarized."""
    run = RunDir.open(path)
    return run, [s for s in (summarize(events, metric_plugins) for events in read_episodes(run)) if s is not None]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first turn where two episodes' turns differ (one that ended earlier differs where it ended)."""
    for turn, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return turn
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(run_a: str, a: Iterable[Episode], run_b: str, b: Iterable[Episode], *, resamples: int = RESAMPLES,
            seed: int = 0) -> Diff:
    """Pair two runs' episodes and compare them."""
    by_key_a, duplicates = _by_key(a)
    by_key_b, more = _by_key(b)
    duplicates += more
    keys = sorted(set(by_key_a) & set(by_key_b), key=lambda k: (by_key_a[k].ep, k))
    pairs = [(by_key_a[k], by_key_b[k]) for k in keys]
    # Left over: an episode alone with its scenario and trial on both sides pairs with the other whatever their
    # branches (a fork against its parent, say).
    left_a = _alone([e for k, e in by_key_a.items() if k not in by_key_b])
    left_b = _alone([e for k, e in by_key_b.items() if k not in by_key_a])
    matched = sorted(set(left_a) & set(left_b), key=lambda k: left_a[k].ep)
    pairs += [(left_a[k], left_b[k]) for k in matched]
    paired_a, paired_b = {x.ep for x, _ in pairs}, {y.ep for _, y in pairs}
    transitions: dict[str, list[str]] = {}
    episodes = []
    for x, y in pairs:
        if x.outcome != y.outcome:
            transitions.setdefault(f"{x.outcome} -> {y.outcome}", []).append(x.ep)
        episodes.append(Pair(scenario=x.key[0], trial=x.key[1], branch=x.key[2], a=x.ep, b=y.ep,
                             outcome_a=x.outcome, outcome_b=y.outcome,
                             first_differing_turn=first_difference(x.turns, y.turns)))
    names = [n for n in ("success", "turns", "tool_calls", "latency", "cost")
             if any(n in e.metrics for p in pairs for e in p)]
    names += sorted({n for p in pairs for e in p for n in e.metrics} - set(names))
    columns = {name: _columns(pairs, name) for name in names}
    intervals = paired_bootstrap(columns, resamples=resamples, seed=seed)
    metrics = [_metric(name, intervals[name], pairs) for name in names]
    return Diff(run_a=run_a, run_b=run_b, pairs=len(pairs),
                only_in_a=sorted(e.ep for e in by_key_a.values() if e.ep not in paired_a),
                only_in_b=sorted(e.ep for e in by_key_b.values() if e.ep not in paired_b),
                duplicates=duplicates, transitions=dict(sorted(transitions.items())), metrics=metrics,
                resamples=resamples, seed=seed, episodes=episodes)


def _by_key(episodes: Iterable[Episode]) -> tuple[dict[Key, Episode], int]:
    """Episodes by key (the first of each key; the others counted as duplicates)."""
    out: dict[Key, Episode] = {}
    duplicates = 0
    for e in sorted(episodes, key=lambda e: e.ep):
        if e.key in out:
            duplicates += 1
        else:
            out[e.key] = e
    return out, duplicates


def _alone(episodes: list[Episode]) -> dict[tuple[str, int], Episode]:
    """The episodes that are alone with their (scenario, trial), by it."""
    counts = Counter(e.key[:2] for e in episodes)
    return {e.key[:2]: e for e in episodes if counts[e.key[:2]] == 1}


def _columns(pairs: list[tuple[Episode, Episode]], name: str) -> Columns:
    """A metric's columns over the pairs; a pair where either side lacks it weighs nothing."""
    c = Columns(a_num=[], a_den=[], b_num=[], b_den=[])
    for x, y in pairs:
        mx, my = x.metrics.get(name), y.metrics.get(name)
        if name == "cost":  # a run without costs cost nothing
            mx, my = mx or (0.0, 1.0), my or (0.0, 1.0)
        if mx is None or my is None or not mx[1] or not my[1]:
            mx = my = (0.0, 0.0)
        c.a_num.append(mx[0])
        c.a_den.append(mx[1])
        c.b_num.append(my[0])
        c.b_den.append(my[1])
    return c


def _metric(name: str, interval: Interval, pairs: list[tuple[Episode, Episode]]) -> Metric:
    metric = Metric(name=name, **msgspec.structs.asdict(interval))
    if name == "success":
        b = sum(1 for x, y in pairs if x.outcome == "success" and y.outcome != "success")
        c = sum(1 for x, y in pairs if x.outcome != "success" and y.outcome == "success")
        metric.mcnemar_p, metric.discordant = mcnemar_exact(b, c), (b, c)
    return metric


def metric_plugins() -> dict[str, Callable[[list[Any]], Any]]:
    """The registered per-episode metrics: name -> fold(events) -> (sum, count) or None."""
    return {name: registry.lookup("metric", name) for name in registry.names("metric")}


def render(diff: Diff, shown: int = 5) -> str:
    """The comparison as a table for a terminal."""
    lines = [f"A: {diff.run_a}", f"B: {diff.run_b}",
             f"pairs: {diff.pairs} (by scenario, trial and branch); only in A: {len(diff.only_in_a)}, only in B: "
             f"{len(diff.only_in_b)}, duplicates left out: {diff.duplicates}"]
    for side, eps in (("A", diff.only_in_a), ("B", diff.only_in_b)):
        if eps:
            lines.append(f"  only in {side}: {_some(eps, shown)}")
    lines.append("")
    if diff.transitions:
        lines.append(f"{'outcome A -> B':<28}{'pairs':>7}  episodes (A)")
        for name, eps in sorted(diff.transitions.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"{name:<28}{len(eps):>7}  {_some(eps, shown)}")
    else:
        lines.append("outcomes: no pair changed")
    firsts = [p.first_differing_turn for p in diff.episodes if p.first_differing_turn is not None]
    line = f"pairs whose turns are identical: {diff.pairs - len(firsts)}"
    if firsts:
        counts = Counter(min(t, 5) for t in firsts)
        line += (f"; first differing turn: median {statistics.median(firsts):g} ("
                 + ", ".join(f"{'5+' if t == 5 else t}: {n}" for t, n in sorted(counts.items())) + ")")
    lines.append(line)
    lines += ["", f"{'metric':<30}{'A':>10}{'B':>10}{'B - A':>11}  {'95% CI (paired bootstrap)':<26}{'pairs':>6}  test"]
    for m in diff.metrics:
        label = METRIC_LABELS.get(m.name, m.name.replace("_", " "))
        test = f"McNemar exact p={m.mcnemar_p:.3g} (b={m.discordant[0]}, c={m.discordant[1]})" if m.discordant else ""
        lines.append(f"{label:<30}{_num(m.a):>10}{_num(m.b):>10}{_num(m.delta, sign=True):>11}  "
                     f"{'[' + _num(m.low, sign=True) + ', ' + _num(m.high, sign=True) + ']':<26}{m.pairs:>6}  {test}")
    lines.append(f"({diff.resamples} bootstrap resamples, seed {diff.seed})")
    return "\n".join(lines)


def _some(eps: list[str], shown: int) -> str:
    return ", ".join(eps[:shown]) + (f", ... ({len(eps) - shown} more)" if len(eps) > shown else "")


def _num(x: float, sign: bool = False) -> str:
    if math.isnan(x):
        return "-"
    text = f"{x:+.4g}" if sign else f"{x:.4g}"
    return text
