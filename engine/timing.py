"""Virtual time models: user think time, agent latency and arrivals, parsed from short spec strings.

Specs: ``0`` or ``fixed:S``, ``uniform:A,B``, ``exp:MEAN``, ``lognormal:MU,SIGMA`` (seconds).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .errors import UserError


@dataclass(frozen=True)
class Delay:
    """A seeded distribution of virtual delays in seconds."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    def __post_init__(self) -> None:
        # The engine calls sample() twice per exchange: bind the common kinds to one small function.
        a, width = self.a, self.b - self.a
        if self.kind == "uniform":
            object.__setattr__(self, "sample", lambda rng: a + width * rng.random())
        elif self.kind == "fixed":
            object.__setattr__(self, "sample", lambda rng: a)

    @property
    def draws(self) -> bool:
        """Whether ``sample`` draws from its random stream (a fixed delay does not)."""
        return self.kind != "fixed"

    def sample(self, rng: random.Random) -> float:
        """One delay (>= 0)."""
        if self.kind == "uniform":
            return self.a + (self.b - self.a) * rng.random()
        if self.kind == "fixed":
            return self.a
        if self.kind == "exp":
            return rng.expovariate(1.0 / self.a) if self.a > 0 else 0.0
        return rng.lognormvariate(self.a, self.b)


def parse_delay(spec: str, what: str = "delay") -> Delay:
    """Parse a delay spec; a bad one is a UserError naming ``what``."""
    name, _, args = str(spec).partition(":")
    try:
        if not args and name.replace(".", "", 1).isdigit():
            return Delay("fixed", float(name))
        values = [float(x) for x in args.split(",")] if args else []
        for v in values:
            if not math.isfinite(v):
                raise ValueError
        if name == "fixed" and len(values) == 1 and values[0] >= 0:
            return Delay("fixed", values[0])
        if name == "uniform" and len(values) == 2 and 0 <= values[0] <= values[1]:
            # uniform:A,A is fixed:A: it draws nothing, so that a zero delay never draws (a read-back agent's
            # tool rounds are told apart by their times: engine/tape.py)
            return Delay("uniform", values[0], values[1]) if values[0] < values[1] else Delay("fixed", values[0])
        if name == "exp" and len(values) == 1 and values[0] >= 0:
            return Delay("exp", values[0])
        if name == "lognormal" and len(values) == 2 and values[1] >= 0:
            return Delay("lognormal", values[0], values[1])
    except ValueError:
        pass
    raise UserError(f"bad {what} {spec!r}: expected 0, fixed:S, uniform:A,B, exp:MEAN or lognormal:MU,SIGMA")


@dataclass(frozen=True)
class Arrivals:
    """How episodes arrive: all at once (bounded by concurrency) or as a Poisson process of ``rate``/s."""

    kind: str
    rate: float = 0.0


def parse_arrivals(spec: str) -> Arrivals:
    """``all`` or ``poisson:RATE``."""
    if spec == "all":
        return Arrivals("all")
    name, _, arg = spec.partition(":")
    if name == "poisson":
        try:
            rate = float(arg)
        except ValueError:
            rate = -1.0
        if rate > 0 and math.isfinite(rate):
            return Arrivals("poisson", rate)
    raise UserError(f"bad arrivals {spec!r}: expected 'all' or 'poisson:RATE' with RATE > 0 episodes per second")
