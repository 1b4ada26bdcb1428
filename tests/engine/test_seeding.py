"""Seeds and random streams: stable across processes, and lazy streams draw exactly what Random would."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from dialogsim.engine.seeding import LazyRandom, Stream, episode_seed, stable_hash, stream


@pytest.mark.slow
def test_stable_hash_is_the_same_in_another_process():
    """The hash does not depend on Python's per-process hash salt."""
    code = "from dialogsim.engine.seeding import stable_hash; print(stable_hash('a', 1, 'b'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) == stable_hash("a", 1, "b")
    assert 0 <= stable_hash("x") < 2**63


def test_episode_seeds_differ_by_every_input():
    """Master seed, scenario id and trial each change the episode seed."""
    seeds = {episode_seed(0, "s", 0), episode_seed(1, "s", 0), episode_seed(0, "t", 0), episode_seed(0, "s", 1)}
    assert len(seeds) == 4


@pytest.mark.parametrize("master, scenario, trial", [(0, "s", 0), (7, "Restaurants_2/3", 12), (-1, "café ✓", 10**9)])
def test_episode_seed_is_the_stable_hash_it_spells_out(master, scenario, trial):
    """episode_seed, written out for speed, equals stable_hash("episode", master seed, scenario id, trial)."""
    assert episode_seed(master, scenario, trial) == stable_hash("episode", master, scenario, trial)


@pytest.mark.parametrize("draw", [
    lambda r: [r.random() for _ in range(5)],
    lambda r: [r.randint(0, 10**12) for _ in range(5)],
    lambda r: r.sample(range(1000), 10),
    lambda r: r.choices("abcdef", k=8),
    lambda r: [r.gauss(0, 1), r.uniform(2, 3), r.lognormvariate(0, 1), r.expovariate(2.0)],
    lambda r: (r.shuffle(x := list(range(30))), x)[1],
    lambda r: [r.getrandbits(70), r.choice("xyz"), r.random()],
    lambda r: r.getstate(),
])
@pytest.mark.parametrize("kind", [LazyRandom, Stream])
def test_streams_draw_exactly_like_random(draw, kind):
    """A LazyRandom or a Stream gives the very sequence random.Random(seed) gives, whatever is drawn first."""
    for seed in (0, 123456789, 2**63 - 1):
        assert draw(kind(seed)) == draw(random.Random(seed))


def test_streams_are_independent_and_reproducible():
    """Named streams of one seed differ from each other and repeat for the same seed."""
    assert stream(7, "user").random() == stream(7, "user").random()
    assert stream(7, "user").random() != stream(7, "agent").random()
    lazy = stream(7, "world")
    lazy.seed(99)
    assert lazy.random() == random.Random(99).random()
