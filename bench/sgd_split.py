"""The SGD split the I/O benchmarks read: ``--src``/``--schema``, else the real dev split in ../shared/sgd, else
the in-repo fixture repeated to a size worth timing."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "sgd"
FIXTURES = ROOT / "tests" / "fixtures" / "sgd"


def add_split_arguments(parser: argparse.ArgumentParser) -> None:
    """``--src DIR`` and ``--schema PATH``."""
    parser.add_argument("--src", type=Path, help="SGD split directory (default: ../shared/sgd/dev)")
    parser.add_argument("--schema", type=Path, help="its schema.json")


def chosen_split(args: argparse.Namespace, tmp: Path, copies: int) -> tuple[Path, Path | None]:
    """The split directory and its schema (None: the directory's own), the fixture ``copies`` times over in
    ``tmp`` when neither ``--src`` nor ../shared is there."""
    if args.src is not None:
        return args.src, args.schema
    if (SHARED / "dev").is_dir():
        return SHARED / "dev", SHARED / "schemas" / "dev" / "schema.json"
    print(f"../shared/sgd not found: using the in-repo fixture repeated {copies} times (figures are rough)")
    return fixture_split(tmp / "fixture", copies), None


def fixture_split(directory: Path, copies: int) -> Path:
    """The fixture dialogues repeated ``copies`` times (new ids) as a split directory of 128-dialogue files."""
    base = json.loads((FIXTURES / "dialogues_001.json").read_text())
    dialogues = []
    for n in range(copies):
        for d in base:
            dialogues.append({**d, "dialogue_id": f"{d['dialogue_id']}-{n}"})
    directory.mkdir(parents=True)
    for i in range(0, len(dialogues), 128):
        (directory / f"dialogues_{i // 128 + 1:03d}.json").write_text(json.dumps(dialogues[i:i + 128], indent=2))
    shutil.copy(FIXTURES / "schema.json", directory / "schema.json")
    return directory
