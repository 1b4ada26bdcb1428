"""Reinforcement-learning data from dialogsim runs: the TC-Bot-style state tracker, act conversion, rewards,
the ``rl`` and ``rl_compat`` projections and the TC-Bot file import (docs/rl.md)."""
