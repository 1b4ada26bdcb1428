"""The model-driven user's prompts and annotations: pure functions of the scenario, tested without servers."""

from __future__ import annotations

import pytest

from dialogsim.engine.contracts import Scenario
from dialogsim.engine.events import Act, AgentTurn, Frame
from dialogsim.scenarios.proactive.personas import BUILTIN_PERSONAS
from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet
from dialogsim.users.llm_prompt import DONTCARE, PROMPTS_DIR, STOP, read_goal, render, sections
from dialogsim.users.llm_reading import TurnReader

FIELDS = ("service", "intent", "constraints", "optional", "requested", "relax", "from_previous")


def _goal(pack, index: int) -> Scenario:
    return SgdScenarioSet(pack).draw(index, 0)[0]


def test_an_sgd_goal_in_plain_words(pack):
    """Every part with its service, intent description, values, requests and relaxations; the stop rule."""
    scenario = _goal(pack, 0)
    prompt, opening = render(scenario)
    assert opening is None and STOP in prompt and "You are playing a user" in prompt
    for n, sg in enumerate(scenario.data["goal"]["subgoals"], 1):
        assert f"{n}. With the {sg['service']} service:" in prompt and f"({sg['intent']})." in prompt
        for slot, value in sg["constraints"].items():
            assert f"({slot}): {DONTCARE if value == 'dontcare' else value}" in prompt or value in ("True", "False")
        for slot in sg["requested"]:
            assert f"({slot})" in prompt
    assert "Find events in a given city".lower() in prompt.lower()  # the schema's own description
    assert "$" not in prompt.replace("###STOP###", "")  # every placeholder filled


def test_reading_a_rendered_goal_gives_the_goal_back(pack):
    """read_goal(render(goal)) == goal, field by field, for 300 drawn goals (chains, carried slots, relaxations)."""
    sets = SgdScenarioSet(pack, infeasible_share=0.3)
    seen = set()
    for i in range(300):
        scenario = sets.draw(i, 7)[0]
        goal = scenario.data["goal"]
        back = read_goal(render(scenario)[0], pack.schemas)
        assert back["services"] == goal["services"]
        for got, want in zip(back["subgoals"], goal["subgoals"], strict=True):
            assert {k: got[k] for k in FIELDS} == {k: _listed(want[k]) for k in FIELDS}, (i, want)
            seen.update(k for k in FIELDS if want[k])
    assert seen >= {"constraints", "optional", "requested", "relax", "from_previous"}


def _listed(value):
    return [list(v) for v in value] if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)) \
        else value


def test_an_evalset_case_gives_its_plan_and_says_its_starting_prompt():
    """The plan goes into the prompt; the starting prompt is the opening, said without the model."""
    scenario = Scenario(id="c1", kind="evalset", data={"user": {"starting_prompt": "I need soil.",
                                                                "conversation_plan": "Ask for soil, then pay."}})
    prompt, opening = render(scenario, stop="<<END>>")
    assert "Your task: Ask for soil, then pay." in prompt and opening == "I need soil."
    assert "<<END>>" in prompt and STOP not in prompt


def test_a_persona_in_plain_words_and_a_query_task():
    """A trajectory persona reads as a sentence, any other persona as lines; a query is the task."""
    persona = BUILTIN_PERSONAS[0].as_record()
    prompt, _ = render(Scenario(id="s", kind="proactive", data={"query": "Write a sort.", "persona": persona}))
    assert "help with this: Write a sort." in prompt
    assert "Who you are: Impatient-Novice. Your expertise is low; your patience is 0.25" in prompt
    prompt, _ = render(Scenario(id="s", kind="x", data={"query": "q", "persona": {"mood": "grumpy"}}))
    assert "Who you are:\n- mood: grumpy" in prompt


def test_a_scenario_the_user_cannot_play_is_named():
    """No goal, plan or query: a ValueError naming the scenario and kind."""
    with pytest.raises(ValueError, match="'b1' \\(kind 'scripted'\\)"):
        render(Scenario(id="b1", kind="scripted", data={"user": ["hi"]}))


def test_the_prompts_are_files_with_the_sections_the_code_fills():
    """users/prompts holds the templates (package data); each section the code uses exists."""
    assert {p.name for p in PROMPTS_DIR.glob("*.txt")} == {"user.txt", "sgd.txt", "tasks.txt"}
    assert {"system", "opening"} <= set(sections("user"))
    assert {"goal", "part", "want", "want_line", "carried_line", "relax_line"} <= set(sections("sgd"))


# -- annotations -------------------------------------------------------------------------------------

