"""Paired statistics for comparing two runs episode by episode (``dialogsim diff``): pure functions.

- McNemar's exact test for a binary outcome (success) on paired episodes: the two-sided binomial test of the
  discordant pairs (``b`` successes in A only, ``c`` in B only) against p = 1/2.
- A paired bootstrap confidence interval for the difference of two means (or ratios of sums, such as the
  mean latency per agent turn): the pairs are resampled with replacement, ``resamples`` times (2,000 by
  default) with a seeded generator, and the interval is the percentile interval of the resampled differences.
"""

from __future__ import annotations

import math
import random
from operator import itemgetter

import msgspec

RESAMPLES = 2000
LEVEL = 0.95


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided p-value of McNemar's exact test: ``b`` pairs where only A succeeded, ``c`` where only B did."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


class Interval(msgspec.Struct, kw_only=True):
    """A paired difference B - A: its value on the pairs, and the bootstrap interval around it."""

    a: float
    b: float
    delta: float
    low: float
    high: float
    pairs: int


def ratio(num: list[float], den: list[float]) -> float:
    """Sum of ``num`` over sum of ``den`` (a mean when every ``den`` is 1); NaN when ``den`` sums to 0."""
    total = sum(den)
    return sum(num) / total if total else math.nan


class Columns(msgspec.Struct, kw_only=True):
    """One metric over the pairs (index i is pair i): each run's numerator and denominator per pair; the run's
    figure is the sum of numerators over the sum of denominators (a mean when every denominator is 1). A pair
    that lacks the metric on either side has denominators 0 on both."""

    a_num: list[float]
    a_den: list[float]
    b_num: list[float]
    b_den: list[float]


def paired_bootstrap(metrics: dict[str, Columns], *, resamples: int = RESAMPLES, seed: int = 0,
                     level: float = LEVEL) -> dict[str, Interval]:
    """Each metric's difference B - A over the pairs, with its percentile bootstrap interval at ``level``: the
    pairs are resampled ``resamples`` times (the same resamples for every metric), with ``Random(seed)``."""
    n = len(next(iter(metrics.values())).a_num) if metrics else 0
    deltas: dict[str, list[float]] = {name: [] for name in metrics}
    means = {name: all(x == 1 for x in c.a_den) and all(x == 1 for x in c.b_den) for name, c in metrics.items()}
    differences = {name: [y - x for x, y in zip(c.a_num, c.b_num)] for name, c in metrics.items() if means[name]}
    rng, pairs = random.Random(seed), range(n)
    for _ in range(resamples if n else 0):
        pick = itemgetter(*rng.choices(pairs, k=n)) if n > 1 else (lambda column: (column[0],))
        for name, c in metrics.items():
            if means[name]:  # of means: one sum
                deltas[name].append(sum(pick(differences[name])) / n)
                continue
            da, db = sum(pick(c.a_den)), sum(pick(c.b_den))
            if da and db:
                deltas[name].append(sum(pick(c.b_num)) / db - sum(pick(c.a_num)) / da)
    return {name: _interval(c, deltas[name], level) for name, c in metrics.items()}


def _interval(c: Columns, deltas: list[float], level: float) -> Interval:
    a, b = ratio(c.a_num, c.a_den), ratio(c.b_num, c.b_den)
    pairs = sum(1 for x, y in zip(c.a_den, c.b_den) if x and y)
    if not deltas:
        return Interval(a=a, b=b, delta=b - a, low=math.nan, high=math.nan, pairs=pairs)
    deltas.sort()
    tail = (1 - level) / 2
    low = deltas[min(len(deltas) - 1, int(tail * len(deltas)))]
    high = deltas[max(0, math.ceil((1 - tail) * len(deltas)) - 1)]
    return Interval(a=a, b=b, delta=b - a, low=low, high=high, pairs=pairs)
