"""Stable seeds: an episode's seed from (master seed, scenario id, trial), and its named random streams.

Python's ``hash()`` is salted per process, so every derivation goes through blake2b instead.
"""

from __future__ import annotations

import hashlib
import random

STREAMS = ("user", "agent", "world", "timing")


def stable_hash(*parts: object) -> int:
    """A 63-bit integer that depends only on the parts' text, the same on every machine and run."""
    text = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def episode_seed(master_seed: int, scenario_id: str, trial: int) -> int:
    """The seed of one episode."""
    return stable_hash("episode", master_seed, scenario_id, trial)


def stream(seed: int, name: str) -> random.Random:
    """An independent random stream of an episode, so swapping the agent leaves the user's draws unchanged."""
    return random.Random(stable_hash("stream", seed, name))