GOAL = {"services": ["Restaurants_1"], "subgoals": [
    {"service": "Restaurants_1", "intent": "FindRestaurants", "constraints": {"city": "San Jose", "cuisine": "Italian"},
     "optional": {}, "requested": ["phone_number"], "relax": [["cuisine", "dontcare"]], "from_previous": {}},
    {"service": "Restaurants_1", "intent": "ReserveRestaurant", "constraints": {"party_size": "2", "time": "19:00"},
     "optional": {}, "requested": [], "relax": [], "from_previous": {"restaurant_name": "restaurant_name"}}]}


def _reader(pack) -> TurnReader:
    return TurnReader(pack, GOAL, {"Restaurants_1": pack.schemas["Restaurants_1"]})


def test_acts_and_spans_are_read_and_the_state_holds_only_goal_values(pack):
    """Goal values the words inform enter the state (canonical, as said); other values are acts only."""
    reader = _reader(pack)
    frames = reader.read("I'm looking for an Italian place to eat.", None)
    assert [f.service for f in frames] == ["Restaurants_1"]
    acts = {(a.act, a.slot, tuple(a.values)) for a in frames[0].actions}
    assert ("INFORM", "cuisine", ("Italian",)) in acts
    span = frames[0].slots[0]
    assert "I'm looking for an Italian place to eat."[span.start:span.exclusive_end] == "Italian"
    assert frames[0].state.active_intent == "FindRestaurants"
    assert frames[0].state.slot_values == {"cuisine": ["Italian"]}
    frames = reader.read("Actually make it Mexican food.", None)
    assert any(a.slot == "cuisine" and a.values == ["Mexican"] for a in frames[0].actions)
    assert frames[0].state.slot_values == {"cuisine": ["Italian"]}  # not a value of the goal


def test_requested_slots_are_the_turn_s_and_an_unread_turn_still_has_a_state(pack):
    """A goal slot asked for is requested this turn only; a turn with no reading gets the current state."""
    reader = _reader(pack)
    reader.read("I'm looking for an Italian place to eat.", None)
    agent = AgentTurn(run="r", ep="e", seq=2, t=0.0, wall=0, turn=1, utterance="How about Tavola?", frames=[
        Frame(service="Restaurants_1", actions=[Act(act="OFFER", slot="restaurant_name", values=["Tavola"])])])
    frames = reader.read("What is their phone number?", agent)
    assert frames[0].state.requested_slots == ["phone_number"]
    frames = reader.read("zzz", agent)
    assert frames[0].actions == [] and frames[0].state.requested_slots == []
    assert frames[0].state.slot_values == {"cuisine": ["Italian"]}


def test_claims_are_the_transactional_parts_with_the_values_held(pack):
    """A reservation the user believes made is claimed with the values it holds for that intent's slots."""
    reader = _reader(pack)
    reader.read("I'm looking for an Italian place to eat.", None)
    claims = reader.claims()
    assert [(c.service, c.intent, c.transactional) for c in claims] == [("Restaurants_1", "ReserveRestaurant", True)]
    assert claims[0].constraints == {}  # cuisine is no argument of ReserveRestaurant


def test_an_offer_selected_and_a_confirmation_affirmed_join_the_state(pack):
    """As in SGD: the offered entity's argument slots when the user takes it; confirmed values when affirmed."""
    reader = _reader(pack)
    reader.read("I'm looking for an Italian place to eat.", None)
    offer = AgentTurn(run="r", ep="e", seq=2, t=0.0, wall=0, turn=1, utterance="How about Tavola in San Jose?",
                      frames=[Frame(service="Restaurants_1", actions=[
                          Act(act="OFFER", slot="restaurant_name", values=["Tavola"], canonical_values=["Tavola"]),
                          Act(act="OFFER", slot="city", values=["San Jose"], canonical_values=["San Jose"])])])
    frames = reader.read("Yes, that sounds good.", offer)
    assert "SELECT" in {a.act for a in frames[0].actions}
    assert frames[0].state.slot_values == {"cuisine": ["Italian"], "restaurant_name": ["Tavola"],
                                           "city": ["San Jose"]}
    confirm = AgentTurn(run="r", ep="e", seq=4, t=0.0, wall=0, turn=3, utterance="A table for 2 at 7 pm?",
                        frames=[Frame(service="Restaurants_1", actions=[
                            Act(act="CONFIRM", slot="party_size", values=["2"], canonical_values=["2"]),
                            Act(act="CONFIRM", slot="time", values=["7 pm"], canonical_values=["19:00"])])])
    frames = reader.read("Yes, that is right.", confirm)
    assert frames[0].state.slot_values["time"] == ["7 pm"] and frames[0].state.slot_values["party_size"] == ["2"]
    assert reader.claims()[0].constraints == {"restaurant_name": "Tavola", "city": "San Jose", "party_size": "2",
                                              "time": "19:00"}
