"""Personas, the mainline rule, the reaction model and the action prompts, on hand-checked cases."""

from __future__ import annotations

import json

import pytest

from dialogsim.engine.errors import UserError
from dialogsim.scenarios.proactive.personas import (BUILTIN_PERSONAS, Persona, draw_persona, load_personas,
                                                    mainline_action, persona_named)
from dialogsim.scenarios.proactive.prompts import ACTIONS, action_prompt, user_message
from dialogsim.scenarios.proactive.reaction import react, reply_text

NOVICE, NEUTRAL, MANAGER = BUILTIN_PERSONAS


def persona(**changes) -> Persona:
    """A persona like the neutral built-in, with some fields changed."""
    fields = {**NEUTRAL.as_record(), "name": "Test", **changes}
    return Persona(**fields)


def test_builtin_personas_are_the_formats():
    """The three built-ins, with the record's key order."""
    assert [p.as_record() for p in BUILTIN_PERSONAS] == [
        {"name": "Impatient-Novice", "domain": "coding", "expertise": "low", "patience": 0.25, "clarity": 0.5,
         "time_pressure": "high", "style": "direct"},
        {"name": "Neutral-Intermediate", "domain": "coding", "expertise": "mid", "patience": 0.6, "clarity": 0.6,
         "time_pressure": "low", "style": "polite"},
        {"name": "Busy-Manager", "domain": "planning", "expertise": "high", "patience": 0.35, "clarity": 0.7,
         "time_pressure": "high", "style": "direct"},
    ]


@pytest.mark.parametrize("changes, action", [
    ({"patience": 0.39, "time_pressure": "high"}, "LOW"),
    ({"patience": 0.4, "time_pressure": "high"}, "MID"),  # strict: 0.4 is not < 0.4
    ({"patience": 0.2, "time_pressure": "low"}, "MID"),
    ({"patience": 0.71, "clarity": 0.49}, "HIGH"),
    ({"patience": 0.7, "clarity": 0.1}, "MID"),  # strict: 0.7 is not > 0.7
    ({"patience": 0.9, "clarity": 0.5}, "MID"),  # strict: 0.5 is not < 0.5
])
def test_mainline_rule(changes, action):
    """LOW for patience < 0.4 with high time pressure, HIGH for patience > 0.7 with clarity < 0.5, else MID."""
    assert mainline_action(persona(**changes)) == action


def test_builtin_mainlines():
    """Impatient-Novice and Busy-Manager are hurried (LOW); Neutral-Intermediate gets MID."""
    assert [mainline_action(p) for p in BUILTIN_PERSONAS] == ["LOW", "MID", "LOW"]


def test_draw_is_reproducible_and_uses_the_whole_set():
    """The draw depends on the episode seed alone and reaches every persona."""
    draws = [draw_persona(BUILTIN_PERSONAS, seed) for seed in range(60)]
    assert draws == [draw_persona(BUILTIN_PERSONAS, seed) for seed in range(60)]
    assert set(draws) == set(BUILTIN_PERSONAS)
    assert persona_named(BUILTIN_PERSONAS, "Busy-Manager") is MANAGER
    with pytest.raises(UserError, match="unknown persona 'Nobody'"):
        persona_named(BUILTIN_PERSONAS, "Nobody")


def test_persona_files_json_and_jsonl(tmp_path):
    """A JSON list, one JSON object, or JSON lines; a bad persona names its place."""
    records = [p.as_record() for p in BUILTIN_PERSONAS]
    (tmp_path / "p.json").write_text(json.dumps(records))
    (tmp_path / "one.json").write_text(json.dumps(records[0]))
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert load_personas(tmp_path / "p.json") == BUILTIN_PERSONAS == load_personas(tmp_path / "p.jsonl")
    assert load_personas(tmp_path / "one.json") == (NOVICE,)
    (tmp_path / "bad.jsonl").write_text(json.dumps(records[0]) + "\n" + json.dumps({**records[1], "patience": 2})
                                        + "\n")
    with pytest.raises(UserError, match=r"bad.jsonl: line 2: not a persona .*patience 2"):
        load_personas(tmp_path / "bad.jsonl")
    (tmp_path / "style.json").write_text(json.dumps([{**records[0], "style": "rude"}]))
    with pytest.raises(UserError, match=r"style.json: persona 0: not a persona"):
        load_personas(tmp_path / "style.json")


LONG = "word " * 201  # 201 words: long
EXACTLY_200 = "word " * 200


