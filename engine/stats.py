"""Corpus statistics of dialogues, simulated (a run's events) or real (SGD dialogue files), side by side.

Both sources are first reduced to the same light shape (services, then per turn: speaker, utterance, act
kinds, active intents), so that every figure is computed by one function for both and the comparison is
like for like: success rate, turns per dialogue, acts per turn, act and intent distributions,
distinct-utterance ratios, and the distances that the realism targets are stated in. A run's model usage
and cost per role (user, agent, judge...) come from its episodes' ``episode_ended.usage``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from statistics import mean, median
from typing import Any

from msgspec import UNSET

from .calls import add_usage
from .events import AgentTurn, EpisodeEnded, RoleUsage, UserTurn

# (speaker "USER"/"SYSTEM", utterance, act kinds, active intents of the user's frames)
Turn = tuple[str, str, list[str], list[str]]


class Dialogue:
    """One dialogue reduced to what the statistics need."""

    __slots__ = ("services", "turns", "outcome", "usage")

    def __init__(self, services: list[str], turns: list[Turn], outcome: str | None = None,
                 usage: dict[str, RoleUsage] | None = None) -> None:
        self.services = services
        self.turns = turns
        self.outcome = outcome
        self.usage = usage


def from_episode(events: list[Any]) -> Dialogue:
    """A run's episode (its events in seq order) as a Dialogue."""
    services: list[str] = []
    turns: list[Turn] = []
    outcome = None
    usage = None
    for e in events:
        if isinstance(e, (UserTurn, AgentTurn)):
            user = isinstance(e, UserTurn)
            acts: list[str] = []
            intents: list[str] = []
            for f in e.frames:
                if f.service not in services:
                    services.append(f.service)
                acts.extend(a.act for a in f.actions)
                if user and f.state is not None and f.state.active_intent != "NONE":
                    intents.append(f.state.active_intent)
            turns.append(("USER" if user else "SYSTEM", e.utterance, acts, intents))
        elif isinstance(e, EpisodeEnded):
            outcome = e.outcome
            usage = e.usage if e.usage is not UNSET else None
    return Dialogue(services, turns, outcome, usage)


def _shares(counter: Counter[str]) -> dict[str, float]:
    total = sum(counter.values())
    return {k: v / total for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))} if total else {}


def summarize(dialogues: Iterable[Dialogue]) -> dict[str, Any]:
    """Every statistic of a set of dialogues (see the module docstring)."""
    n = 0
    lengths: list[int] = []
    outcomes: Counter[str] = Counter()
    acts = {"USER": Counter(), "SYSTEM": Counter()}
    acts_per_turn: dict[str, list[int]] = {"USER": [], "SYSTEM": []}
    utterances = {"USER": Counter(), "SYSTEM": Counter()}
    intents: Counter[str] = Counter()
    services: Counter[str] = Counter()
    services_per_dialogue: list[int] = []
    usage: dict[str, RoleUsage] = {}
    for d in dialogues:
        n += 1
        if d.usage:
            add_usage(usage, d.usage)
        lengths.append(len(d.turns))
        if d.outcome is not None:
            outcomes[d.outcome] += 1
        services.update(d.services)
        services_per_dialogue.append(len(d.services))
        seen_intents: set[str] = set()
        for speaker, utterance, kinds, active in d.turns:
            side = "USER" if speaker == "USER" else "SYSTEM"
            acts[side].update(kinds)
            acts_per_turn[side].append(len(kinds))
            utterances[side][utterance] += 1
            seen_intents.update(active)
        intents.update(seen_intents)
    out: dict[str, Any] = {
        "dialogues": n,
        "services": sorted(services),
        "outcomes": dict(sorted(outcomes.items())),
        "success_rate": (outcomes["success"] / sum(outcomes.values())) if outcomes else None,
        "turns_mean": mean(lengths) if lengths else 0.0,
        "turns_median": median(lengths) if lengths else 0.0,
        "services_per_dialogue": mean(services_per_dialogue) if services_per_dialogue else 0.0,
    }
    for side, key in (("USER", "user"), ("SYSTEM", "system")):
        total = sum(utterances[side].values())
        out[f"{key}_acts_per_turn"] = mean(acts_per_turn[side]) if acts_per_turn[side] else 0.0
        out[f"{key}_acts"] = _shares(acts[side])
        out[f"{key}_distinct_utterances"] = (len(utterances[side]) / total) if total else 0.0
    out["intents"] = {k: v / n for k, v in sorted(intents.items(), key=lambda kv: (-kv[1], kv[0]))} if n else {}
    out["usage"] = {role: {"calls": u.calls, "cached": u.cached, "input_tokens": u.input_tokens,
                           "output_tokens": u.output_tokens, "cost": u.cost,
                           "cost_per_dialogue": u.cost / n if u.cost is not None else None}
                    for role, u in sorted(usage.items())}
    return out


