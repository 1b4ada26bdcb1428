"""Stable seeds: an episode's seed from (master seed, scenario id, trial), and its named random streams.

Python's ``hash()`` is salted per process, so every derivation goes through blake2b instead.
"""

from __future__ import annotations

import _random
from hashlib import blake2b
from struct import Struct
import random

STREAMS = ("user", "agent", "world", "timing")


def stable_hash(*parts: object) -> int:
    """A 63-bit integer that depends only on the parts' text, the same on every machine and run."""
    text = "\x1f".join(map(str, parts)).encode("utf-8")
    return int.from_bytes(blake2b(text, digest_size=8).digest(), "big") >> 1


def episode_seed(master_seed: int, scenario_id: str, trial: int) -> int:
    """The seed of one episode."""
    # stable_hash("episode", master_seed, scenario_id, trial), spelled out: it runs once per episode
    text = f"episode\x1f{master_seed!s}\x1f{scenario_id!s}\x1f{trial!s}".encode("utf-8")
    return _big_endian_u64(blake2b(text, digest_size=8).digest())[0] >> 1


_big_endian_u64 = Struct(">Q").unpack  # int.from_bytes(digest, "big"), for less
_STREAM_KEYS: dict[str, int] = {}


def stream(seed: int, name: str) -> random.Random:
    """An independent random stream of an episode, so swapping the agent leaves the user's draws unchanged.

    The stream's seed is the episode seed xor a hash of the stream's name: the episode seed is already a
    hash, and Mersenne Twister's seeding mixes every bit of its key, so no second hash per stream is needed.
    """
    key = _STREAM_KEYS.get(name)
    if key is None:
        key = _STREAM_KEYS[name] = stable_hash("stream", name)
    return LazyRandom(seed ^ key)


def episode_streams(seed: int, timed: bool) -> tuple[random.Random, random.Random, random.Random, random.Random | None]:
    """An episode's four streams, in the order of ``STREAMS``: the same as ``stream(seed, name)`` for each.

    The user's, agent's and world's seed themselves when first drawn from (scripted parts never draw).
    The timing stream, drawn from on every turn when the engine's delays are random (``timed``), is
    seeded now, by the C initializer alone; None when the delays are fixed and never draw.
    """
    user, agent, world, timing = _EPISODE_KEYS
    return (LazyRandom(seed ^ user), LazyRandom(seed ^ agent), LazyRandom(seed ^ world),
            Stream(seed ^ timing) if timed else None)


class Stream(random.Random):
    """``Stream(n)`` draws exactly as ``random.Random(n)``, seeded by the C initializer alone: without the
    Python-level ``__init__`` and ``seed``, or LazyRandom's first-draw check (together a third as much
    again as the seeding itself, paid per episode)."""

    __init__ = _random.Random.__init__  # type: ignore[assignment]  # seeds from an int as Random.seed does
    gauss_next = None  # random.Random.gauss's cache, which its __init__ would have set


class LazyRandom(random.Random):
    """A ``random.Random`` that seeds itself on its first draw.

    Seeding a Mersenne Twister costs a few µs; an episode makes four streams and scripted parts never
    draw from theirs. Every draw goes through ``random()`` or ``getrandbits()``, so those two seed the
    generator first: the sequence is exactly ``random.Random(seed)``'s.
    """

    __slots__ = ("_lazy_seed",)  # the instance dict is made only if the stream is used
    gauss_next = None  # random.Random.gauss's cache, read before it is first set

    def __init__(self, seed: int) -> None:  # deliberately no super().__init__: that would seed now
        self._lazy_seed: int | None = seed

    def _wake(self) -> None:
        seed, self._lazy_seed = self._lazy_seed, None
        _random.Random.seed(self, seed)  # what random.Random.seed does with an int, minus its checks
        # Later draws skip the check: the C methods shadow these Python ones on the instance.
        self.random = _c_random.__get__(self)  # type: ignore[method-assign]
        self.getrandbits = _c_getrandbits.__get__(self)  # type: ignore[method-assign]

    def random(self) -> float:
        if self._lazy_seed is not None:
            self._wake()
        return _c_random(self)

    def getrandbits(self, k: int) -> int:
        if self._lazy_seed is not None:
            self._wake()
        return _c_getrandbits(self, k)

    def seed(self, a: object = None, version: int = 2) -> None:
        self._lazy_seed = None
        super().seed(a, version)

    def getstate(self) -> tuple:
        if self._lazy_seed is not None:
            self._wake()
        return super().getstate()

    def setstate(self, state: tuple) -> None:
        self._lazy_seed = None
        super().setstate(state)


_c_random = _random.Random.random
_c_getrandbits = _random.Random.getrandbits
_EPISODE_KEYS = tuple(stable_hash("stream", name) for name in STREAMS)