@pytest.mark.parametrize("message, who, meta, kind", [
    # no question: nothing answered, 0.6, "continue"
    ("def f(): pass", NEUTRAL, (0, 0, 0, 0.6), "continue"),
    # one question, clarity*patience = 0.36 >= 0.35: answered, 0.6 + 0.1 = 0.7
    ("Which input? Here is the code.", NEUTRAL, (1, 0, 0, 0.7), "answered"),
    # the full-width question mark is not a question
    ("请问需要处理空字符串吗？然后我会给出代码。", NEUTRAL, (0, 0, 0, 0.6), "continue"),
    # two questions to an impatient persona (patience 0.25 < 0.4): rejected, 0.6 - 0.3 = 0.3
    ("A? B?", NOVICE, (0, 1, 0, 0.3), "reject"),
    # one question to the novice: 0.5*0.25 < 0.35, not answered
    ("A?", NOVICE, (0, 0, 0, 0.6), "continue"),
    # long message to a patience < 0.3 persona: silence, 0.6 - 0.1 = 0.5
    (LONG, NOVICE, (0, 0, 1, 0.5), "silence"),
    (EXACTLY_200, NOVICE, (0, 0, 0, 0.6), "continue"),  # 200 words is not long
    # answered and rejected and long: 0.6 + 0.1 - 0.3 - 0.1 in that order is 0.29999999999999993
    ("A? B? " + LONG, persona(patience=0.39, clarity=0.9), (1, 1, 0, 0.29999999999999993), "reject"),
    # answered and rejected: 0.6 + 0.1 - 0.3 = 0.39999999999999997
    ("A? B?", persona(patience=0.39, clarity=0.9), (1, 1, 0, 0.39999999999999997), "reject"),
    # rejected and long: 0.6 - 0.3 - 0.1 = 0.19999999999999998, reject wins over silence
    ("A? B? " + LONG, NOVICE, (0, 1, 1, 0.19999999999999998), "reject"),
    # clarity*patience exactly 0.35 counts as answered
    ("A?", persona(patience=0.5, clarity=0.7), (1, 0, 0, 0.7), "answered"),
])
def test_reaction_model(message, who, meta, kind):
    """The meta signals (ints, satisfaction a float computed in the original's order) and the reply kind."""
    reaction = react(message, who)
    assert reaction.meta == dict(zip(["answered_clarification", "reject_signal", "silence", "off_topic_flag",
                                      "satisfaction"], [*meta[:3], 0, meta[3]]))
    assert list(reaction.meta) == ["answered_clarification", "reject_signal", "silence", "off_topic_flag",
                                   "satisfaction"]
    assert repr(reaction.meta["satisfaction"]) == repr(meta[3])
    assert all(type(reaction.meta[k]) is int for k in list(reaction.meta)[:4])
    assert reaction.kind == kind


def test_empty_message_counts_as_one_word():
    """n = max(1, words): an empty message is neither long nor a question."""
    assert react("", NOVICE).meta["satisfaction"] == 0.6


def test_reply_tables():
    """English by default; the original's Chinese texts on request; the reply depends on domain and style."""
    assert [reply_text(k, p) for k, p in [("reject", MANAGER), ("reject", NOVICE), ("answered", NOVICE),
                                          ("answered", NEUTRAL), ("silence", NOVICE), ("continue", NOVICE)]] == [
        "Stop asking, just give me the plan.", "Stop asking, just give me the code.", "OK.", "Okay, sounds good.",
        "...", "Continue."]
    assert [reply_text(k, p, "original") for k, p in [("reject", MANAGER), ("reject", NOVICE),
                                                      ("answered", NOVICE), ("answered", NEUTRAL),
                                                      ("silence", NOVICE), ("continue", NOVICE)]] == [
        "别问了，直接给方案。", "别问了，直接给代码。", "好。", "好的。", "...", "继续。"]
    assert react("A? B?", NOVICE, "original").reply == "别问了，直接给代码。"
    with pytest.raises(ValueError, match="unknown reply table"):
        reply_text("continue", NOVICE, "klingon")


def test_action_prompts_are_the_originals():
    """Six prompts, stripped file texts; the user message is "[Task]\\n" + query."""
    assert ACTIONS == ("LOW", "MID", "HIGH")
    assert action_prompt("coding", "LOW") == (
        "You are an assistant. The user's coding request is sufficiently clear.\n"
        "Directly provide the minimal, runnable solution. Do not ask clarifying questions.\n"
        "Keep the response concise and focused on code.")
    assert "ask up to two clarifying questions" in action_prompt("planning", "HIGH")
    assert "3\u20135 line plan" in action_prompt("coding", "HIGH")
    assert "one key clarifying question" in action_prompt("coding", "MID")
    assert all(action_prompt(d, a) == action_prompt(d, a).strip() for d in ("coding", "planning") for a in ACTIONS)
    assert user_message("Write it") == "[Task]\nWrite it"
    with pytest.raises(ValueError):
        action_prompt("cooking", "LOW")
