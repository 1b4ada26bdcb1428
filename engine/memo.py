"""A bounded memo keyed by the identity of the objects a value is built from.

Scripts, tool lists and scenario encodings are built once and shared by every episode that uses the very
same objects (the engine never changes them): keying by identity costs an ``id()`` per part where keying by
value would hash or compare whole structures.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

T = TypeVar("T")


class IdentityMemo:
    """Values built once per set of objects, keyed by their ids; each entry holds its objects, so that an
    id cannot be reused while the entry lives. Emptied when full (a bound on memory)."""

    def __init__(self, limit: int = 256) -> None:
        self._entries: dict[tuple[int, ...], tuple[tuple[Any, ...], Any]] = {}
        self._limit = limit

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, parts: tuple[Any, ...], build: Callable[[], T]) -> T:
        """The value built from ``parts`` (by ``build``, unless these very objects were seen before)."""
        key = tuple(map(id, parts))
        hit = self._entries.get(key)
        if hit is None:
            if len(self._entries) >= self._limit:
                self._entries.clear()
            hit = self._entries[key] = (parts, build())
        return hit[1]
