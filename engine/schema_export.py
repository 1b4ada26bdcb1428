"""Write the event JSON Schema to engine/events.schema.json: ``python -m dialogsim.engine.schema_export``."""

from __future__ import annotations

import sys
from pathlib import Path

from .codec import SCHEMA_PATH, json_schema_text


def main(argv: list[str] | None = None) -> int:
    """Export the schema (to a path given as the first argument, else into the package)."""
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else SCHEMA_PATH
    target.write_text(json_schema_text(), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
