"""Which action an assistant plays in an episode, and the branches a mainline forks into.

The original generator picks each state's mainline action from the persona (``personas.mainline_action``) or
takes it from the command line, then plays the two other actions as branches from the same state. Here the
assistant (``--agent clarify`` or a chat model, ``--agent openai:URL``) reads the persona from the user's
opening turn, which says who the user plays (``UserTurn.persona``); its options fix the mainline by hand
(``mainline=LOW|MID|HIGH``), turn the branches off (``branches=none``), or fix the action of a branch
(``action=...``, set by the branches themselves). Each played action is logged on the agent's turn with who
chose it (``action_by``: "persona", "manual", "branch", or "default" when there is neither a persona nor an
option: MID, the rule's otherwise).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...engine.errors import UserError
from ...engine.events import AgentTurn
from ...engine.runner import Branch
from .personas import Persona, mainline_action
from .prompts import ACTIONS

ACTION_OPTIONS = frozenset({"action", "mainline", "branches"})
DECISION_TURN = 1  # a branch copies the user's first turn and plays its action from there


class ActionOptions(msgspec.Struct, frozen=True, kw_only=True):
    """An assistant's action options: a branch's fixed action, a mainline fixed by hand, whether to branch."""

    action: str | None = None
    mainline: str | None = None
    branches: bool = True


def read_action_options(options: dict[str, Any], who: str) -> ActionOptions:
    """The action options among ``options`` (agent ``who``'s); a UserError naming a bad value."""
    fixed = {}
    for key in ("action", "mainline"):
        value = options.get(key)
        if value in (None, ""):
            continue
        if value not in ACTIONS:
            raise UserError(f"bad agent option {key}={value!r} for agent {who}: expected LOW, MID or HIGH")
        fixed[key] = value
    branches = str(options.get("branches") or "all")
    if branches not in ("all", "none"):
        raise UserError(f"bad agent option branches={branches!r} for agent {who}: expected 'all' or 'none'")
    return ActionOptions(**fixed, branches=branches == "all")


def choose_action(options: ActionOptions, persona: Any) -> tuple[str, str]:
    """The action to play and who chose it: a branch's, the mainline fixed by hand, or the persona's rule."""
    if options.action is not None:
        return options.action, "branch"
    if options.mainline is not None:
        return options.mainline, "manual"
    if isinstance(persona, dict):
        try:
            return mainline_action(msgspec.convert(persona, Persona)), "persona"
        except (msgspec.ValidationError, ValueError):
            pass  # not a persona the rule can read
    return "MID", "default"


def branches_of(events: list[Any]) -> list[Branch]:
    """The branches of an ended mainline: the two actions it did not play, from its decision point, in LOW,
    MID, HIGH order (none when it never decided)."""
    played = next((e.action for e in events if type(e) is AgentTurn and e.action is not None), None)
    return list(_BRANCHES.get(played, ()))


_BRANCHES = {played: tuple(Branch(name=action, at_turn=DECISION_TURN, agent_options={"action": action})
                           for action in ACTIONS if action != played) for played in ACTIONS}
