"""States: the bundled MBPP test split, synthetic states, state files, and the ``proactive`` scenario set."""

from __future__ import annotations

import json

import pytest

from dialogsim.engine.errors import UserError
from dialogsim.engine.registry import load_scenarios
from dialogsim.scenarios.proactive.states import (bundled_mbpp, bundled_states, load_state_file, mbpp_tests,
                                                  synthetic_state)

from ...conftest import SHARED

STATE_KEYS = ["id", "domain", "query", "dialogue_turn", "query_clarity", "task_complexity", "prev_reject"]


def test_bundled_mbpp_is_the_test_split():
    """500 full rows and 257 sanitized ones, task_id 11-510, ids mbpp-(task_id - 11)."""
    full, sanitized = bundled_mbpp(), bundled_mbpp(sanitized=True)
    assert len(full) == 500 and [r["task_id"] for r in full] == list(range(11, 511))
    assert len(sanitized) == 257 and all(11 <= r["task_id"] <= 510 for r in sanitized)
    states, solutions = bundled_states()
    assert [s["id"] for s in states] == [f"mbpp-{i}" for i in range(500)]
    assert list(states[0]) == [*STATE_KEYS, "mbpp_tests"]
    assert states[0] == {
        "id": "mbpp-0", "domain": "coding",
        "query": "Write a Python function: Write a python function to remove first and last occurrence of a "
                 "given character from the string.",
        "dialogue_turn": 1, "query_clarity": 0.6, "task_complexity": 0.6, "prev_reject": 0,
        "mbpp_tests": 'assert remove_Occ("hello","l") == "heo"\nassert remove_Occ("abcda","a") == "bcd"\n'
                      'assert remove_Occ("PHP","P") == "H"'}
    assert solutions["mbpp-0"].startswith("def remove_Occ(s,ch): \r\n")


def test_bundled_mbpp_equals_the_shared_copy():
    """The bundled rows are those of ../shared/mbpp (when that is present)."""
    path = SHARED / "mbpp" / "mbpp.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not present (only on the development machines)")
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert list(bundled_mbpp()) == [r for r in lines if 11 <= r["task_id"] <= 510]
    sanitized = json.loads((SHARED / "mbpp" / "sanitized-mbpp.json").read_text(encoding="utf-8"))
    assert list(bundled_mbpp(sanitized=True)) == [r for r in sanitized if 11 <= r["task_id"] <= 510]


def test_tests_put_imports_first_and_setup_after_the_solution():
    """Setup code (task 367) comes before the asserts, imports (sanitized) before everything."""
    full = {r["task_id"]: r for r in bundled_mbpp()}
    tests = mbpp_tests(full[367])
    assert tests.startswith("root = Node(1) \nroot.left = Node(2)") and "\r" not in tests
    assert tests.index("root2.left.left.left = Node(7)") < tests.index("assert is_tree_balanced(root) == False")
    sanitized = [r for r in bundled_mbpp(sanitized=True) if r["test_imports"]]
    assert sanitized and all(mbpp_tests(r).startswith(r["test_imports"][0] + "\nassert ") for r in sanitized)
    states, _ = bundled_states(sanitized=True)
    assert states[0]["id"] == f"mbpp-{bundled_mbpp(sanitized=True)[0]['task_id'] - 11}"


def test_synthetic_states_have_no_tests_key():
    """Synthetic states: the original's queries and defaults, id {domain}-{i}, no mbpp_tests key at all."""
    assert synthetic_state("planning", 3) == {
        "id": "planning-3", "domain": "planning", "query": "帮我规划今天的待办", "dialogue_turn": 1,
        "query_clarity": 0.6, "task_complexity": 0.6, "prev_reject": 0}
    assert list(synthetic_state("coding", 0)) == STATE_KEYS


