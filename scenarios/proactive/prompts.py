"""The three assistant actions and their prompts: the six action prompts (shipped as files in prompts/)
are the system message of one chat-completions call whose user message is ``"[Task]\\n" + query``."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

ACTIONS = ("LOW", "MID", "HIGH")  # no question; one key question; up to two questions and a plan
DOMAINS = ("coding", "planning")
MAX_TOKENS = 400
TEMPERATURE = 0.7
PROMPTS_DIR = Path(__file__).with_name("prompts")


@lru_cache(maxsize=None)
def action_prompt(domain: str, action: str) -> str:
    """The system prompt of ``action`` in ``domain`` (the file's text, stripped as the original does)."""
    if domain not in DOMAINS or action not in ACTIONS:
        raise ValueError(f"no action prompt for domain {domain!r}, action {action!r}")
    return (PROMPTS_DIR / f"{domain}_{action.lower()}.txt").read_text(encoding="utf-8").strip()


def user_message(query: str) -> str:
    """The user message of the call that makes the assistant's turn."""
    return "[Task]\n" + query
