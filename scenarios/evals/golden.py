"""The golden dataset format: ``{"golden_questions": [...]}``, read with checks and written as real files are.

A question is ``{id, user_inputs[], agents_evaluated[], metadata{}, reference_data{reference_tool_interactions
[{tool_name, input_arguments}], reference_trajectory[], reference_state_variables{}}}`` (FORMATS.md section 4).
Keys the format does not name (``updated_datetime``, custom reference keys) are kept as they are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from ...engine.errors import UserError


class ToolInteraction(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A tool call the agent must make; no ``input_arguments`` means any arguments will do."""

    tool_name: str
    input_arguments: dict[str, Any] | None = None


class ReferenceData(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The ground truth of a question; a field that is absent is not scored."""

    reference_tool_interactions: list[ToolInteraction] | None = None
    reference_trajectory: list[str] | None = None
    reference_state_variables: dict[str, Any] | None = None


class GoldenQuestion(msgspec.Struct, kw_only=True):
    """One test session: what the user says, which agents should answer, and the reference to grade by."""

    id: str
    user_inputs: list[str]
    agents_evaluated: list[str]
    metadata: dict[str, Any] = {}
    reference_data: ReferenceData


class GoldenFile(msgspec.Struct):
    """A whole golden dataset."""

    golden_questions: list[GoldenQuestion]


class LoadedQuestion(msgspec.Struct, kw_only=True):
    """A checked question and the raw object it was read from (which keeps the keys the format does not name)."""

    question: GoldenQuestion
    raw: dict[str, Any]


_AT = re.compile(r"^(.*) - at `\$\.?(.*)`$")
_FIELD = re.compile(r"field `([^`]*)`")


def read_json(path: str | Path, what: str) -> Any:
    """A JSON file's content; an unreadable or malformed file is one UserError line naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a {what}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None


def convert_item(raw: Any, cls: type, where: str) -> Any:
    """``msgspec.convert(raw, cls)``; a mismatch is a UserError ``WHERE: FIELD: problem``."""
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as exc:
        text = str(exc)
        match = _AT.match(text)
        if match:
            problem, field = match.group(1), match.group(2) or "(the whole item)"
        else:
            named = _FIELD.search(text)
            problem, field = text, named.group(1) if named else "(the whole item)"
        raise UserError(f"{where}: {field}: {problem}") from None


def load_golden(path: str | Path) -> list[LoadedQuestion]:
    """The questions of a golden file, checked: one UserError line names the file, question and field."""
    data = read_json(path, "golden file")
    questions = data.get("golden_questions") if isinstance(data, dict) else None
    if not isinstance(questions, list):
        raise UserError(f"{path}: expected a JSON object with a 'golden_questions' list")
    if not questions:
        raise UserError(f"{path}: 'golden_questions' is empty")
    out: list[LoadedQuestion] = []
    seen: set[str] = set()
    for i, raw in enumerate(questions):
        qid = raw.get("id") if isinstance(raw, dict) else None
        where = f"{path}: question {qid!r}" if isinstance(qid, str) and qid else f"{path}: question #{i + 1}"
        if not isinstance(raw, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(raw).__name__}")
        question = convert_item(raw, GoldenQuestion, where)
        if not question.id:
            raise UserError(f"{where}: id: must not be empty")
        if question.id in seen:
            raise UserError(f"{where}: id: used by an earlier question too")
        if not question.user_inputs:
            raise UserError(f"{where}: user_inputs: needs at least one user input")
        seen.add(question.id)
        out.append(LoadedQuestion(question=question, raw=raw))
    return out


def encode_golden(questions: list[GoldenQuestion]) -> bytes:
    """A golden file's bytes: four-space indent and a final newline, as the real files are laid out."""
    compact = msgspec.json.encode(GoldenFile(golden_questions=questions))
    return msgspec.json.format(compact, indent=4) + b"\n"
