"""The environment's action space and its engine stepper, without Gymnasium: ids, masks, realization, logs."""

from __future__ import annotations

import random

import pytest

from dialogsim.engine.contracts import AgentReply, ToolCall
from dialogsim.engine.events import Act, Frame
from dialogsim.engine.registry import user_factory
from dialogsim.engine.runner import BatchSettings
from dialogsim.rl.actions import Action, ActionSet
from dialogsim.rl.stepper import ABANDONED, EpisodeStepper
from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet
from dialogsim.testing import MemoryLog

SVC = "Restaurants_1"


@pytest.fixture
def actions(pack):
    """The actions over Restaurants_1."""
    return ActionSet([pack.schemas[SVC]])


def stepper(pack, sink, max_turns: int = 50) -> EpisodeStepper:
    """A stepper over Restaurants_1 goals with the agenda user."""
    scenarios = SgdScenarioSet(pack, [SVC])
    return EpisodeStepper(scenarios, user_factory("agenda", scenarios), BatchSettings(max_turns=max_turns), sink,
                          run_id="r", user_spec="agenda", agent_spec="rl-env")


def reply(*acts: tuple, service: str = SVC) -> AgentReply:
    """A reply whose one frame holds (act, slot[, value]) acts."""
    built = [Act(act=a[0], slot=a[1] if len(a) > 1 else "", values=[a[2]] if len(a) > 2 else [],
                 canonical_values=[a[2]] if len(a) > 2 else []) for a in acts]
    return AgentReply(utterance="x", frames=[Frame(service=service, actions=built)])


def test_ids_are_the_global_moves_then_each_service_in_schema_order(pack, actions):
    """REQ_MORE and GOODBYE first, then Restaurants_1's moves: requests of intent slots, confirm, calls, offer,
    informs of result slots, answer, offer_intent of the transaction, notifications."""
    names = actions.names()
    assert names[:3] == ["REQ_MORE", "GOODBYE", "Restaurants_1:REQUEST(restaurant_name)"]
    assert names[-4:] == ["Restaurants_1:ANSWER", "Restaurants_1:OFFER_INTENT(ReserveRestaurant)",
                          "Restaurants_1:NOTIFY_SUCCESS", "Restaurants_1:NOTIFY_FAILURE"]
    assert {"Restaurants_1:CALL(FindRestaurants)", "Restaurants_1:CALL(ReserveRestaurant)",
            "Restaurants_1:CONFIRM", "Restaurants_1:OFFER", "Restaurants_1:INFORM(phone_number)"} <= set(names)
    assert "Restaurants_1:REQUEST(phone_number)" not in names  # a result slot, no intent takes it
    assert len(set(names)) == len(actions) == 30
    two = ActionSet([pack.schemas[SVC], pack.schemas["Hotels_2"]])
    assert two.names()[:len(actions)] == names and two.names()[len(actions)].startswith("Hotels_2:")


def test_replies_map_to_the_move_they_make(actions):
    """A call is CALL; otherwise the reply's first act kind by rank; several INFORMs are ANSWER; none is REQ_MORE."""
    ids = actions.ids
    call = AgentReply(tool_calls=[ToolCall(service=SVC, method="FindRestaurants", parameters={})])
    assert actions.action_of(call) == ids[Action("CALL", SVC, "FindRestaurants")]
    assert actions.action_of(reply(("OFFER", "restaurant_name", "Sino"), ("INFORM_COUNT", "count", "3"),
                                   ("INFORM", "phone_number", "1"))) == ids[Action("OFFER", SVC)]
    assert actions.action_of(reply(("NOTIFY_FAILURE",), ("REQ_MORE",))) == ids[Action("NOTIFY_FAILURE", SVC)]
    assert actions.action_of(reply(("INFORM", "phone_number", "1"))) == ids[Action("INFORM", SVC, "phone_number")]
    assert actions.action_of(reply(("INFORM", "phone_number", "1"), ("INFORM", "city", "X"))) == \
        ids[Action("ANSWER", SVC)]
    assert actions.action_of(reply(("REQUEST", "city"), ("REQUEST", "cuisine"))) == ids[Action("REQUEST", SVC, "city")]
    assert actions.action_of(reply(("OFFER_INTENT", "intent", "ReserveRestaurant"))) == \
        ids[Action("OFFER_INTENT", SVC, "ReserveRestaurant")]
    assert actions.action_of(reply(("GOODBYE",))) == ids[Action("GOODBYE")]
    assert actions.action_of(AgentReply(utterance="How can I help you?")) == ids[Action("REQ_MORE")]
    assert actions.action_of(reply(("SHRUG",))) is None
    assert actions.action_of(reply(("REQUEST", "city"), service="Hotels_2")) is None  # not one of these services


def test_stepper_episodes_are_logged_like_runs_and_the_mask_says_what_can_be_filled(pack, actions):
    """Random actions through the stepper: every started episode ends once in the log, agent turns carry
    SGD frames, calls are tool events, and an action is filled exactly when the mask said it could be."""
    log = MemoryLog()
    s = stepper(pack, log, max_turns=30)
    rng = random.Random(3)
    checked = 0
    for index in range(12):
        s.start(seed=7, index=index, episode=index)
        while s.request is not None:
            mask = actions.mask(s.voice)
            action = rng.randrange(len(actions))
            answer, filled = actions.realize(action, s.voice)
            assert filled == mask[action]
            checked += 1
            s.answer(answer)
        assert s.ended is not None and s.ended.ep == f"e{index:06d}"
    s.close()
    assert checked > 50
    ended = log.of_type("episode_ended")
    assert [e.ep for e in ended] == [f"e{i:06d}" for i in range(12)]
    assert {e.agent for e in log.of_type("episode_started")} == {"rl-env"}
    assert all(t.frames or t.utterance for t in log.of_type("agent_turn"))
    assert len(log.of_type("tool_called")) == len(log.of_type("tool_returned")) > 0
    assert sum(s.counts.values()) == 12


def test_a_reset_in_mid_episode_ends_it_as_an_agent_failure(pack):
    """Starting another episode (or closing) while one waits for the agent logs its end, outcome error."""
    log = MemoryLog()
    s = stepper(pack, log)
    s.start(seed=1, index=0, episode=0)
    assert s.request is not None
    s.start(seed=1, index=1, episode=1)
    s.close()
    ended = log.of_type("episode_ended")
    assert [(e.ep, e.outcome) for e in ended] == [("e000000", "error"), ("e000001", "error")]
    assert ABANDONED in ended[0].reason
    assert s.counts == {"error": 2}


def test_the_same_seed_and_index_draw_the_same_episode_whatever_its_number(pack):
    """An episode is drawn by (seed, index); its number in the log only names it."""
    first, second = MemoryLog(), MemoryLog()
    for log, number in ((first, 0), (second, 5)):
        s = stepper(pack, log)
        s.start(seed=4, index=2, episode=number)
        s.close()
    a, b = first.of_type("user_turn")[0], second.of_type("user_turn")[0]
    assert (a.utterance, a.frames) == (b.utterance, b.frames) and (a.ep, b.ep) == ("e000000", "e000005")
