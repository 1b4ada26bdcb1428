"""The ``rl`` projection: one TC-Bot-style transition per agent turn, and the feasible actions.

Output (``RUN_DIR/projections/rl@v1/``):

``transitions.jsonl``, one JSON object per line, episodes in projection order, their transitions in turn
order: ``episode`` (id), ``index`` (of the transition in its episode, from 0), ``state`` (the tracker's
state before the agent's act, see rl/tracker.py), ``action`` (the agent's act without its speaker),
``action_id`` (its key in feasible_actions.json), ``reward`` (rl/rewards.py), ``next_state`` (the state
before the agent's next act; after the episode's last act for the last transition), ``done`` (true on an
episode's last transition), ``outcome`` (dialogsim's judged episode outcome) and ``success`` (what the
reward rule decided).

``feasible_actions.json``: ``{id: action}`` with the greeting and bye acts first, then every distinct agent
action in order of first appearance, its inform values replaced by "PLACEHOLDER" (the seed converter's
feasible_action.json).

The fold keeps an episode's TC-Bot acts and outcome (rl/acts.py); the render runs the tracker and the reward
rule over them, so changing reward options re-renders without refolding.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import msgspec

from ..engine.log import RunDir
from .acts import EpisodeActs, agent_action, episode_acts, placeholder_action
from .rewards import RewardRule, parse_reward_options, reward_rule
from .tracker import BYE, GREETING, StateTracker

TRANSITIONS_FILE = "transitions.jsonl"
FEASIBLE_FILE = "feasible_actions.json"
_CHUNK = 1 << 20
_AGENT_TAIL = b',"speaker":"agent"}'
_AGENT_TAIL_LEN = len(_AGENT_TAIL)

_decode_episode = msgspec.json.Decoder(EpisodeActs).decode
_encode = msgspec.json.Encoder().encode
_encode_sorted = msgspec.json.Encoder(order="sorted").encode


class FeasibleActions:
    """Distinct agent actions (inform values as "PLACEHOLDER"), numbered in order of first appearance."""

    def __init__(self) -> None:
        self.actions: list[dict[str, Any]] = []
        self._ids: dict[bytes, int] = {}
        self._quick: dict[Any, int] = {}
        for action in (GREETING, BYE):
            self.id_of(action)

    def id_of(self, action: dict[str, Any]) -> int:
        """The id of an action already in placeholder form, added if new (equal dicts share an id)."""
        key = _encode_sorted(action)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = len(self.actions)
            self.actions.append(action)
        return found

    def id_of_act(self, act: dict[str, Any]) -> int:
        """The id of an agent act's placeholder form; acts of the usual four keys skip building it when seen."""
        if len(act) != 4:
            return self.id_of(placeholder_action(act))
        try:
            # equal placeholder forms <=> equal diaact, request_slots and inform slot names (in any order)
            key = (act["diaact"], frozenset(act["request_slots"].items()), frozenset(act["inform_slots"]))
        except (KeyError, TypeError):  # another fourth key, or an unhashable request value
            return self.id_of(placeholder_action(act))
        found = self._quick.get(key)
        if found is None:
            found = self._quick[key] = self.id_of(placeholder_action(act))
        return found

    def to_json(self) -> bytes:
        """``{"0": action, ...}`` as JSON."""
        return _encode({str(i): action for i, action in enumerate(self.actions)})


