"""The persona user: its opening turn, its one reaction, its persona draw and its options."""

from __future__ import annotations

import json
import random

import pytest

from dialogsim.engine.contracts import EpisodeContext, Scenario
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import AgentTurn
from dialogsim.scenarios.proactive.personas import BUILTIN_PERSONAS, draw_persona
from dialogsim.users.persona import make_factory

STATE = {"id": "s-0", "domain": "coding", "query": "Write a function.", "dialogue_turn": 1}


def _user(options=None, arg=None, seed=7, state=STATE):
    user = make_factory(arg, None, options or {})()
    user.start(EpisodeContext(episode_id="e0", scenario=Scenario(id="s-0", kind="proactive", data=state), tools=[],
                              rng=random.Random(0), seed=seed))
    return user


def _said(text: str) -> AgentTurn:
    return AgentTurn(run="r", ep="e0", seq=2, t=1.0, wall=0, turn=1, utterance=text)


def test_opening_turn_asks_the_query_and_says_the_persona():
    """The first turn is the state's query with the persona's record; it does not end the dialogue."""
    user = _user(seed=7)
    opening = user.respond(None)
    persona = draw_persona(BUILTIN_PERSONAS, 7)
    assert (opening.utterance, opening.persona, opening.end, opening.final) == (
        "Write a function.", persona.as_record(), False, False)


def test_reaction_is_the_models_and_the_last_word():
    """The reply to the assistant: the reaction's text and signals, the persona, end and final; then success."""
    user = _user({"persona": "Impatient-Novice"})
    user.respond(None)
    reply = user.respond(_said("Which input? Which output?"))
    assert reply.utterance == "Stop asking, just give me the code."
    assert reply.reaction == {"answered_clarification": 0, "reject_signal": 1, "silence": 0, "off_topic_flag": 0,
                              "satisfaction": 0.3}
    assert (reply.end, reply.final, reply.persona["name"]) == (True, True, "Impatient-Novice")
    verdict = user.verdict()
    assert (verdict.outcome, verdict.reason) == ("success", "the persona reacted: reject")


def test_original_replies_and_a_fixed_persona():
    """replies=original gives the original's texts; persona=NAME fixes the persona whatever the seed."""
    for seed in range(5):
        user = _user({"persona": "Neutral-Intermediate", "replies": "original"}, seed=seed)
        assert user.respond(None).persona["name"] == "Neutral-Intermediate"
        assert user.respond(_said("One question?")).utterance == "好的。"


def test_the_draw_follows_the_episode_seed():
    """Each seed's persona is draw_persona's; seeds spread over the whole set."""
    names = {_user(seed=seed).respond(None).persona["name"] for seed in range(60)}
    assert names == {p.name for p in BUILTIN_PERSONAS}
    assert _user(seed=11).respond(None).persona == draw_persona(BUILTIN_PERSONAS, 11).as_record()


def test_a_personas_file(tmp_path):
    """--user persona:FILE draws from the file's personas."""
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"name": "Calm", "domain": "planning", "expertise": "mid", "patience": 0.9,
                                "clarity": 0.9, "time_pressure": "low", "style": "polite"}) + "\n")
    user = _user(arg=str(path))
    assert user.respond(None).persona["name"] == "Calm"
    assert user.respond(_said("A question? Another?")).utterance == "Okay, sounds good."


@pytest.mark.parametrize("options, problem", [({"mood": "x"}, "unknown option 'mood'"),
                                              ({"persona": "Nobody"}, "unknown persona 'Nobody'"),
                                              ({"replies": "french"}, "replies='french'")])
def test_bad_options_are_user_errors(options, problem):
    """A bad option names itself."""
    with pytest.raises(UserError, match=problem):
        make_factory(None, None, options)


def test_a_scenario_without_a_query_is_refused():
    """The persona user plays tasks with a query; another scenario fails its episode with a reason."""
    with pytest.raises(ValueError, match="tasks with a query"):
        _user(state={"goal": {}})
