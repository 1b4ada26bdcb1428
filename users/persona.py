"""The persona user (``--user persona[:FILE]``): asks a clarify-or-answer task's query, reacts once to the
assistant's answer with the rule-based reaction model, and ends.

Its persona is drawn per episode from the set (the three built-ins, or a personas file) by a stable hash of
the episode's seed, or fixed by option ``persona=NAME``; the branches of an episode share its seed, and so
its persona. The opening turn says which persona the user plays (``UserTurn.persona``): that is where the
assistant reads it to pick the mainline action (scenarios/proactive/actions.py), so the user's draw is the
one source of truth. The reaction turn carries the reaction's signals (``reaction``) and the persona again,
and is the user's last word (``final``): the episode ends with it. Replies are English, or the original
simulator's Chinese texts with option ``replies=original``.
"""

from __future__ import annotations

from typing import Any

from ..engine.contracts import EpisodeContext, UserReply, Verdict
from ..engine.errors import UserError
from ..engine.events import AgentTurn
from ..scenarios.proactive.personas import BUILTIN_PERSONAS, Persona, draw_persona, load_personas, persona_named
from ..scenarios.proactive.reaction import REPLIES, react

OPTIONS = ("persona", "replies")


class PersonaCast:
    """What every persona user of a run shares: the persona set (or the one fixed persona) and the reply table."""

    def __init__(self, personas: tuple[Persona, ...], fixed: Persona | None = None, replies: str = "english") -> None:
        self.personas, self.fixed, self.replies = personas, fixed, replies
        self.records = {p.name: p.as_record() for p in personas}  # logged as they are, made once

    def persona(self, seed: int) -> Persona:
        """The persona of the episode with ``seed``."""
        return self.fixed if self.fixed is not None else draw_persona(self.personas, seed)

    def __call__(self) -> PersonaUser:
        return PersonaUser(self)


class PersonaUser:
    """One episode of a persona: the query, then one reaction (see the module docstring)."""

    deterministic = True

    def __init__(self, cast: PersonaCast) -> None:
        self.cast = cast

    def start(self, ctx: EpisodeContext) -> None:
        query = ctx.scenario.data.get("query")
        if not isinstance(query, str):
            raise ValueError(f"the persona user plays tasks with a query (--scenarios proactive:...), not scenario "
                             f"{ctx.scenario.id!r} of kind {ctx.scenario.kind!r}")
        self.query = query
        self.persona = self.cast.persona(ctx.seed)
        self.record = self.cast.records[self.persona.name]
        self.reaction: str | None = None

    def warm(self, history: list[Any]) -> None:
        """A fork's copied prefix: the query was asked (the persona is the episode's, drawn from its seed)."""

    def respond(self, agent: AgentTurn | None) -> UserReply:
        if agent is None:
            return UserReply(utterance=self.query, persona=self.record)
        reaction = react(agent.utterance, self.persona, self.cast.replies)
        self.reaction = reaction.kind
        return UserReply(utterance=reaction.reply, end=True, final=True, reaction=reaction.meta, persona=self.record)

    def verdict(self) -> Verdict:
        if self.reaction is None:
            return Verdict(outcome="failure", reason="the assistant ended the dialogue before the persona reacted")
        return Verdict(outcome="success", reason=f"the persona reacted: {self.reaction}")


def make_factory(arg: str | None, scenarios: Any, options: dict[str, Any]) -> PersonaCast:
    """``--user persona[:FILE]``: the built-in personas or a file's; options persona=NAME and replies."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise UserError(f"persona user: unknown option {unknown[0]!r} (known: {', '.join(OPTIONS)})")
    replies = str(options.get("replies") or "english")
    if replies not in REPLIES:
        raise UserError(f"persona user: option replies={replies!r}: expected {' or '.join(REPLIES)}")
    return persona_cast(arg, options.get("persona"), replies)


def persona_cast(file: str | None, name: str | None, replies: str = "english") -> PersonaCast:
    """The personas of ``file`` (the built-in ones without it), one of them fixed when ``name`` is given."""
    personas = load_personas(file) if file else BUILTIN_PERSONAS
    return PersonaCast(personas, persona_named(personas, name) if name else None, replies)
