"""The reward rule of the ``rl`` projection: TC-Bot's by default, its constants and success test configurable.

Every transition but an episode's last gets ``per_turn`` (default -1). The last gets ``success`` (default
2 * max_turns) when the episode succeeded, else ``failure`` (default -max_turns), instead of ``per_turn``,
as TC-Bot's reward function does. ``max_turns`` defaults to the run's own turn limit (its config's
``max_turns``), else 50, dialogsim's default; ``max_turns=episode`` takes each episode's own number of
turns (both speakers) instead, as the seed document's num_turns. An episode succeeded when dialogsim
judged it so (its ``episode_ended`` outcome is "success"), or, with ``success_slot`` set, when that slot is
in the final state's inform_slots (the seed document's rule, e.g. ``success_slot=phone_number``).

Options come as strings (``--reward-opt KEY=VALUE``) or JSON values (``--reward-config FILE``, an object).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from ..engine.errors import UserError
from ..engine.registry import parse_options

DEFAULT_MAX_TURNS = 50
EPISODE = "episode"  # max_turns=episode: each episode's own number of turns
KEYS = ("per_turn", "success", "failure", "max_turns", "success_slot")


class RewardRule(msgspec.Struct, frozen=True, kw_only=True):
    """The constants and the success test of the rewards."""

    per_turn: float = -1
    success: float | None = None  # None: 2 * max_turns
    failure: float | None = None  # None: -max_turns
    max_turns: int | None = None  # None: each episode's own number of turns
    success_slot: str | None = None

    def final(self, succeeded: bool, turns: int) -> float:
        """The reward of the last transition of an episode of ``turns`` turns."""
        limit = self.max_turns if self.max_turns is not None else turns
        if succeeded:
            return self.success if self.success is not None else 2 * limit
        return self.failure if self.failure is not None else -limit

    def describe(self) -> str:
        """One line for people: the constants and how success is decided."""
        limit = str(self.max_turns) if self.max_turns is not None else "the episode's turns"
        success = _num(self.success) if self.success is not None else \
            str(2 * self.max_turns) if self.max_turns is not None else f"2 * {limit}"
        failure = _num(self.failure) if self.failure is not None else \
            str(-self.max_turns) if self.max_turns is not None else f"-{limit}"
        judged = f"'{self.success_slot}' in the final inform_slots" if self.success_slot else \
            "the episode_ended outcome"
        return (f"reward {_num(self.per_turn)} per agent turn; last turn {success} on success, "
                f"{failure} otherwise (success: {judged})")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def reward_rule(options: dict[str, Any] | None = None, run_config: dict[str, Any] | None = None) -> RewardRule:
    """The rule from option values (strings or JSON values) over the defaults; a bad option is a UserError."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(KEYS))
    if unknown:
        raise UserError(f"unknown reward option {unknown[0]!r}; known: {', '.join(KEYS)}")
    recorded = (run_config or {}).get("max_turns")
    max_turns: int | None
    if options.get("max_turns") == EPISODE:
        max_turns = None
    elif "max_turns" in options:
        max_turns = _number(options, "max_turns", int, f" or {EPISODE!r}")
        if max_turns < 1:
            raise UserError(f"reward option max_turns must be >= 1 or 'episode', got {max_turns}")
    else:
        max_turns = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else DEFAULT_MAX_TURNS
    slot = options.get("success_slot")
    if slot is not None and not isinstance(slot, str):
        raise UserError(f"reward option success_slot must be a slot name, got {slot!r}")
    return RewardRule(
        per_turn=_number(options, "per_turn", float) if "per_turn" in options else -1,
        success=_number(options, "success", float) if "success" in options else None,
        failure=_number(options, "failure", float) if "failure" in options else None,
        max_turns=max_turns,
        success_slot=slot or None,
    )


def _number(options: dict[str, Any], key: str, kind: type, alternative: str = "") -> Any:
    value = options[key]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        what = "an integer" if kind is int else "a number"
        raise UserError(f"reward option {key} must be {what}{alternative}, got {options[key]!r}")
    return value


def parse_reward_options(pairs: list[str], config_file: str | None = None) -> dict[str, Any]:
    """``--reward-config FILE`` (a JSON object) overlaid by ``--reward-opt KEY=VALUE`` pairs."""
    options: dict[str, Any] = {}
    if config_file:
        try:
            loaded = json.loads(Path(config_file).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{config_file}: no such reward config file") from None
        except ValueError as exc:
            raise UserError(f"{config_file}: not JSON ({exc})") from None
        if not isinstance(loaded, dict):
            raise UserError(f"{config_file}: a reward config is a JSON object of {', '.join(KEYS)}")
        options.update(loaded)
    options.update(parse_options(pairs, "--reward-opt"))
    return options
