"""Official SGD dialogue state tracking metrics, and the ``dst_metrics`` projection.

The definitions follow google-research ``schema_guided_dst`` (metrics.py and evaluate.py): per user frame,
active intent accuracy, requested slots F1/precision/recall, slot tagging F1/precision/recall (only when
the hypothesis frame has slot spans), and average/joint goal accuracy (all, categorical, non-categorical;
"NA" when no slot qualifies); per group (#ALL_SERVICES, #SEEN_SERVICES or #UNSEEN_SERVICES, the service,
its domain) the macro mean over frames of every value that is not "NA".

In the projection the reference is the user's true state (UserTurn frames) and the hypothesis for user
turn k is the state the agent exposed in its reply to it (the next AgentTurn's ``state``, and its
``tagged_slots`` for slot tagging, scored only when the agent tagged the text); a service the agent does
not track counts as an empty prediction. Episodes whose agent never exposes a state, and
user turns with no agent reply, are not scored (counted in the summary).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec
from rapidfuzz.distance import Indel

from ...engine.events import AgentTurn, DialogueState, EpisodeStarted, SlotSpan, UserTurn
from .schema import load_schemas

ALL_SERVICES, SEEN_SERVICES, UNSEEN_SERVICES = "#ALL_SERVICES", "#SEEN_SERVICES", "#UNSEEN_SERVICES"
NAN_VAL = "NA"
ACTIVE_INTENT_ACCURACY = "active_intent_accuracy"
REQUESTED_SLOTS_F1, REQUESTED_SLOTS_PRECISION, REQUESTED_SLOTS_RECALL = (
    "requested_slots_f1", "requested_slots_precision", "requested_slots_recall")
SLOT_TAGGING_F1, SLOT_TAGGING_PRECISION, SLOT_TAGGING_RECALL = (
    "slot_tagging_f1", "slot_tagging_precision", "slot_tagging_recall")
AVERAGE_GOAL_ACCURACY, AVERAGE_CAT_ACCURACY, AVERAGE_NONCAT_ACCURACY = (
    "average_goal_accuracy", "average_cat_accuracy", "average_noncat_accuracy")
JOINT_GOAL_ACCURACY, JOINT_CAT_ACCURACY, JOINT_NONCAT_ACCURACY = (
    "joint_goal_accuracy", "joint_cat_accuracy", "joint_noncat_accuracy")
TABLE_COLUMNS = [(JOINT_GOAL_ACCURACY, "JGA"), (JOINT_CAT_ACCURACY, "JGA-cat"), (JOINT_NONCAT_ACCURACY, "JGA-noncat"),
                 (AVERAGE_GOAL_ACCURACY, "AGA"), (ACTIVE_INTENT_ACCURACY, "intent"),
                 (REQUESTED_SLOTS_F1, "req-F1"), (SLOT_TAGGING_F1, "tag-F1")]

# -- fuzzy matching as fuzzywuzzy's token_sort_ratio computes it --------------------------------------

_LATIN1_HIGH = {code: None for code in range(128, 256)}  # fuzzywuzzy's force_ascii drops exactly these
_NON_WORD = re.compile(r"(?ui)\W")


def _process_and_sort(text: str) -> str:
    text = _NON_WORD.sub(" ", text.translate(_LATIN1_HIGH)).lower().strip()
    return " ".join(sorted(text.split())).strip()


def token_sort_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's ``token_sort_ratio`` (0..100, an int): sorted-token strings, Levenshtein (InDel) ratio."""
    a, b = _process_and_sort(a), _process_and_sort(b)
    if a == b:
        return 100
    if not a or not b:
        return 0
    # python-Levenshtein's ratio is 1 - distance / total lengths, in this float order (it decides ties: 42.5 vs
    # 42.50000000000001), then fuzzywuzzy rounds 100 * ratio with Python's round
    return int(round(100 * (1.0 - Indel.distance(a, b) / (len(a) + len(b)))))


def fuzzy_string_match(ref: str, hyp: str) -> float:
    """Similarity in [0, 1]: token_sort_ratio / 100."""
    return token_sort_ratio(ref, hyp) / 100.0


# -- per-frame metrics ----------------------------------------------------------------------------------


def compute_f1(ref: Iterable[Any], hyp: Iterable[Any]) -> tuple[float, float, float]:
    """(f1, precision, recall) of multisets; an empty side scores 1.0 precision or recall."""
    ref_c, hyp_c = Counter(ref), Counter(hyp)
    true, positive = sum(ref_c.values()), sum(hyp_c.values())
    hit = sum((ref_c & hyp_c).values())
    precision = hit / positive if positive else 1.0
    recall = hit / true if true else 1.0
    f1 = 2.0 * precision * recall / (precision + recall) if precision + recall > 0.0 else 0.0
    return f1, precision, recall


