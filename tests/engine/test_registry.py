"""The registry's parsers of plug-in specs and KEY=VALUE options."""

from __future__ import annotations

import pytest

from dialogsim.engine.errors import UserError
from dialogsim.engine.registry import parse_options, parse_spec


def test_a_spec_splits_at_its_first_colon():
    """A spec is a name and an optional argument, which may hold colons of its own."""
    assert parse_spec("agenda") == ("agenda", None)
    assert parse_spec("http:http://127.0.0.1:8080") == ("http", "http://127.0.0.1:8080")


def test_options_split_at_their_first_equals_sign():
    """Each pair is KEY=VALUE; a value may be empty or hold '=' itself, and a later key wins."""
    assert parse_options(["a=1", "b=", "c=x=y", "a=2"], "--user-opt") == {"a": "2", "b": "", "c": "x=y"}
    assert parse_options([], "--agent-opt") == {}


@pytest.mark.parametrize("pair", ["listen", "=text"])
def test_a_pair_without_key_or_equals_sign_names_the_flag(pair):
    """A bad pair is one line naming the flag and the pair."""
    with pytest.raises(UserError, match=f"^--agent-opt '{pair}': expected KEY=VALUE$"):
        parse_options([pair], "--agent-opt")
