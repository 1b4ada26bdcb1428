"""The ``trajectories`` and ``preference_pairs`` projections of the preference-trajectory family.

``trajectories``: ``trajectories.jsonl``, one record per episode (records.py), mainline first, then its
branches in LOW, MID, HIGH order, written as the original writes them (``ensure_ascii=False``).
``preference_pairs``: the reward step (reward.py) over those records in that order: ``pairs.jsonl`` (the
original's pair format), ``dpo.jsonl`` (TRL DPOTrainer's conversational preference format: the query as
the prompt, the assistant messages as chosen and rejected) and ``dpo_actions.jsonl`` (the original
trainer's form: rendered state, action tokens). One line per pair in each, in the same order. Programs
are scored in the sandbox (engine/sandbox.py) on every core when the records are rendered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from ...engine.errors import UserError
from ...engine.sandbox import Limits, SandboxPool
from .records import Trajectory, ordered_records, record_line, trajectory_of
from .reward import dpo_action_row, dpo_row, preference_pairs

_decoder = msgspec.json.Decoder(Trajectory)


def records_of(outputs: Iterator[bytes]) -> list[dict[str, Any]]:
    """The records of the stored fold outputs, in file order."""
    return list(ordered_records(_decoder.decode(raw) for raw in outputs))


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    """Rows as the original writes them: one ``json.dumps(row, ensure_ascii=False)`` per line."""
    return "".join(record_line(row) for row in rows).encode("utf-8")


class TrajectoriesProjection:
    """Episodes -> trajectory records (``trajectories.jsonl``)."""

    name = "trajectories"
    version = 1

    def __init__(self, options: dict[str, Any]) -> None:
        pass

    def fold_options(self) -> dict[str, Any]:
        return {}

    def fold(self, events: list[Any]) -> Trajectory | None:
        return trajectory_of(events)

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
        yield "trajectories.jsonl", jsonl(records_of(outputs))


class PreferencePairsProjection(TrajectoriesProjection):
    """Episodes -> preference pairs (``pairs.jsonl``, ``dpo.jsonl``, ``dpo_actions.jsonl``)."""

    name = "preference_pairs"
    version = 1

    def __init__(self, options: dict[str, Any]) -> None:
        self.limits = Limits(timeout=float(options.get("score_timeout") or 5.0))
        self.workers = options.get("workers")
        self.counts: dict[str, int] = {}

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
        records = records_of(outputs)
        pairs = preference_pairs(records, self.run_programs)
        self.counts.update(records=len(records), pairs=len(pairs))
        yield "pairs.jsonl", jsonl(pairs)
        yield "dpo.jsonl", jsonl([dpo_row(p) for p in pairs])
        yield "dpo_actions.jsonl", jsonl([dpo_action_row(p) for p in pairs])

    def run_programs(self, programs: list[str]) -> list[bool]:
        """Run the programs in the sandbox on every core: whether each exited with status 0 in time."""
        with SandboxPool(self.workers, self.limits) as pool:
            results = list(pool.map(programs))
        failed = next((r.error for r in results if r.error is not None), None)
        if failed is not None:  # the sandbox's own failure must not pass for a failing program
            raise UserError(f"cannot score the programs: {failed}")
        passed = [result.passed for result in results]
        self.counts.update(programs=len(programs), passed=sum(passed))
        return passed

    def summary(self) -> str:
        """One line on what the last render did."""
        c = self.counts
        return (f"{c.get('pairs', 0)} pairs from {c.get('records', 0)} trajectories; {c.get('programs', 0)} "
                f"programs run in the sandbox, {c.get('passed', 0)} passed")

