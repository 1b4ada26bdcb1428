"""The reward step: interrupt cost, task score in the sandbox, pair tie-breaking, import -> preference pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dialogsim.engine.errors import UserError
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import projection as get_projection
from dialogsim.scenarios.proactive.importer import import_trajectories
from dialogsim.scenarios.proactive.reward import (dpo_action_row, dpo_row, interrupt_cost, preference_pairs,
                                                 program, render_state, state_tests)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trajectories"
MIXED = FIXTURES / "mbpp_mixed.jsonl"
SYNTHETIC = FIXTURES / "original_synthetic.jsonl"
# Whether each record of mbpp_mixed.jsonl passes its tests (None: no tests), as the fixture was written:
# reference solutions pass, a question before code or a wrong function fails.
MIXED_PASSES = [False, True, True, False, False, True, True, False, False, None, None, None, True, True, False]


def rec(sid, action, message="", reject=0, domain="planning", tests=None, **state):
    """A minimal record of state ``sid``."""
    st = {"id": sid, "domain": domain, "query": "q", **state}
    if tests is not None:
        st["mbpp_tests"] = tests
    return {"state": st, "action": action, "assistant_msg": message,
            "user_reaction": {"user_reply": "", "meta": {"reject_signal": reject}}}


def never_run(programs):
    raise AssertionError(f"no program should run: {programs}")


@pytest.mark.parametrize("questions, reject, words, cost", [
    (0, 0, 10, 0.0),
    (1, 0, 10, 0.24),
    (3, 0, 10, 0.7200000000000001),  # 0.6 * 1.2000000000000002
    (2, 1, 201, 1.26),
    (0, 1.0, 200, 0.6),  # a float signal counts as its int; 200 words is not long
    (0, "1", 0, 0.6),  # int("1"), as the original
])
def test_interrupt_cost(questions, reject, words, cost):
    """0.6 * (0.4 q + 1.0 reject + 0.3 [n > 200] + 0.7 * 0), in that float order."""
    assert repr(interrupt_cost({"reject_signal": reject}, questions, words)) == repr(cost)


def test_which_states_have_tests():
    """Tests run only for coding states with non-empty mbpp_tests; a non-string is an error."""
    assert state_tests({"domain": "coding", "mbpp_tests": "assert 1"}) == "assert 1"
    assert [state_tests(s) for s in ({"domain": "planning", "mbpp_tests": "assert 1"}, {"domain": "coding"},
                                  {"domain": "coding", "mbpp_tests": None}, {"domain": "coding", "mbpp_tests": ""})
            ] == [None] * 4
    with pytest.raises(ValueError):
        state_tests({"domain": "coding", "mbpp_tests": ["assert 1"]})
    assert program("def f(): return 1", "assert f() == 1") == "def f(): return 1\n\nassert f() == 1\n"


def test_full_tie_chooses_the_first_and_rejects_the_last():
    """Equal rewards: chosen is the first action in file order, rejected the last; the pair is written."""
    rows = [rec("s", a) for a in ("MID", "LOW", "HIGH")]
    [pair] = preference_pairs(rows, never_run)
    assert (pair["chosen_action"], pair["rejected_action"]) == ("MID", "HIGH")
    assert pair["rewards"] == {"MID": 0.6, "LOW": 0.6, "HIGH": 0.6}
    assert list(pair) == ["state", "chosen_action", "rejected_action", "chosen_text", "rejected_text", "rewards",
                          "task_scores", "interrupt_costs"]


def test_ties_among_best_and_worst():
    """The first of the best and the last of the worst, by file order."""
    rows = [rec("s", "A", "x?"), rec("s", "B"), rec("s", "C", "y?"), rec("s", "D")]
    [pair] = preference_pairs(rows, never_run)
    assert (pair["chosen_action"], pair["rejected_action"]) == ("B", "C")
    assert pair["interrupt_costs"] == {"A": 0.24, "B": 0.0, "C": 0.24, "D": 0.0}


def test_a_later_record_replaces_the_scores_but_not_the_entries():
    """Two records of one action: the later's scores (and text, and state) count, and it may pair with itself."""
    rows = [rec("s", "LOW", "first"), rec("s", "LOW", "second?", version=2)]
    [pair] = preference_pairs(rows, never_run)
    assert (pair["chosen_action"], pair["rejected_action"]) == ("LOW", "LOW")
    assert pair["chosen_text"] == pair["rejected_text"] == "second?"
    assert pair["state"]["version"] == 2 and pair["rewards"] == {"LOW": 0.36}
    rows = [rec("s", "LOW", "a?"), rec("s", "MID"), rec("s", "LOW", "b")]
    [pair] = preference_pairs(rows, never_run)
    assert pair["rewards"] == {"LOW": 0.6, "MID": 0.6}  # the first LOW's 0.36 was replaced
    assert (pair["chosen_action"], pair["rejected_action"]) == ("LOW", "LOW")