def _mean(values: list[float]) -> float | str:
    return sum(values) / len(values) if values else NAN_VAL


def _prod(values: list[float]) -> float | str:
    return math.prod(values) if values else NAN_VAL


def schema_slots(service: dict[str, Any] | None, ref_values: dict[str, Any], hyp_values: dict[str, Any]
                 ) -> list[tuple[str, bool]]:
    """(slot name, is categorical) of a service; without a schema, every slot seen, as non-categorical."""
    if service is not None:
        return [(s["name"], bool(s["is_categorical"])) for s in service["slots"]]
    return [(name, False) for name in sorted(set(ref_values) | set(hyp_values))]


def goal_accuracies(ref_values: dict[str, list[str]], hyp_values: dict[str, list[str]],
                    slots: list[tuple[str, bool]], fuzzy: bool = True) -> dict[str, float | str]:
    """Average and joint goal accuracy (all, categorical, non-categorical) of one frame.

    ``fuzzy=False`` scores non-categorical values by exact match (the official MultiWOZ-style option).
    """
    cor: list[float] = []
    active: list[bool] = []
    for name, categorical in slots:
        if name in ref_values:
            active.append(True)
            if name in hyp_values:
                refs, hyp = ref_values[name], hyp_values[name][0] if hyp_values[name] else ""
                if categorical:
                    cor.append(float(bool(refs) and refs[0] == hyp))
                else:
                    cor.append(max([fuzzy_string_match(r, hyp) if fuzzy else float(r == hyp) for r in refs],
                                   default=0.0))
            else:
                cor.append(0.0)
        else:
            active.append(False)
            cor.append(0.0 if name in hyp_values else 1.0)
    cats = [c for _, c in slots]
    return {
        AVERAGE_GOAL_ACCURACY: _mean([x for x, a in zip(cor, active) if a]),
        AVERAGE_CAT_ACCURACY: _mean([x for x, a, c in zip(cor, active, cats) if a and c]),
        AVERAGE_NONCAT_ACCURACY: _mean([x for x, a, c in zip(cor, active, cats) if a and not c]),
        JOINT_GOAL_ACCURACY: _prod(cor),
        JOINT_CAT_ACCURACY: _prod([x for x, c in zip(cor, cats) if c]),
        JOINT_NONCAT_ACCURACY: _prod([x for x, c in zip(cor, cats) if not c]),
    }


def frame_metrics(ref_state: dict[str, Any], hyp_state: dict[str, Any], service: dict[str, Any] | None, *,
                  utterance: str = "", ref_spans: list[dict[str, Any]] | None = None,
                  hyp_spans: list[dict[str, Any]] | None = None, fuzzy: bool = True) -> dict[str, float | str]:
    """Every official metric of one user frame; slot tagging only when ``hyp_spans`` is given."""
    ref_values, hyp_values = ref_state.get("slot_values", {}), hyp_state.get("slot_values", {})
    slots = schema_slots(service, ref_values, hyp_values)
    f1, p, r = compute_f1(ref_state.get("requested_slots", []), hyp_state.get("requested_slots", []))
    out: dict[str, float | str] = {
        ACTIVE_INTENT_ACCURACY: float(ref_state.get("active_intent", "NONE") == hyp_state.get("active_intent", "NONE")),
        REQUESTED_SLOTS_F1: f1, REQUESTED_SLOTS_PRECISION: p, REQUESTED_SLOTS_RECALL: r,
    }
    if hyp_spans is not None:
        noncat = {name for name, categorical in slots if not categorical}
        ref_tags = [(s["slot"], utterance[s["start"]:s["exclusive_end"]]) for s in ref_spans or [] if s["slot"] in noncat]
        hyp_tags = [(s["slot"], utterance[s["start"]:s["exclusive_end"]]) for s in hyp_spans if s["slot"] in noncat]
        f1, p, r = compute_f1(ref_tags, hyp_tags)
        out.update({SLOT_TAGGING_F1: f1, SLOT_TAGGING_PRECISION: p, SLOT_TAGGING_RECALL: r})
    out.update(goal_accuracies(ref_values, hyp_values, slots, fuzzy))
    return out


# -- aggregation ----------------------------------------------------------------------------------------


def domain_of(service: str) -> str:
    """The domain of a service, as the official evaluation takes it: the name before the first "_"."""
    return service.split("_")[0]


JOINT_METRICS = (JOINT_GOAL_ACCURACY, JOINT_CAT_ACCURACY, JOINT_NONCAT_ACCURACY)


