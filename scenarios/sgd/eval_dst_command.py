"""``dialogsim eval-dst --ref SGD_DIR --pred SGD_DIR``: the official SGD DST metrics of any predictions.

Reads the reference split (dialogues_*.json and its schema.json) and a prediction directory in SGD format
(every *.json except schema.json and dialogues_and_metrics.json, as the official evaluation reads it),
scores each user frame of each predicted dialogue, and prints the table; ``--out FILE`` writes the metrics
JSON exactly as the official evaluate.py writes its output file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Literal

import msgspec

from ...engine.errors import UserError
from .dst_metrics import Aggregator, frame_metrics, metrics_json, metrics_table, seen_services

_SKIP = {"schema.json", "dialogues_and_metrics.json"}


def configure(p: argparse.ArgumentParser) -> None:
    """The ``eval-dst`` command's arguments."""
    p.description = ("Official SGD DST metrics (joint/average goal accuracy, intent accuracy, requested slots F1, "
                     "slot tagging F1) of a prediction directory.")
    p.add_argument("--ref", required=True, help="reference split directory (dialogues_*.json)")
    p.add_argument("--pred", required=True, help="prediction directory (SGD-format *.json)")
    p.add_argument("--schema", help="schema.json of the reference split (default: REF/schema.json)")
    p.add_argument("--train-schema", metavar="PATH", help="train-split schema.json whose services count as seen "
                        "(default: the 26 services of the SGD train split)")
    p.add_argument("--out", help="write the metrics JSON here (official layout)")
    p.add_argument("--per-frame", metavar="FILE",
                   help="write each scored frame's metrics as JSON lines ({\"frame\": \"<dialogue>-<turn>-<service>\", ...})")
    p.add_argument("--no-fuzzy-match", action="store_true",
                   help="exact match for non-categorical values (the official MultiWOZ-style option)")
    p.add_argument("--joint-acc-across-turn", action="store_true",
                   help="joint accuracies over all frames of a turn (the official MultiWOZ-style option)")
    p.set_defaults(handler=handle)





def _load(path: Path) -> Any:
    try:
        return msgspec.json.decode(path.read_bytes())
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    except msgspec.DecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None


class _Span(msgspec.Struct):
    slot: str
    start: int
    exclusive_end: int


class _State(msgspec.Struct):
    active_intent: str
    requested_slots: list[str]
    slot_values: dict[str, list[str]]


class _Frame(msgspec.Struct):
    service: str
    state: _State | None = None
    slots: list[_Span] = []


class _Turn(msgspec.Struct):
    speaker: Literal["USER", "SYSTEM"]
    utterance: str
    frames: list[_Frame]


class _Dialogue(msgspec.Struct):
    """What the evaluation reads of a dialogue, reference or prediction (other keys are ignored)."""

    dialogue_id: str
    turns: list[_Turn]
    services: list[str] = []


def read_split(files: list[Path], sources: dict[str, Path] | None = None) -> dict[str, dict[str, Any]]:
    """Dialogue id -> dialogue over some SGD files (a list of dialogues or a dict of them per file).

    Every dialogue is checked for the keys and types the evaluation reads, so a malformed one is one
    error naming the file, dialogue and turn; ``sources`` (when given) gets each dialogue's file.
    """
    from .corpus import describe_invalid
    out: dict[str, dict[str, Any]] = {}
    origin: dict[str, Path] = {} if sources is None else sources
    for path in files:
        data = _load(path)
        items = list(data.values()) if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise UserError(f"{path}: not an SGD dialogue file (expected a list of dialogues)")
        for index, d in enumerate(items):
            try:
                msgspec.convert(d, _Dialogue)
            except msgspec.ValidationError as exc:
                raise UserError(describe_invalid(path, index, d, exc)) from None
            dialogue_id = d["dialogue_id"]
            if dialogue_id in out:
                raise UserError(f"{path}: dialogue {dialogue_id} also appears in {origin[dialogue_id]}")
            out[dialogue_id] = d
            origin[dialogue_id] = path
    return out


