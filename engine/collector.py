"""The cyclic garbage collector tuned for work that builds many long-lived objects (a batch, a fork's jobs)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 20_000  # allocations between young-generation collections while tuned


@contextmanager
def tuned_collector() -> Iterator[None]:
    """Tune the cyclic garbage collector for the block, and restore it after."""
    # What exists before the block (a scenario pack's tables and templates: millions of objects) lives as
    # long as it: frozen, the collector stops re-scanning it (about 10% of an SGD run's CPU; half the time of
    # decoding a fork's prefixes). Episodes and requests in flight keep thousands of young objects alive for
    # a moment: with the default young generation (700) the collector runs hundreds of times per 10,000
    # live-agent requests, ~0.5 ms each at 64 in flight; a larger one rarely fills.
    threshold = gc.get_threshold()
    gc.freeze()
    if threshold[0]:  # 0: collection is off, leave it so
        gc.set_threshold(max(threshold[0], YOUNG), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
