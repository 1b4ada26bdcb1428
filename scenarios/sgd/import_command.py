"""``dialogsim import sgd SRC_DIR --out RUN_DIR``: a real SGD split directory as an event log.

One episode per dialogue (episode id = dialogue id), every annotation kept; files are read one at a
time and their events written as they are converted, so memory does not grow with the corpus.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...engine.errors import UserError
from ...engine.events import Event
from ...engine.log import check_new_run_dir, write_events
from .sgdx import add_sgdx_arguments, sgdx_from_args


def configure(s: argparse.ArgumentParser) -> None:
    """The ``import sgd`` command's arguments."""
    s.description = "Import a Schema-Guided Dialogue split: one episode per dialogue."
    s.add_argument("src_dir", help="directory holding dialogues_*.json")
    s.add_argument("--out", required=True, help="run directory to create (must be absent or empty)")
    s.add_argument("--schema", help="schema.json of the split (default: SRC_DIR/schema.json)")
    s.add_argument("--skip-invalid", action="store_true",
                   help="import the valid dialogues and report how many were skipped")
    s.add_argument("--run-id", help="run id (default: sgd-<name of SRC_DIR>)")
    add_sgdx_arguments(s)
    s.set_defaults(handler=handle)


class ImportStats:
    """Counts of one import."""

    def __init__(self) -> None:
        self.files = 0
        self.dialogues = 0
        self.turns = 0
        self.skipped: list[tuple[Path, str]] = []  # (file, problem) per skipped dialogue
        self.skipped_files: list[str] = []  # problems of files skipped whole (not a list of dialogues)


def sgd_events(src: Path, schemas: dict[str, Any], run_id: str, *, skip_invalid: bool, sgdx: Any,
               stats: ImportStats) -> Iterator[Event]:
    """The events of every dialogue of a split directory, one file at a time."""
    from .corpus import (dialogue_files, dialogue_to_events, read_dialogue_file,
                                         read_dialogue_file_lenient, validate_dialogue)
    files = dialogue_files(src)
    if not files:
        raise UserError(f"{src}: no dialogues_*.json files")
    seen: set[str] = set()
    if sgdx is not None:
        sgdx.check(sorted(schemas), str(src))
        out_schemas = {sgdx.service(name): sgdx.schema(name) for name in schemas}
    else:
        out_schemas = schemas
    for path in files:
        if skip_invalid:
            try:
                dialogues, errors = read_dialogue_file_lenient(path)
            except UserError as exc:
                stats.skipped_files.append(str(exc))
                continue
            stats.skipped.extend((path, error.removeprefix(f"{path}: ")) for error in errors)
        else:
            dialogues = read_dialogue_file(path)
        stats.files += 1
        for dialogue in dialogues:
            problem = validate_dialogue(dialogue, schemas)
            if problem is None and dialogue.dialogue_id in seen:
                problem = f"dialogue {dialogue.dialogue_id}: duplicate dialogue id"
            if problem is not None:
                if not skip_invalid:
                    raise UserError(f"{path}: {problem}")
                stats.skipped.append((path, problem))
                continue
            seen.add(dialogue.dialogue_id)
            if sgdx is not None:
                dialogue = sgdx.dialogue(dialogue)
            stats.dialogues += 1
            stats.turns += len(dialogue.turns)
            yield from dialogue_to_events(dialogue, run_id, out_schemas)


def import_sgd(src: str | Path, out: str | Path, *, schema: str | Path | None = None, skip_invalid: bool = False,
               sgdx: Any = None, run_id: str | None = None) -> ImportStats:
    """Import an SGD split directory into a new run directory; nothing is left behind on error."""
    from .schema import load_schemas
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise UserError(f"{src}: no such directory")
    schema_path = Path(schema) if schema is not None else src / "schema.json"
    if not schema_path.is_file():
        raise UserError(f"{schema_path}: no schema.json (pass --schema PATH)")
    check_new_run_dir(out)  # before the schemas are read
    schemas = {s["service_name"]: s for s in load_schemas(schema_path)}
    run_id = run_id or f"sgd-{src.resolve().name}"
    stats = ImportStats()
    config = {"command": "import sgd", "source": str(src.resolve()), "schema": str(schema_path.resolve()),
              "sgdx": getattr(sgdx, "variant", None)}
    write_events(out, sgd_events(src, schemas, run_id, skip_invalid=skip_invalid, sgdx=sgdx, stats=stats),
                 run_id=run_id, config=config)
    return stats


def handle(args: argparse.Namespace) -> int:
    stats = import_sgd(args.src_dir, args.out, schema=args.schema, skip_invalid=args.skip_invalid,
                       sgdx=sgdx_from_args(args), run_id=args.run_id)
    print(f"imported {stats.dialogues} dialogues ({stats.turns} turns) from {stats.files} files into {args.out}")
    report_skipped(stats)
    return 0


def report_skipped(stats: ImportStats) -> None:
    """On stderr: how many dialogues were skipped, in which files, and the first problem of each file."""
    per_file: dict[Path, list[str]] = {}
    for path, problem in stats.skipped:
        per_file.setdefault(path, []).append(problem)
    if per_file:
        print(f"skipped {len(stats.skipped)} invalid dialogue(s) in {len(per_file)} file(s):", file=sys.stderr)
        for path, problems in per_file.items():
            print(f"  {path}: {len(problems)} skipped; first: {problems[0]}", file=sys.stderr)
    if stats.skipped_files:
        print(f"skipped {len(stats.skipped_files)} unreadable file(s):", file=sys.stderr)
        for problem in stats.skipped_files:
            print(f"  {problem}", file=sys.stderr)