def total_variation(p: dict[str, float], q: dict[str, float]) -> float:
    """Total variation distance of two distributions (0 = identical, 1 = disjoint)."""
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def compare(run: dict[str, Any], real: dict[str, Any]) -> dict[str, Any]:
    """How far a run is from real dialogues, in the terms of the realism targets."""
    turns = run["turns_mean"] / real["turns_mean"] if real["turns_mean"] else None
    return {
        "turns_ratio": turns,
        "turns_within_25pct": turns is not None and abs(turns - 1.0) <= 0.25,
        "user_act_tv": total_variation(run["user_acts"], real["user_acts"]),
        "system_act_tv": total_variation(run["system_acts"], real["system_acts"]),
        "intent_tv": total_variation(_norm(run["intents"]), _norm(real["intents"])),
        "user_distinct_at_least_half": run["user_distinct_utterances"] >= 0.5,
    }


def _norm(d: dict[str, float]) -> dict[str, float]:
    total = sum(d.values())
    return {k: v / total for k, v in d.items()} if total else {}


def render(run: dict[str, Any], real: dict[str, Any] | None = None, cmp: dict[str, Any] | None = None,
           top: int = 12) -> str:
    """The statistics as readable tables, the real dialogues' figures beside the run's when given."""
    lines: list[str] = []

    def row(name: str, a: Any, b: Any = None) -> None:
        cells = [f"{name:<34}", f"{_fmt(a):>12}"]
        if real is not None:
            cells.append(f"{_fmt(b):>12}")
        lines.append(" ".join(cells).rstrip())

    head = [f"{'':<34}", f"{'run':>12}"] + ([f"{'real SGD':>12}"] if real is not None else [])
    lines.append(" ".join(head).rstrip())
    r = real or {}
    row("dialogues", run["dialogues"], r.get("dialogues"))
    row("success rate", run["success_rate"], r.get("success_rate"))
    row("turns per dialogue (mean)", run["turns_mean"], r.get("turns_mean"))
    row("turns per dialogue (median)", run["turns_median"], r.get("turns_median"))
    row("services per dialogue", run["services_per_dialogue"], r.get("services_per_dialogue"))
    row("user acts per turn", run["user_acts_per_turn"], r.get("user_acts_per_turn"))
    row("system acts per turn", run["system_acts_per_turn"], r.get("system_acts_per_turn"))
    row("distinct user utterances", run["user_distinct_utterances"], r.get("user_distinct_utterances"))
    row("distinct system utterances", run["system_distinct_utterances"], r.get("system_distinct_utterances"))
    if run["outcomes"]:
        lines.append("")
        lines.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in run["outcomes"].items()))
    if run.get("usage"):
        lines.append("")
        lines.append(f"{'model usage':<12} {'calls':>8} {'cached':>8} {'input tok':>12} {'output tok':>12} "
                     f"{'cost USD':>10} {'per dialogue':>12}")
        for role, u in run["usage"].items():
            lines.append(f"  {role:<10} {u['calls']:>8} {u['cached']:>8} {u['input_tokens']:>12} "
                         f"{u['output_tokens']:>12} {_usd(u['cost']):>10} {_usd(u['cost_per_dialogue']):>12}")
    for key, title in (("user_acts", "user acts (share)"), ("system_acts", "system acts (share)"),
                       ("intents", "intents (share of dialogues)")):
        lines.append("")
        lines.append(title)
        names = list(run[key])
        if real is not None:
            names += [k for k in real[key] if k not in run[key]]
        for name in names[:top] if key == "intents" else names:
            row(f"  {name}", run[key].get(name, 0.0), r.get(key, {}).get(name, 0.0) if real is not None else None)
    if cmp is not None:
        lines.append("")
        lines.append("realism")
        lines.append(f"  mean turns, run / real           {_fmt(cmp['turns_ratio'])}"
                     f"  ({'within' if cmp['turns_within_25pct'] else 'outside'} 25%)")
        lines.append(f"  user act distance (TV)           {_fmt(cmp['user_act_tv'])}")
        lines.append(f"  system act distance (TV)         {_fmt(cmp['system_act_tv'])}")
        lines.append(f"  intent distance (TV)             {_fmt(cmp['intent_tv'])}")
    return "\n".join(lines)


def _usd(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3f}"
    return str(x)