def episode_lines(episode: EpisodeActs, rule: RewardRule, feasible: FeasibleActions) -> list[bytes]:
    """The transition lines of one episode (none when the agent never spoke)."""
    tracker = StateTracker()
    states: list[bytes] = []
    actions: list[tuple[dict[str, Any], bytes]] = []  # (act, the action's JSON)
    for act in episode.acts:
        if act["speaker"] == "agent":
            states.append(tracker.state_json())
            data = tracker.update_agent(act)
            # the action is the act without its speaker: cut from the act's JSON when the speaker is last
            actions.append((act, data[:-_AGENT_TAIL_LEN] + b"}" if data.endswith(_AGENT_TAIL) else
                            _encode(agent_action(act))))
        else:
            tracker.update_user(act)
    if not actions:
        return []
    states.append(tracker.state_json())
    if rule.success_slot is not None:
        succeeded = rule.success_slot in tracker.inform_slots
    else:
        succeeded = episode.outcome == "success"
    head = b'{"episode":' + _encode(episode.episode) + b',"index":'
    per_turn, final = _encode(rule.per_turn), _encode(rule.final(succeeded, len(episode.acts)))
    tail = b',"outcome":' + _encode(episode.outcome) + b',"success":' + (b"true" if succeeded else b"false") + b"}\n"
    last = len(actions) - 1
    lines = []
    for index, (act, action) in enumerate(actions):
        done = index == last
        lines.append(b"".join((
            head, str(index).encode(), b',"state":', states[index], b',"action":', action,
            b',"action_id":', str(feasible.id_of_act(act)).encode(),
            b',"reward":', final if done else per_turn,
            b',"next_state":', states[index + 1], b',"done":', b"true" if done else b"false", tail)))
    return lines


class RlProjection:
    """Episodes -> TC-Bot-style transitions with rewards, and the feasible actions."""

    name = "rl"
    version = 1

    def __init__(self, options: dict[str, Any]) -> None:
        # options["reward"]: reward options (rl/rewards.py); options["run_config"]: the run's recorded config
        self.options = options
        self.rule = reward_rule(options.get("reward"), options.get("run_config"))
        self.transitions = 0
        self.episodes = 0
        self.feasible_count = 0

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The reward options, for ``dialogsim project --to rl``."""
        parser.add_argument("--reward-opt", action="append", default=[], metavar="KEY=VALUE",
                            help="reward option (per_turn, success, failure, max_turns, success_slot; docs/rl.md)")
        parser.add_argument("--reward-config", metavar="PATH", help="reward options as a JSON object")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> "RlProjection":
        """The projection with the command line's reward options."""
        return cls({"reward": parse_reward_options(args.reward_opt, args.reward_config)})

    def bind_run(self, run: RunDir) -> None:
        """Turn limits in rewards default to the run's own (its recorded config)."""
        if "run_config" not in self.options:
            self.rule = reward_rule(self.options.get("reward"), run.manifest.get("config"))

    def fold_options(self) -> dict[str, Any]:
        return {}  # rewards are applied when rendering: changing them needs no refold

    def fold(self, events: list[Any]) -> EpisodeActs | None:
        return episode_acts(events)

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, bytes | Iterator[bytes]]]:
        feasible = FeasibleActions()
        self.transitions = self.episodes = 0
        yield TRANSITIONS_FILE, self._transition_chunks(outputs, feasible)
        # a generator too, so that it is built only after the transitions above have been written
        yield FEASIBLE_FILE, self._feasible_chunks(feasible)

    def _transition_chunks(self, outputs: Iterator[bytes], feasible: FeasibleActions) -> Iterator[bytes]:
        buffer: list[bytes] = []
        size = 0
        for raw in outputs:
            lines = episode_lines(_decode_episode(raw), self.rule, feasible)
            if lines:
                self.episodes += 1
                self.transitions += len(lines)
                buffer.extend(lines)
                size += sum(map(len, lines))
                if size >= _CHUNK:
                    yield b"".join(buffer)
                    buffer, size = [], 0
        yield b"".join(buffer)

    def _feasible_chunks(self, feasible: FeasibleActions) -> Iterator[bytes]:
        self.feasible_count = len(feasible.actions)
        yield feasible.to_json()

    def summary(self) -> str:
        """What the last render wrote, and the reward rule."""
        return (f"{self.transitions} transitions from {self.episodes} episodes, {self.feasible_count} feasible "
                f"actions; {self.rule.describe()}")