class Aggregator:
    """Macro means per group over frames, skipping "NA" values.

    With ``joint_across_turn`` (the official MultiWOZ-style option) the joint accuracies of a turn's
    frames are multiplied per group and counted once per turn instead of once per frame.
    """

    def __init__(self, seen: set[str] | None, joint_across_turn: bool = False) -> None:
        self.seen = seen or set()
        self.joint_across_turn = joint_across_turn
        self.sums: dict[str, dict[str, list[float]]] = {}
        self.frames = 0

    def _groups(self, service: str) -> tuple[str, ...]:
        return (ALL_SERVICES, service, domain_of(service), SEEN_SERVICES if service in self.seen else UNSEEN_SERVICES)

    def _count(self, group: str, key: str, value: float) -> None:
        slot = self.sums.setdefault(group, {}).setdefault(key, [0.0, 0])
        slot[0] += value
        slot[1] += 1

    def add(self, service: str, metrics: dict[str, float | str]) -> None:
        """Count one frame's metrics in its groups."""
        self.add_turn([(service, metrics)])

    def add_turn(self, frames: list[tuple[str, dict[str, float | str]]]) -> None:
        """Count the metrics of all frames of one user turn."""
        products: dict[str, dict[str, float]] = {}
        for service, metrics in frames:
            self.frames += 1
            for group in self._groups(service):
                for key, value in metrics.items():
                    if value == NAN_VAL:
                        continue
                    if self.joint_across_turn and key in JOINT_METRICS:
                        per_group = products.setdefault(group, {})
                        per_group[key] = per_group.get(key, 1.0) * value  # type: ignore[operator]
                    else:
                        self._count(group, key, value)  # type: ignore[arg-type]
        for group, values in products.items():
            for key, value in values.items():
                self._count(group, key, value)

    def result(self) -> dict[str, dict[str, float]]:
        """{group: {metric: macro mean}} as the official evaluation writes it."""
        return {group: {key: total / count for key, (total, count) in metrics.items()}
                for group, metrics in self.sums.items()}


def metrics_json(result: dict[str, dict[str, float]]) -> bytes:
    """The metrics file as the official evaluation writes it (sorted keys, two-space indent)."""
    return (json.dumps(result, indent=2, separators=(",", ": "), sort_keys=True) + "\n").encode()


def metrics_table(result: dict[str, dict[str, float]], frames: int) -> str:
    """A readable table: one row per group (summary groups first), main metrics as columns."""
    special = [g for g in (ALL_SERVICES, SEEN_SERVICES, UNSEEN_SERVICES) if g in result]
    services = sorted(g for g in result if g not in special and "_" in g)
    domains = sorted(g for g in result if g not in special and "_" not in g)
    width = max([len(g) for g in result] + [5]) + 2
    lines = [f"SGD DST metrics over {frames} user frames", "group".ljust(width) + "".join(f"{h:>11}" for _, h in TABLE_COLUMNS)]
    for section in (special, domains, services):
        if not section:
            continue
        lines.append("-" * (width + 11 * len(TABLE_COLUMNS)))
        for group in section:
            row = result[group]
            lines.append(group.ljust(width) + "".join(
                f"{row[k]:>11.4f}" if k in row else f"{NAN_VAL:>11}" for k, _ in TABLE_COLUMNS))
    return "\n".join(lines) + "\n"


# -- the projection ------------------------------------------------------------------------------------


class FrameScore(msgspec.Struct, array_like=True):
    """One scored user frame: turn index, service, its metrics."""

    turn: int
    service: str
    metrics: dict[str, Any]


class EpisodeScores(msgspec.Struct):
    """The fold output of one episode."""

    dialogue_id: str
    frames: list[FrameScore]
    unscored_turns: int


_state_builtins = msgspec.to_builtins
_EMPTY: dict[str, Any] = {"active_intent": "NONE", "requested_slots": [], "slot_values": {}}


def _spans(spans: list[SlotSpan]) -> list[dict[str, Any]]:
    return [{"slot": s.slot, "start": s.start, "exclusive_end": s.exclusive_end} for s in spans]


