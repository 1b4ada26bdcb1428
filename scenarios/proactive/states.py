"""States, the scenarios of the preference-trajectory family: MBPP tasks, synthetic states, and state files.

A state is ``{id, domain, query, dialogue_turn, query_clarity, task_complexity, prev_reject}``, plus
``mbpp_tests`` for states loaded from a dataset (synthetic states have no such key). MBPP's test split
(task_id 11-510, full or sanitized) is bundled in ``data/`` (CC BY 4.0, see data/ATTRIBUTION.md).
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...engine.errors import UserError
from .jsonfile import json_lines, read_text

DATA_DIR = Path(__file__).with_name("data")
MBPP_QUERY = "Write a Python function: "
MBPP_FIRST_TEST_TASK = 11  # the test split is task_id 11-510; the original's mbpp-i is task_id 11 + i
SYNTHETIC_QUERIES = {"coding": "帮我写个 Python 爬虫", "planning": "帮我规划今天的待办"}  # the original's


def mbpp_tests(row: dict[str, Any]) -> str:
    """The test program of an MBPP row: its imports, its setup code (run after the solution), its asserts."""
    setup = (row.get("test_setup_code") or "").replace("\r\n", "\n")
    return "\n".join([*row.get("test_imports", []), *([setup] if setup else []), *row["test_list"]])


def mbpp_state(row: dict[str, Any], index: int) -> dict[str, Any]:
    """The state of an MBPP row (full config: ``text``; sanitized: ``prompt``), with id ``mbpp-{index}``."""
    text = row["text"] if "text" in row else row["prompt"]
    return {"id": f"mbpp-{index}", "domain": "coding", "query": MBPP_QUERY + text.strip(), "dialogue_turn": 1,
            "query_clarity": 0.6, "task_complexity": 0.6, "prev_reject": 0, "mbpp_tests": mbpp_tests(row)}


def synthetic_state(domain: str, index: int) -> dict[str, Any]:
    """The ``index``-th synthetic state of ``domain`` (the original's query and defaults)."""
    return {"id": f"{domain}-{index}", "domain": domain, "query": SYNTHETIC_QUERIES[domain], "dialogue_turn": 1,
            "query_clarity": 0.6, "task_complexity": 0.6, "prev_reject": 0}


@lru_cache(maxsize=2)
def bundled_mbpp(sanitized: bool = False) -> tuple[dict[str, Any], ...]:
    """The bundled MBPP test-split rows (task_id 11-510), full (500) or sanitized (257), in task order."""
    name = "sanitized_test.jsonl.gz" if sanitized else "mbpp_test.jsonl.gz"
    with gzip.open(DATA_DIR / name, "rt", encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f)


def bundled_states(sanitized: bool = False) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The MBPP test split as states, and each state's reference solution by state id.

    Sanitized rows keep the id of the same task in the full split (``mbpp-{task_id - 11}``).
    """
    states, solutions = [], {}
    for row in bundled_mbpp(sanitized):
        state = mbpp_state(row, row["task_id"] - MBPP_FIRST_TEST_TASK)
        states.append(state)
        solutions[state["id"]] = row["code"]
    return states, solutions


def load_state_file(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """States from a file of states (JSONL) or of MBPP rows (JSONL, or a JSON array as sanitized-mbpp.json)."""
    path = Path(path)
    text = read_text(path, "states")
    states, solutions = [], {}
    for index, (where, row) in enumerate(_rows(path, text)):
        if not isinstance(row, dict):
            raise UserError(f"{path}: {where}: not a JSON object")
        if "task_id" in row and "test_list" in row:
            state = _mbpp_row_state(path, where, row, index)
            solutions[state["id"]] = row.get("code", "")
        else:
            state = dataset_state(path, where, row, index)
        states.append(state)
    if not states:
        raise UserError(f"{path}: no states in the file")
    return states, solutions


def _rows(path: Path, text: str) -> list[tuple[str, Any]]:
    """(where, value) per item: the elements of a JSON array, or the non-blank lines of JSON lines."""
    if text.lstrip().startswith("["):
        try:
            return [(f"item {i}", item) for i, item in enumerate(json.loads(text))]
        except ValueError as exc:
            raise UserError(f"{path}: not a JSON array ({exc})") from None
    return json_lines(path, text)


def _mbpp_row_state(path: Path, where: str, row: dict[str, Any], index: int) -> dict[str, Any]:
    try:
        if not isinstance(row.get("text", row.get("prompt")), str) or not all(
                isinstance(t, str) for t in [*row["test_list"], *row.get("test_imports", [])]):
            raise TypeError("text/prompt and tests must be strings")
        return mbpp_state(row, index)
    except (KeyError, TypeError, AttributeError) as exc:
        raise UserError(f"{path}: {where}: not an MBPP row ({exc})") from None


def dataset_state(path: Path, where: str, row: dict[str, Any], index: int) -> dict[str, Any]:
    """A state read from a dataset row as the original loads it: defaults 0.5/0.5/turn 1/no reject, id ``ds-{i}``."""
    domain = row.get("domain", "coding")
    if domain not in SYNTHETIC_QUERIES:
        raise UserError(f"{path}: {where}: domain {domain!r} is neither 'coding' nor 'planning'")
    if not isinstance(row.get("query"), str):
        raise UserError(f"{path}: {where}: the state has no query (a string)")
    state_id = row.get("id", f"ds-{index}")
    if isinstance(state_id, (dict, list)):
        raise UserError(f"{path}: {where}: id must be a string or a number")
    try:
        return {"id": state_id, "domain": domain, "query": row["query"],
                "dialogue_turn": int(row.get("dialogue_turn", 1)),
                "query_clarity": float(row.get("query_clarity", 0.5)),
                "task_complexity": float(row.get("task_complexity", 0.5)),
                "prev_reject": int(row.get("prev_reject", 0)), "mbpp_tests": row.get("mbpp_tests")}
    except (TypeError, ValueError) as exc:
        raise UserError(f"{path}: {where}: a number of the state is not a number ({exc})") from None
