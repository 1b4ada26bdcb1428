"""Reading the family's input files (states, personas): the text, and JSON lines with each bad line named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...engine.errors import UserError


def read_text(path: Path, what: str) -> str:
    """The text of ``path``, or a UserError saying it cannot be read as a file of ``what``."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read {what} ({exc})") from None


def json_lines(path: Path, text: str) -> list[tuple[str, Any]]:
    """("line N", value) for each non-blank line of JSON-lines ``text``; a UserError names a line that is not JSON."""
    rows = []
    for lineno, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 may sit in a string
        if line.strip():
            try:
                rows.append((f"line {lineno}", json.loads(line)))
            except ValueError as exc:
                raise UserError(f"{path}: line {lineno}: not JSON ({exc})") from None
    return rows
