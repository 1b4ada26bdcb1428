"""The rule-based reaction model: how a persona reacts to the assistant's message, and what it replies.

The signals and their arithmetic are the original simulator's, to the float: only ASCII "?" counts as a
question, the message length is ``max(1, len(message.split()))`` words, and satisfaction is computed as
``0.6 + 0.1*answered - 0.3*reject - 0.1*long`` in that order (so a rejection gives 0.29999999999999993).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .personas import Persona

LONG_MESSAGE = 200  # words; a longer message may be met with silence

# The reply to each kind of reaction, first match wins: reject, answered, silence, continue.
# "original" holds the original simulator's (Chinese) texts; "english" is the default.
REPLIES: dict[str, dict[str, str]] = {
    "english": {
        "reject_planning": "Stop asking, just give me the plan.",
        "reject": "Stop asking, just give me the code.",
        "answered_direct": "OK.",
        "answered": "Okay, sounds good.",
        "silence": "...",
        "continue": "Continue.",
    },
    "original": {
        "reject_planning": "别问了，直接给方案。",
        "reject": "别问了，直接给代码。",
        "answered_direct": "好。",
        "answered": "好的。",
        "silence": "...",
        "continue": "继续。",
    },
}


class Reaction(msgspec.Struct, frozen=True):
    """What the persona does (reject, answered, silence or continue), its reply, and the logged signals."""

    kind: str
    reply: str
    meta: dict[str, Any]


def react(message: str, persona: Persona, replies: str = "english") -> Reaction:
    """The persona's reaction to the assistant's ``message``."""
    asked = message.count("?")
    words = max(1, len(message.split()))
    answered = 1 if (asked > 0 and persona.clarity * persona.patience >= 0.35) else 0
    reject = 1 if (asked >= 2 and persona.patience < 0.4) else 0
    silence = 1 if (words > LONG_MESSAGE and persona.patience < 0.3) else 0
    satisfaction = max(0.0, min(1.0, 0.6 + 0.1 * answered - 0.3 * reject - 0.1 * (words > LONG_MESSAGE)))
    meta = {"answered_clarification": answered, "reject_signal": reject, "silence": silence, "off_topic_flag": 0,
            "satisfaction": float(satisfaction)}
    kind = "reject" if reject else "answered" if answered else "silence" if silence else "continue"
    return Reaction(kind=kind, reply=reply_text(kind, persona, replies), meta=meta)


def reply_text(kind: str, persona: Persona, replies: str = "english") -> str:
    """The reply of ``kind`` in the table ``replies`` ("english" or "original")."""
    table = REPLIES.get(replies)
    if table is None:
        raise ValueError(f"unknown reply table {replies!r} (known: {', '.join(REPLIES)})")
    if kind == "reject":
        return table["reject_planning" if persona.domain == "planning" else "reject"]
    if kind == "answered":
        return table["answered_direct" if persona.style == "direct" else "answered"]
    return table[kind]
