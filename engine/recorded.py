"""A recorded user: a logged episode's user turns played back to a new agent (``dialogsim replay``).

A user whose turns came from a live or model-driven source cannot be re-run. Replayed against a new agent,
its logged turns are said again as long as the new agent's turns are compatible with the logged ones (the
same dialogue acts, or the same words when the logged turn has no acts, and the same ``end``). At the first
agent turn that is not, the episode either goes on with the live user (warmed with the episode so far,
when it has ``warm``) or the user leaves: outcome ``abandoned``, reason ``diverged at turn K``.
"""

from __future__ import annotations

from typing import Any

from .contracts import EpisodeContext, UserReply, Verdict
from .events import AgentTurn, EpisodeEnded, Event, UserTurn


def compatible(new: AgentTurn, logged: AgentTurn) -> bool:
    """Whether the new agent's turn says what the logged one did: the same acts per service (or the same
    utterance when the logged turn has no acts) and the same ``end``."""
    if new.end != logged.end:
        return False
    acts = _acts(logged)
    return _acts(new) == acts if any(a for _, a in acts) else new.utterance.strip() == logged.utterance.strip()


def _acts(turn: AgentTurn) -> list[tuple[str, list[tuple[str, str, tuple[str, ...]]]]]:
    return [(f.service, [(a.act, a.slot, tuple(a.values)) for a in f.actions]) for f in turn.frames]


class RecordedUser:
    """Says a logged episode's user turns while the agent stays compatible with the logged agent turns; then
    hands over to ``live`` (a user that can ``warm``) or leaves."""

    def __init__(self, events: list[Event], live: Any = None) -> None:
        self.user_turns = {e.turn: e for e in events if type(e) is UserTurn}
        self.agent_turns = {e.turn: e for e in events if type(e) is AgentTurn}
        self.ended = next((e for e in reversed(events) if type(e) is EpisodeEnded), None)
        self.live = live if live is not None and hasattr(live, "warm") else None
        # what it says depends only on the log and the new agent's turns, until a live user takes over
        self.deterministic = self.live is None or getattr(self.live, "deterministic", True)
        self.said: list[Event] = []  # the episode as this user saw it, for the live user's warm-up
        self.diverged_at: int | None = None
        self.handed_over = False

    def start(self, ctx: EpisodeContext) -> None:
        if self.live is not None:
            start = getattr(self.live, "start", None)
            if start is not None:
                start(ctx)

    def respond(self, agent: AgentTurn | None) -> Any:
        if self.handed_over:
            return self.live.respond(agent)
        turn = 0 if agent is None else agent.turn + 1
        if agent is not None:
            self.said.append(agent)
            logged = self.agent_turns.get(agent.turn)
            if logged is None or not compatible(agent, logged):
                return self._diverged(agent)
        line = self.user_turns.get(turn)
        if line is None:  # the logged user said nothing more here: it left
            return None
        self.said.append(line)
        final = line.end and turn + 1 not in self.agent_turns  # its last word: the logged agent did not answer it
        return UserReply(utterance=line.utterance, frames=line.frames, end=line.end, reaction=line.reaction,
                         inferred=line.inferred is True,  # frames read from a model user's words stay marked
                         persona=line.persona, final=final)

    def _diverged(self, agent: AgentTurn) -> Any:
        self.diverged_at = agent.turn
        if self.live is None:
            return None
        self.handed_over = True
        self.live.warm(self.said)
        return self.live.respond(agent)

    def verdict(self) -> Verdict:
        if self.handed_over:
            verdict = getattr(self.live, "verdict", None)
            if verdict is not None:
                return verdict()
            return Verdict(outcome="success", reason="the user ended the dialogue")
        if self.diverged_at is not None:
            return Verdict(outcome="abandoned", reason=f"diverged at turn {self.diverged_at}")
        if self.ended is None:
            return Verdict(outcome="abandoned", reason="the logged episode did not end")
        return Verdict(outcome=self.ended.outcome, reason=self.ended.reason, reward=self.ended.reward)
