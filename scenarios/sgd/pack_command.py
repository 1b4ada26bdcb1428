"""``dialogsim pack build``: mine SGD dialogues and schemas into a scenario pack directory."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from ...engine.oplog import get_logger


def configure(build: argparse.ArgumentParser) -> None:
    """The ``pack build`` command's arguments."""
    build.add_argument("--sgd", nargs="*", default=[], metavar="DIALOGUE_DIR",
                       help="SGD split directories (dialogues_*.json) or dialogue files to mine")
    build.add_argument("--schemas", nargs="+", required=True, metavar="SCHEMA_JSON",
                       help="schema.json files; every service of the pack (those without dialogues get generated data)")
    build.add_argument("--out", required=True, metavar="PACK_DIR", help="pack directory to write (replaced atomically)")
    build.add_argument("--no-progress", action="store_true", help="no progress bar")
    build.set_defaults(handler=_build)


def _build(args: argparse.Namespace) -> int:
    from .pack import build_pack

    def progress(files):
        return tqdm(files, desc="mining", unit="file", file=sys.stderr, disable=args.no_progress)

    manifest = build_pack(args.sgd, args.schemas, args.out, progress=progress)
    get_logger("pack").info("pack built", path=args.out, id=manifest["id"], **manifest["counts"])
    print(f"{args.out}: pack {manifest['id']} ({manifest['counts']['services']} services, "
          f"{manifest['counts']['dialogues']} dialogues mined)")
    return 0
