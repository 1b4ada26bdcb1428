"""IdentityMemo: one build per set of objects, by identity, bounded."""

from __future__ import annotations

from dialogsim.engine.memo import IdentityMemo


def test_the_same_objects_build_once_and_equal_copies_build_again():
    """A value is built once for the very same parts; an equal copy is another key; a full memo empties."""
    memo, builds = IdentityMemo(limit=2), []

    def build(tag):
        return lambda: builds.append(tag) or tag

    script = ["hi", "bye"]
    assert memo.get((script,), build("a")) == "a"
    assert memo.get((script,), build("b")) == "a"
    assert memo.get((list(script),), build("c")) == "c"
    assert builds == ["a", "c"] and len(memo) == 2
    memo.get(([],), build("d"))  # past the limit: emptied first, so only this entry is left
    assert len(memo) == 1 and memo.get((script,), build("e")) == "e"