def test_state_file_defaults_and_conversions(tmp_path):
    """Rows get the dataset defaults (clarity/complexity 0.5, turn 1, no reject, id ds-i, mbpp_tests null)."""
    path = tmp_path / "states.jsonl"
    path.write_text(json.dumps({"query": "plan my day", "domain": "planning"}) + "\n"
                    + json.dumps({"id": "x", "query": "q", "dialogue_turn": "2", "query_clarity": 1,
                                  "mbpp_tests": "assert True", "extra": 1}, ensure_ascii=False) + "\n")
    states, solutions = load_state_file(path)
    assert states == [
        {"id": "ds-0", "domain": "planning", "query": "plan my day", "dialogue_turn": 1, "query_clarity": 0.5,
         "task_complexity": 0.5, "prev_reject": 0, "mbpp_tests": None},
        {"id": "x", "domain": "coding", "query": "q", "dialogue_turn": 2, "query_clarity": 1.0,
         "task_complexity": 0.5, "prev_reject": 0, "mbpp_tests": "assert True"}]
    assert solutions == {}


def test_state_file_of_mbpp_rows(tmp_path):
    """A file of MBPP rows (JSONL, or a JSON array as sanitized-mbpp.json) gives MBPP states by row index."""
    rows = list(bundled_mbpp())[5:7]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rows.json").write_text(json.dumps(list(bundled_mbpp(sanitized=True))[:2], indent=2))
    states, solutions = load_state_file(tmp_path / "rows.jsonl")
    assert [s["id"] for s in states] == ["mbpp-0", "mbpp-1"]
    assert states[1]["mbpp_tests"] == mbpp_tests(rows[1]) and solutions["mbpp-1"] == rows[1]["code"]
    assert [s["id"] for s in load_state_file(tmp_path / "rows.json")[0]] == ["mbpp-0", "mbpp-1"]


@pytest.mark.parametrize("content, problem", [
    ('{"query": "q"}\nnot json\n', "line 2: not JSON"),
    ('{"query": "q", "domain": "cooking"}\n', "line 1: domain 'cooking'"),
    ('{"id": "a"}\n', "line 1: the state has no query"),
    ('{"query": "q", "dialogue_turn": "two"}\n', "line 1: a number of the state is not a number"),
    ('[1]', "item 0: not a JSON object"),
    ('\n\n', "no states in the file"),
])
def test_bad_state_files_name_the_line(tmp_path, content, problem):
    """A bad row is one clear error naming the file and the line."""
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(UserError, match=problem):
        load_state_file(path)


def test_scenario_set_specs(tmp_path):
    """proactive:mbpp (default), mbpp:sanitized, synthetic[:domain] and FILE load through the registry."""
    mbpp = load_scenarios("proactive:mbpp")
    scenario, trial = mbpp.draw(501, seed=0)
    assert (scenario.id, scenario.kind, trial) == ("mbpp-1", "proactive", 1)
    assert scenario.data == bundled_states()[0][1]
    assert mbpp.solution(scenario) == bundled_mbpp()[1]["code"]
    assert mbpp.tools(scenario) == [] and mbpp.world(scenario, None).call("S", "m", {})[0] is None
    assert len(load_scenarios("proactive:mbpp:sanitized").scenarios) == 257
    assert load_scenarios("proactive").draw(0, 0)[0].id == "mbpp-0"
    planning = load_scenarios("proactive:synthetic:planning")
    assert planning.draw(7, 0)[0].data == synthetic_state("planning", 7)
    assert load_scenarios("proactive:synthetic").draw(0, 0)[0].id == "coding-0"
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": 5, "query": "q"}\n')
    assert load_scenarios(f"proactive:{path}").draw(0, 0)[0].id == "5"
    with pytest.raises(UserError, match="synthetic domain"):
        load_scenarios("proactive:synthetic:cooking")
    with pytest.raises(UserError, match="not mbpp, mbpp:sanitized"):
        load_scenarios("proactive:/no/such/file.jsonl")