def score_episode(events: list[Any]) -> EpisodeScores | None:
    """Score every user frame of one episode against the agent's next exposed state (pure)."""
    started = next((e for e in events if isinstance(e, EpisodeStarted)), None)
    snapshot = started.scenario if started is not None else {}
    data = snapshot.get("data") if isinstance(snapshot.get("data"), dict) else snapshot
    schemas = data.get("schemas") or {}
    if isinstance(schemas, list):
        schemas = {s.get("service_name"): s for s in schemas if isinstance(s, dict)}
    turns = [e for e in events if isinstance(e, (UserTurn, AgentTurn))]
    if not any(isinstance(e, AgentTurn) and e.state is not None for e in turns):
        return None
    frames: list[FrameScore] = []
    unscored = 0
    reply: AgentTurn | None = None
    replies: list[AgentTurn | None] = []
    for turn in reversed(turns):  # the agent turn that follows each turn, in one backward pass
        replies.append(reply)
        if isinstance(turn, AgentTurn):
            reply = turn
    replies.reverse()
    for turn, reply in zip(turns, replies):
        if not isinstance(turn, UserTurn):
            continue
        if reply is None or reply.state is None:
            unscored += 1
            continue
        tagged = reply.tagged_slots
        for frame in turn.frames:
            ref = _state_builtins(frame.state or DialogueState())
            predicted = reply.state.get(frame.service)
            hyp = _state_builtins(predicted) if predicted is not None else _EMPTY
            # slot tagging is scored only for agents that tagged the user's text (see AgentTurn)
            spans = None if tagged is None else {"utterance": turn.utterance, "ref_spans": _spans(frame.slots),
                                                 "hyp_spans": _spans(tagged.get(frame.service, []))}
            frames.append(FrameScore(turn=turn.turn, service=frame.service,
                                     metrics=frame_metrics(ref, hyp, schemas.get(frame.service), **(spans or {}))))
    dialogue_id = data.get("dialogue_id") or (events[0].ep if events else "")
    return EpisodeScores(dialogue_id=str(dialogue_id), frames=frames, unscored_turns=unscored)


def episode_joint_goal_accuracy(events: list[Any]) -> tuple[float, float] | None:
    """The ``dst_joint_goal_accuracy`` metric plug-in: the episode's joint goal accuracy summed over its scored
    user frames, and their number (None when the agent exposes no state)."""
    scores = score_episode(events)
    if scores is None:
        return None
    values = [f.metrics[JOINT_GOAL_ACCURACY] for f in scores.frames if f.metrics[JOINT_GOAL_ACCURACY] != NAN_VAL]
    return (float(sum(values)), float(len(values))) if values else None


# The services of the SGD train split: "seen" unless --train-schema names another train schema.
SGD_TRAIN_SERVICES = frozenset([
    "Banks_1", "Buses_1", "Buses_2", "Calendar_1", "Events_1", "Events_2", "Flights_1", "Flights_2", "Homes_1",
    "Hotels_1", "Hotels_2", "Hotels_3", "Media_1", "Movies_1", "Music_1", "Music_2", "RentalCars_1",
    "RentalCars_2", "Restaurants_1", "RideSharing_1", "RideSharing_2", "Services_1", "Services_2", "Services_3",
    "Travel_1", "Weather_1"])


def seen_services(train_schema: str | None) -> set[str]:
    """Service names of a train schema.json (seen services); by default those of the SGD train split."""
    if not train_schema:
        return set(SGD_TRAIN_SERVICES)
    return {s["service_name"] for s in load_schemas(train_schema)}


class DstMetricsProjection:
    """Episodes -> per-frame metrics (checkpointed) -> dst_metrics.json, dst_metrics.txt, per_frame.jsonl."""

    name = "dst_metrics"
    version = 1

    def __init__(self, options: dict[str, Any]) -> None:
        # options["seen"]: service names counted as seen (from_arguments reads them from --train-schema)
        seen = options.get("seen")
        self.seen = set(SGD_TRAIN_SERVICES) if seen is None else set(seen)
        self.last_table = ""

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """``--train-schema``, for ``dialogsim project --to dst_metrics``."""
        parser.add_argument("--train-schema", metavar="PATH",
                            help="train-split schema.json whose services count as seen "
                                 "(default: the 26 services of the SGD train split)")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> "DstMetricsProjection":
        """The projection the command-line options ask for."""
        return cls({"seen": seen_services(args.train_schema) if args.train_schema else None})

    def fold_options(self) -> dict[str, Any]:
        return {}

    def fold(self, events: list[Any]) -> EpisodeScores | None:
        return score_episode(events)

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
        decoder = msgspec.json.Decoder(EpisodeScores)
        agg = Aggregator(self.seen)
        episodes = unscored = 0
        per_frame = bytearray()
        for raw in outputs:
            scores = decoder.decode(raw)
            episodes += 1
            unscored += scores.unscored_turns
            for f in scores.frames:
                agg.add(f.service, f.metrics)
                frame_id = f"{scores.dialogue_id}-{f.turn:03d}-{f.service}"
                per_frame += msgspec.json.encode({"frame": frame_id, **f.metrics}) + b"\n"
        result = agg.result()
        self.last_table = (metrics_table(result, agg.frames)
                           + f"{episodes} episodes with a tracked state; {unscored} user turns without a reply state\n")
        yield "dst_metrics.json", metrics_json(result)
        yield "dst_metrics.txt", self.last_table.encode()
        yield "per_frame.jsonl", bytes(per_frame)

    def summary(self) -> str:
        """The table of the last render."""
        return self.last_table.rstrip("\n")