def test_grouping_by_state_id():
    """Pairs per state id in order of first record; single records are skipped; no id groups as "unknown"."""
    rows = [rec("b", "LOW"), rec("a", "LOW"), rec("b", "HIGH", "?"), rec("c", "LOW")]
    rows += [{**rec("x", "LOW"), "state": {"domain": "planning"}}, {**rec("x", "MID"), "state": {"domain": "planning"}}]
    pairs = preference_pairs(rows, never_run)
    assert [(p["state"].get("id"), p["chosen_action"], p["rejected_action"]) for p in pairs] == [
        ("b", "LOW", "HIGH"), (None, "LOW", "MID")]


def test_only_the_last_record_per_pair_runs_its_program():
    """The programs run are those whose scores count; their outcomes give 1.0 or 0.0."""
    seen = []

    def run(programs):
        seen.extend(programs)
        return [p.startswith("good") for p in programs]

    rows = [rec("s", "LOW", "bad", domain="coding", tests="T"), rec("s", "LOW", "good", domain="coding", tests="T"),
            rec("s", "MID", "bad", domain="coding", tests="T")]
    [pair] = preference_pairs(rows, run)
    assert seen == ["good\n\nT\n", "bad\n\nT\n"]
    assert pair["task_scores"] == {"LOW": 1.0, "MID": 0.0}


def test_bad_meta_is_a_user_error():
    """A reject_signal that is no number stops the step with the record's position."""
    with pytest.raises(UserError, match="trajectory 2: a meta value is not a number"):
        preference_pairs([rec("s", "LOW"), rec("s", "MID", reject="often")], never_run)


def oracle(rows, passes):
    """The reward step as FORMATS.md section 2 words it, written independently, with given test outcomes."""
    scores = {}
    for row, passed in zip(rows, passes):
        message, state = row["assistant_msg"], row["state"]
        task = 0.6 if passed is None else float(passed)
        cost = 0.6 * (0.4 * message.count("?") + 1.0 * int(row["user_reaction"]["meta"].get("reject_signal", 0))
                      + 0.3 * int(len(message.split()) > 200) + 0.7 * 0)
        scores[(state.get("id", "unknown"), row["action"])] = (row, task, cost, task - cost)
    groups = {}
    for row in rows:
        groups.setdefault(row["state"].get("id", "unknown"), []).append(row["action"])
    pairs = []
    for sid, actions in groups.items():
        if len(actions) < 2:
            continue
        rewards = [scores[(sid, a)][3] for a in actions]
        best = rewards.index(max(rewards))
        worst = len(rewards) - 1 - rewards[::-1].index(min(rewards))
        chosen, rejected = scores[(sid, actions[best])][0], scores[(sid, actions[worst])][0]
        pairs.append({"state": chosen["state"], "chosen_action": actions[best], "rejected_action": actions[worst],
                      "chosen_text": chosen["assistant_msg"], "rejected_text": rejected["assistant_msg"],
                      "rewards": {a: scores[(sid, a)][3] for a in actions},
                      "task_scores": {a: scores[(sid, a)][1] for a in actions},
                      "interrupt_costs": {a: scores[(sid, a)][2] for a in actions}})
    return pairs


