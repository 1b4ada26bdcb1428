"""Policies over the environment's action ids: the rule-based schema agent, and random ones (baselines).

A policy is called with the environment's observation and info and returns an action id; ``reset(info)``
starts an episode. ``SchemaPolicy`` runs the rule-based schema agent (agents/schema_agent.py) on the same
turns the environment's agent hears (``info["user_turn"]``, ``info["tool_result"]``) and returns the id of
the move its reply makes (``ActionSet.action_of``), so it shows what a policy over this action space can do.
Its agent asks one slot at a time and proposes no values from other services (``max_request=1``,
``propose_rate=0``): those replies have no action of their own.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from ..agents.schema_agent import SchemaAgent, ServiceSchema
from ..engine.contracts import EpisodeContext, Observation
from ..engine.seeding import stable_hash
from .actions import REQ_MORE, Action, ActionSet


class SchemaPolicy:
    """The rule-based schema agent as a policy over an ``ActionSet``'s ids."""

    def __init__(self, actions: ActionSet, pack: Any, seed: int = 0) -> None:
        self.actions = actions
        self.pack = pack
        self.seed = seed
        self.episodes = 0
        self.unmapped = 0  # replies that were none of the actions (REQ_MORE was taken instead)
        self._schemas: dict[str, ServiceSchema] = {}
        self._fallback = actions.ids[Action(REQ_MORE)]

    def reset(self, info: dict[str, Any]) -> None:
        """Start an episode: the agent sees the scenario and tools the environment's agent was given."""
        self.agent = SchemaAgent(self.pack, services=self._schemas, max_request=1, propose_rate=0.0)
        rng = random.Random(stable_hash("schema-policy", self.seed, self.episodes))
        self.agent.start(EpisodeContext(episode_id=f"policy-{self.episodes}", scenario=info["scenario"],
                                        tools=info["tools"], rng=rng, seed=self.seed))
        self.episodes += 1

    def __call__(self, observation: np.ndarray, info: dict[str, Any]) -> int:
        """The action id of the schema agent's reply to the turn (or call result) in ``info``."""
        result = info.get("tool_result")
        obs = Observation(user=info["user_turn"], history=[], tool_results=[result] if result is not None else [])
        action = self.actions.action_of(self.agent.respond(obs))
        if action is None:
            self.unmapped += 1
            return self._fallback
        return action


class RandomPolicy:
    """Uniformly random actions: over all of them, or (``masked``) over those the environment can fill now."""

    def __init__(self, n: int, seed: int = 0, masked: bool = False) -> None:
        self.n = n
        self.masked = masked
        self.rng = np.random.default_rng(seed)

    def reset(self, info: dict[str, Any]) -> None:
        """Nothing to start."""

    def __call__(self, observation: np.ndarray, info: dict[str, Any]) -> int:
        """A random action id."""
        if self.masked:
            return int(self.rng.choice(np.flatnonzero(info["action_mask"])))
        return int(self.rng.integers(self.n))
