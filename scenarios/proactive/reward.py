"""The reward step: trajectory records -> scored (state, action) pairs -> preference pairs, as the original.

task_score runs the whole assistant message followed by the state's tests as one program (1.0 if it
exits with status 0, else 0.0; 0.6 without tests or outside coding); interrupt_cost =
0.6 * (0.4*questions + 1.0*reject + 0.3*[words > 200] + 0.7*off_topic) with off_topic 0; reward =
task_score - interrupt_cost. Scores are kept per (state id, action), a later record replacing an earlier
one's; per state id the first highest-reward action (in file order) is chosen and the last lowest one
rejected, ties included; states with fewer than two records are skipped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from ...engine.errors import UserError

NO_TESTS_SCORE = 0.6
ALPHA = 0.6
W_QUESTIONS, W_REJECT, W_LONG, W_OFF_TOPIC = 0.4, 1.0, 0.3, 0.7
LONG_MESSAGE = 200  # words

RunPrograms = Callable[[list[str]], list[bool]]  # programs -> whether each exited with status 0


def state_id(record: dict[str, Any]) -> Any:
    """The key records are grouped by: the state's id, or "unknown"."""
    return record["state"].get("id", "unknown")


def state_tests(state: dict[str, Any]) -> str | None:
    """The tests task_score runs for a state, or None when it scores the fixed 0.6."""
    tests = state.get("mbpp_tests")
    if state.get("domain") != "coding" or not tests:
        return None
    if not isinstance(tests, str):
        raise ValueError("mbpp_tests is not a string")
    return tests


def program(message: str, tests: str) -> str:
    """The program task_score runs: the whole assistant message, then the tests."""
    return message + "\n\n" + tests + "\n"


def interrupt_cost(meta: dict[str, Any], n_questions: int, length_tokens: int, off_topic: int = 0) -> float:
    """What the assistant's interruption cost the user (the original's weights and float order)."""
    cost = (W_QUESTIONS * n_questions + W_REJECT * int(meta.get("reject_signal", 0))
            + W_LONG * int(length_tokens > LONG_MESSAGE) + W_OFF_TOPIC * int(off_topic))
    return float(ALPHA * cost)


def score(record: dict[str, Any], passed: bool | None) -> dict[str, Any]:
    """One record's scores; ``passed`` is its program's outcome, None when it has no tests."""
    message = record["assistant_msg"]
    task_score = NO_TESTS_SCORE if passed is None else (1.0 if passed else 0.0)
    cost = interrupt_cost(record["user_reaction"]["meta"], message.count("?"), len(message.split()))
    return {"record": record, "task_score": float(task_score), "interrupt_cost": cost,
            "reward": float(task_score - cost)}


def score_records(records: Sequence[dict[str, Any]], run_programs: RunPrograms) -> dict[tuple[Any, str], dict]:
    """Scores per (state id, action), of the last record of each (the only ones whose programs are run)."""
    last = {(state_id(r), r["action"]): i for i, r in enumerate(records)}
    programs: dict[int, str] = {}
    for i in last.values():
        try:
            tests = state_tests(records[i]["state"])
        except ValueError as exc:
            raise UserError(f"trajectory {i + 1}: {exc}") from None
        if tests is not None:
            programs[i] = program(records[i]["assistant_msg"], tests)
    outcomes = dict(zip(programs, run_programs(list(programs.values())))) if programs else {}
    scored = {}
    for key, i in last.items():
        try:
            scored[key] = score(records[i], outcomes.get(i))
        except (TypeError, ValueError) as exc:
            raise UserError(f"trajectory {i + 1}: a meta value is not a number ({exc})") from None
    return scored


def preference_pairs(records: Sequence[dict[str, Any]], run_programs: RunPrograms) -> list[dict[str, Any]]:
    """The original reward step's pairs, in order of each state's first record."""
    scored = score_records(records, run_programs)
    by_state: dict[Any, list[tuple[str, dict]]] = defaultdict(list)
    for record in records:
        by_state[state_id(record)].append((record["action"], scored[(state_id(record), record["action"])]))
    pairs = []
    for entries in by_state.values():
        if len(entries) < 2:
            continue
        ranked = sorted(entries, key=lambda entry: entry[1]["reward"], reverse=True)
        (chosen, best), (rejected, worst) = ranked[0], ranked[-1]
        pairs.append({
            "state": best["record"]["state"],
            "chosen_action": chosen,
            "rejected_action": rejected,
            "chosen_text": best["record"]["assistant_msg"],
            "rejected_text": worst["record"]["assistant_msg"],
            "rewards": {action: s["reward"] for action, s in entries},
            "task_scores": {action: s["task_score"] for action, s in entries},
            "interrupt_costs": {action: s["interrupt_cost"] for action, s in entries},
        })
    return pairs


def dpo_row(pair: dict[str, Any]) -> dict[str, Any]:
    """A pair in TRL DPOTrainer's conversational preference form: the query, the two assistant messages."""
    query = pair["state"].get("query")
    return {"prompt": [{"role": "user", "content": query if isinstance(query, str) else ""}],
            "chosen": [{"role": "assistant", "content": pair["chosen_text"]}],
            "rejected": [{"role": "assistant", "content": pair["rejected_text"]}]}


def dpo_action_row(pair: dict[str, Any]) -> dict[str, Any]:
    """A pair as the original DPO trainer reads it: the rendered state, the action tokens."""
    return {"prompt": render_state(pair["state"]), "chosen": pair["chosen_action"],
            "rejected": pair["rejected_action"]}


def render_state(state: dict[str, Any]) -> str:
    """The original trainer's prompt for a state (a missing field reads "None")."""
    return (f"domain={state.get('domain')} | turn={state.get('dialogue_turn')} | "
            f"clarity={state.get('query_clarity')} | prev_reject={state.get('prev_reject')} |\n"
            f"user_query: {state.get('query')}")