def evaluate(ref: dict[str, dict[str, Any]], hyp: dict[str, dict[str, Any]], schemas: dict[str, Any],
             seen: set[str] | None, *, fuzzy: bool = True, joint_across_turn: bool = False,
             per_frame: list[dict[str, Any]] | None = None,
             sources: dict[str, Path] | None = None) -> tuple[dict[str, dict[str, float]], int]:
    """Aggregated metrics of ``hyp`` against ``ref`` as the official evaluation computes them, and the frame count.

    ``sources`` maps prediction dialogue ids to their files, to name the file in errors.
    """
    agg = Aggregator(seen, joint_across_turn)
    for dialogue_id, d_hyp in hyp.items():
        source = f"{sources[dialogue_id]}: " if sources and dialogue_id in sources else ""
        d_ref = ref.get(dialogue_id)
        if d_ref is None:
            raise UserError(f"{source}prediction dialogue {dialogue_id} is not in the reference")
        if set(d_ref.get("services", [])) != set(d_hyp.get("services", [])):
            raise UserError(f"{source}dialogue {dialogue_id}: services differ between reference and prediction")
        for index, (t_ref, t_hyp) in enumerate(zip(d_ref["turns"], d_hyp["turns"])):
            where = f"{source}dialogue {dialogue_id}, turn {index}"
            if t_ref.get("speaker") != t_hyp.get("speaker"):
                raise UserError(f"{where}: speakers differ")
            if t_ref.get("speaker") != "USER":
                continue
            if t_ref.get("utterance") != t_hyp.get("utterance"):
                raise UserError(f"{where}: utterances differ")
            hyp_frames = {f["service"]: f for f in t_hyp.get("frames", [])}
            scored = []
            for f_ref in t_ref.get("frames", []):
                service = f_ref["service"]
                f_hyp = hyp_frames.get(service)
                if f_hyp is None:
                    raise UserError(f"{where}: no predicted frame for service {service}")
                if service not in schemas:
                    raise UserError(f"{where}: service {service} is not in the reference schema")
                if "state" not in f_hyp or "state" not in f_ref:
                    raise UserError(f"{where}: frame for {service} has no 'state'")
                metrics = frame_metrics(f_ref["state"], f_hyp["state"], schemas[service],
                                        utterance=t_ref["utterance"], ref_spans=f_ref.get("slots", []),
                                        hyp_spans=f_hyp.get("slots"), fuzzy=fuzzy)
                scored.append((service, metrics))
                if per_frame is not None:
                    per_frame.append({"frame": f"{dialogue_id}-{index:03d}-{service}", **metrics})
            agg.add_turn(scored)
    return agg.result(), agg.frames


def _write_all(outputs: list[tuple[Path, bytes]]) -> None:
    """Write every file under a temporary name, then rename them all: an error or Ctrl-C leaves none half-written."""
    tmps = [path.with_name(f".{path.name}.tmp") for path, _ in outputs]
    try:
        for tmp, (_, data) in zip(tmps, outputs):
            tmp.write_bytes(data)
    except BaseException:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, (path, _) in zip(tmps, outputs):
        os.replace(tmp, path)


def handle(args: argparse.Namespace) -> int:
    from .schema import load_schemas
    from .corpus import dialogue_files
    ref_dir, pred_dir = Path(args.ref), Path(args.pred)
    for d in (ref_dir, pred_dir):
        if not d.is_dir():
            raise UserError(f"{d}: no such directory")
    schema_path = Path(args.schema) if args.schema else ref_dir / "schema.json"
    if not schema_path.is_file():
        raise UserError(f"{schema_path}: no schema.json (pass --schema PATH)")
    schemas = {s["service_name"]: s for s in load_schemas(schema_path)}
    ref = read_split(dialogue_files(ref_dir))
    if not ref:
        raise UserError(f"{ref_dir}: no dialogues_*.json files")
    pred_files = sorted(p for p in pred_dir.glob("*.json") if p.name not in _SKIP)
    if not pred_files:
        raise UserError(f"{pred_dir}: no prediction files (*.json other than {' and '.join(sorted(_SKIP))})")
    sources: dict[str, Path] = {}
    hyp = read_split(pred_files, sources)
    if not hyp:
        raise UserError(f"{pred_dir}: the prediction files hold no dialogues")
    per_frame: list[dict[str, Any]] | None = [] if args.per_frame else None
    result, frames = evaluate(ref, hyp, schemas, seen_services(args.train_schema), fuzzy=not args.no_fuzzy_match,
                              joint_across_turn=args.joint_acc_across_turn, per_frame=per_frame, sources=sources)
    outputs: list[tuple[Path, bytes]] = []
    if args.out:
        outputs.append((Path(args.out), metrics_json(result)))
    if per_frame is not None:
        outputs.append((Path(args.per_frame), b"".join(msgspec.json.encode(row) + b"\n" for row in per_frame)))
    _write_all(outputs)
    sys.stdout.write(metrics_table(result, frames))
    print(f"{len(hyp)} predicted dialogues of {len(ref)} in the reference")
    return 0
