"""The ``rl_compat`` projection: the seed converter's (get_four.py) ``four`` and ``feasible_action`` files, exactly.

Output (``RUN_DIR/projections/rl_compat@v1/``): ``four.json``, ``{global_index: [s, a, r, s', over]}``, and
``feasible_action.json``, ``{id: action}``, written as the converter writes them (``json.dump`` with
``ensure_ascii=False``: default separators, no final newline). What the converter does, quirks included
(docs/rl.md says which were read from its output and which could not be checked):

- Episodes go in order; an episode of two acts or fewer is skipped whole (it adds no feasible action).
- A running total starts at 0 and drops by 1 at every act, of either speaker.
- Every agent act makes a tuple: s = the tracker state before the act, a = the act with ``speaker``
  removed and every inform value replaced by "PLACEHOLDER" (the converter edits the act it stores; the
  states keep the act as logged), r = the running total after the act, s' = the state before the next
  agent act, over = false. The action joins the feasible actions (after greeting and bye) if no equal one
  is there yet; the episode's last agent act does too, although its tuple is dropped.
- At the episode's end, with n its number of acts and success = "phone_number" in the final state's
  inform_slots (agent informs count, and any value, even "UNK"): the second-to-last tuple gets
  r = total + 2n on success, total - n otherwise (so n or -2n), and over = true; the last tuple is dropped.
  Tuples are numbered 0, 1, ... across episodes. An episode with fewer than two agent acts has no
  second-to-last tuple and contributes none (the sample never shows one; see docs/rl.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec

from .acts import EpisodeActs, episode_acts, placeholder_action
from .tracker import BYE, GREETING, StateTracker

FOUR_FILE = "four.json"
FEASIBLE_FILE = "feasible_action.json"
SUCCESS_SLOT = "phone_number"
_CHUNK = 1 << 20

_decode_episode = msgspec.json.Decoder(EpisodeActs).decode
_decode = msgspec.json.decode
_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class CompatConverter:
    """The converter's state across episodes: the next global index and the feasible actions."""

    def __init__(self) -> None:
        self.index = 0
        self.feasible: list[dict[str, Any]] = [dict(GREETING), dict(BYE)]
        self._seen = {_encode_sorted(action) for action in self.feasible}  # a quick yes for known actions

    def _add_feasible(self, action: dict[str, Any]) -> None:
        key = _encode_sorted(action)
        if key not in self._seen:
            self._seen.add(key)
            if action not in self.feasible:  # Python's dict equality decides, as in the converter
                self.feasible.append(action)

    def episode(self, acts: list[dict[str, Any]]) -> list[tuple[int, list[Any]]]:
        """One episode's acts -> its ``(global index, [s, a, r, s', over])`` tuples."""
        if len(acts) <= 2:
            return []
        tracker = StateTracker()
        total = 0
        steps: list[tuple[bytes, dict[str, Any], int]] = []  # (state before the act, action, running total)
        for act in acts:
            total -= 1
            if act["speaker"] == "agent":
                action = placeholder_action(act)
                self._add_feasible(action)
                steps.append((tracker.state_json(), action, total))
                tracker.update_agent(act)
            else:
                tracker.update_user(act)
        if len(steps) < 2:
            return []
        n = len(acts)
        terminal = total + (2 * n if SUCCESS_SLOT in tracker.inform_slots else -n)
        tuples = []
        for k in range(len(steps) - 1):
            state, action, reward = steps[k]
            over = k == len(steps) - 2
            tuples.append((self.index, [_decode(state), action, terminal if over else reward,
                                        _decode(steps[k + 1][0]), over]))
            self.index += 1
        return tuples

    def feasible_json(self) -> str:
        """feasible_action.json's text."""
        return _dumps({i: action for i, action in enumerate(self.feasible)})


class RlCompatProjection:
    """Episodes -> the seed converter's four.json and feasible_action.json."""

    name = "rl_compat"
    version = 1

    def __init__(self, options: dict[str, Any]) -> None:
        self.tuples = 0
        self.feasible_count = 0

    def fold_options(self) -> dict[str, Any]:
        return {}

    def fold(self, events: list[Any]) -> EpisodeActs | None:
        return episode_acts(events)

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, Iterator[bytes]]]:
        converter = CompatConverter()
        yield FOUR_FILE, self._four_chunks(outputs, converter)
        # a generator too, so that it is built only after four.json has been written
        yield FEASIBLE_FILE, self._feasible_chunks(converter)

    def _four_chunks(self, outputs: Iterator[bytes], converter: CompatConverter) -> Iterator[bytes]:
        # json.dump of the whole dict, written piece by piece: '{"0": [...], "1": [...]}'
        separator = "{"
        parts: list[str] = []
        size = 0
        for raw in outputs:
            for index, four in converter.episode(_decode_episode(raw).acts):
                text = f'{separator}"{index}": {_dumps(four)}'
                separator = ", "
                parts.append(text)
                size += len(text)
                if size >= _CHUNK:
                    yield "".join(parts).encode("utf-8")
                    parts, size = [], 0
        yield ("".join(parts) + ("}" if separator == ", " else "{}")).encode("utf-8")
        self.tuples = converter.index

    def _feasible_chunks(self, converter: CompatConverter) -> Iterator[bytes]:
        self.feasible_count = len(converter.feasible)
        yield converter.feasible_json().encode("utf-8")

    def summary(self) -> str:
        """What the last render wrote."""
        return f"{self.tuples} tuples, {self.feasible_count} feasible actions"

