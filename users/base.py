"""The User protocol: a simulated user opens the episode, answers each agent turn, and judges it."""

from __future__ import annotations

from typing import Any, Awaitable, Protocol

import msgspec

from ..engine.events import AgentTurn, Frame, Outcome
from ..scenarios.base import Claim, EpisodeContext


class UserReply(msgspec.Struct, kw_only=True):
    """A user's turn; ``end`` means the user closes the dialogue with it (the agent answers once more)."""

    utterance: str
    frames: list[Frame] = []
    end: bool = False
    think: float | None = None  # virtual seconds before speaking; None lets the engine's model decide
    reaction: dict[str, Any] | None = None


class Verdict(msgspec.Struct, kw_only=True):
    """How the user judges the episode: outcome, reason, and the inputs of rewards."""

    outcome: Outcome
    reason: str = ""
    reward: dict[str, Any] = {}
    claims: list[Claim] = []  # on success: what the user believes was done, for the scenario set's judge


class User(Protocol):
    """A user simulator; ``respond(None)`` opens the episode; returning None leaves without a word."""

    deterministic: bool

    def start(self, ctx: EpisodeContext) -> None:
        """Begin an episode."""
        ...

    def respond(self, agent: AgentTurn | None) -> UserReply | None | Awaitable[UserReply | None]:
        """The next user turn after ``agent`` (None: the opening turn)."""
        ...

    def verdict(self) -> Verdict:
        """The outcome of the episode as this user sees it, asked once when the episode ends."""
        ...
