"""The ``golden`` projection: every episode as a golden question, so that any run is a golden dataset.

Output: ``golden.json`` (``{"golden_questions": [...]}``, questions in projection order). A question is
the episode's user utterances, the tool calls it made (with their arguments), the agent trajectory and the
final dialogue state; its metadata names the run, episode and outcome, and for SGD-world episodes carries
what rebuilds the world (``metadata.sgd``: scenario spec, pack id, the episode's seed and the user's goal, and the user's acts when the agent heard acts rather than words),
so that ``--scenarios golden:golden.json`` gives an agent the same services, tools and results.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from .episode import EpisodeProjection, EpisodeRecord, RunFacts, agent_state, true_state
from .golden import GoldenQuestion, ReferenceData, ToolInteraction, encode_golden
from .spans import agent_name, agent_trajectory

_decoder = msgspec.json.Decoder(GoldenQuestion)

# keys of a question's metadata that a projection writes afresh (the rest of a golden question's metadata is kept)
DIALOGSIM_KEY, SGD_KEY = "dialogsim", "sgd"


def question_id(record: EpisodeRecord) -> str:
    """The scenario id, with the trial when the run played the scenario more than once."""
    return record.scenario_id if record.trial == 0 else f"{record.scenario_id}-trial{record.trial}"


def sgd_origin(record: EpisodeRecord, facts: RunFacts) -> dict[str, Any] | None:
    """What rebuilds an SGD-world episode's world and tools, or None for other episodes."""
    data = record.data
    goal, pack = data.get("goal"), data.get("pack")
    if not isinstance(goal, dict) or not isinstance(pack, str):
        return None
    world = data.get("sgd_world") if isinstance(data.get("sgd_world"), dict) else {}
    origin = {"scenarios": world.get("scenarios") or facts.scenarios or "sgd", "pack": pack,
              "seed": world.get("seed", record.seed), "goal": goal}
    if heard_acts(record):
        origin["user_frames"] = [msgspec.to_builtins(x.user.frames) for x in record.exchanges]
    return origin


def heard_acts(record: EpisodeRecord) -> bool:
    """Whether the episode's agent read the user's acts rather than the text (it tagged no slot in any turn):
    then the question keeps the acts, so that an agent run on it again hears what the original one heard."""
    turns = record.agent_turns()
    return bool(turns) and all(t.tagged_slots is None for t in turns) and \
        any(x.user.frames for x in record.exchanges)


def episode_question(record: EpisodeRecord, facts: RunFacts) -> GoldenQuestion:
    """One episode as a golden question."""
    golden = record.golden
    name = agent_name(record)
    metadata = {k: v for k, v in (golden.get("metadata") or {}).items() if k not in (DIALOGSIM_KEY, SGD_KEY)}
    metadata[DIALOGSIM_KEY] = {"run": record.run, "episode": record.ep, "scenario_id": record.scenario_id,
                               "trial": record.trial, "outcome": record.outcome, "user": record.user_spec,
                               "agent": record.agent_spec}
    origin = sgd_origin(record, facts)
    if origin is not None:
        metadata[SGD_KEY] = origin
    state = true_state(record)
    if state is None:
        state = agent_state(record)
    reference = ReferenceData(
        reference_tool_interactions=[ToolInteraction(tool_name=c.name, input_arguments=c.arguments)
                                     for c in record.calls()],
        reference_trajectory=agent_trajectory(record),
        reference_state_variables=state)
    return GoldenQuestion(id=question_id(record), user_inputs=[x.user.utterance for x in record.exchanges],
                          agents_evaluated=list(golden.get("agents_evaluated") or [name]), metadata=metadata,
                          reference_data=reference)


class GoldenProjection(EpisodeProjection):
    """Episodes -> one golden dataset file."""

    name = "golden"
    version = 1

    def fold_record(self, record: EpisodeRecord) -> GoldenQuestion | None:
        if not record.exchanges:
            return None  # a question needs at least one user input
        return episode_question(record, self.facts)

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
        yield "golden.json", encode_golden([_decoder.decode(raw) for raw in outputs])