def lines(path):
    """The JSON lines of a file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_import_then_preference_pairs(tmp_path):
    """--to preference_pairs of an imported file: the reward step's pairs, numbers and order, with real scoring."""
    import_trajectories(MIXED, tmp_path / "run")
    projection = get_projection("preference_pairs")
    out = Path(run_projection(tmp_path / "run", projection).out_dir)
    rows = lines(MIXED)
    expected = oracle(rows, MIXED_PASSES)
    text = (out / "pairs.jsonl").read_text(encoding="utf-8")
    assert text == "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in expected)
    pairs = lines(out / "pairs.jsonl")
    assert [p["state"]["id"] for p in pairs] == ["mbpp-0", "mbpp-1", "mbpp-5", "plan-0"]
    assert pairs[0]["rewards"] == {"MID": -0.24, "LOW": 1.0, "HIGH": 0.52}
    assert (pairs[0]["chosen_action"], pairs[0]["rejected_action"]) == ("LOW", "MID")
    # mbpp-1 has two records per action (two runs appended): the later LOW passes, so LOW wins over HIGH
    assert pairs[1]["task_scores"] == {"MID": 0.0, "LOW": 1.0, "HIGH": 1.0}
    assert (pairs[1]["chosen_action"], pairs[1]["rejected_action"]) == ("LOW", "MID")
    assert pairs[1]["chosen_text"] == rows[13]["assistant_msg"]
    assert pairs[3]["task_scores"] == {"LOW": 0.6, "MID": 0.6, "HIGH": 0.6}
    assert projection.summary() == "4 pairs from 15 trajectories; 9 programs run in the sandbox, 5 passed"
    dpo = lines(out / "dpo.jsonl")
    assert dpo[0] == {"prompt": [{"role": "user", "content": rows[0]["state"]["query"]}],
                      "chosen": [{"role": "assistant", "content": rows[1]["assistant_msg"]}],
                      "rejected": [{"role": "assistant", "content": rows[0]["assistant_msg"]}]}
    actions = lines(out / "dpo_actions.jsonl")
    assert [(a["chosen"], a["rejected"]) for a in actions] == [("LOW", "MID"), ("LOW", "MID"), ("LOW", "HIGH"),
                                                               ("LOW", "HIGH")]
    assert actions[3]["prompt"] == ("domain=planning | turn=1 | clarity=0.5 | prev_reject=0 |\n"
                                    "user_query: Plan my week")


def test_synthetic_file_pairs_without_programs(tmp_path):
    """Synthetic states have no tests: every task score is 0.6 and nothing runs; full-width ? costs nothing."""
    import_trajectories(SYNTHETIC, tmp_path / "run")
    projection = get_projection("preference_pairs")
    out = Path(run_projection(tmp_path / "run", projection).out_dir)
    pairs = lines(out / "pairs.jsonl")
    assert pairs == oracle(lines(SYNTHETIC), [None] * 9)
    assert [(p["chosen_action"], p["rejected_action"]) for p in pairs] == [("LOW", "HIGH")] * 3
    assert pairs[0]["rewards"] == {"LOW": 0.6, "MID": 0.6, "HIGH": 0.6}
    assert projection.summary().endswith("0 programs run in the sandbox, 0 passed")


def test_dpo_rows():
    """Conversational DPO rows carry the query and the texts; action rows the rendered state and the tokens."""
    pair = {"state": {"domain": "coding", "dialogue_turn": 1, "query_clarity": 0.6, "prev_reject": 0,
                      "query": "Write f"}, "chosen_action": "LOW", "rejected_action": "HIGH",
            "chosen_text": "def f(): pass", "rejected_text": "Which f?"}
    assert dpo_row(pair) == {"prompt": [{"role": "user", "content": "Write f"}],
                             "chosen": [{"role": "assistant", "content": "def f(): pass"}],
                             "rejected": [{"role": "assistant", "content": "Which f?"}]}
    assert dpo_action_row(pair) == {"prompt": "domain=coding | turn=1 | clarity=0.6 | prev_reject=0 |\n"
                                              "user_query: Write f", "chosen": "LOW", "rejected": "HIGH"}
    assert render_state({"domain": "coding"}).startswith("domain=coding | turn=None")


def test_a_sandbox_failure_is_an_error_not_a_failing_program(tmp_path, monkeypatch):
    """If the sandbox cannot run the programs, the projection stops with the reason instead of scoring 0.0."""
    from dialogsim.engine.sandbox import SandboxResult
    from dialogsim.scenarios.proactive import projections

    class Refusing:
        def __init__(self, *args):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def map(self, programs):
            return [SandboxResult(exit_code=None, error="refusing to run a program as root") for _ in programs]

    monkeypatch.setattr(projections, "SandboxPool", Refusing)
    import_trajectories(MIXED, tmp_path / "run")
    with pytest.raises(UserError, match="cannot score the programs: refusing to run a program as root"):
        run_projection(tmp_path / "run", get_projection("preference_pairs"))
