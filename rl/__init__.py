"""Reinforcement-learning data from dialogsim runs: the TC-Bot-style state tracker, act conversion, rewards,
the ``rl`` and ``rl_compat`` projections and the TC-Bot file import, and ``DialogueEnv``, a Gymnasium
environment in which the learner is the agent (docs/rl.md). Gymnasium is imported only when the environment is."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "DialogueEnv":  # lazily: gymnasium is an optional extra (dialogsim[rl])
        from .env import DialogueEnv

        return DialogueEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
