"""The SGD judge: a claimed success counts only when the episode's tool calls back it."""

from __future__ import annotations

import pytest

from dialogsim.agents.schema_agent import SchemaAgent
from dialogsim.engine.contracts import Call, Claim, ToolResult
from dialogsim.engine.events import EpisodeEnded, ToolCalled
from dialogsim.engine.registry import user_factory
from dialogsim.engine.runner import completed_calls
from dialogsim.scenarios.sgd.judge import goal_claims, unbacked
from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet
from dialogsim.testing import simulate

SVC = "Restaurants_1"
SCHEMAS = {SVC: {"service_name": SVC, "intents": [
    {"name": "ReserveRestaurant", "is_transactional": True,
     "required_slots": ["restaurant_name", "city", "time"],
     "optional_slots": {"date": "2019-03-01", "party_size": "2"}},
    {"name": "FindRestaurants", "is_transactional": False, "required_slots": ["city", "cuisine"],
     "optional_slots": {"price_range": "dontcare", "has_live_music": "dontcare"}}]}}
BOOK = {"restaurant_name": "Sino", "city": "San Jose", "time": "18:30"}
ROW = {"restaurant_name": "Sino", "city": "San Jose", "cuisine": "Asian", "price_range": "moderate",
       "has_live_music": "False"}


def booking(**constraints: str) -> Claim:
    return Claim(service=SVC, intent="ReserveRestaurant", transactional=True, constraints={**BOOK, **constraints})


def reserve(results: list | None = None, error: str | None = None, **params: str) -> Call:
    return Call(service=SVC, method="ReserveRestaurant", parameters={**BOOK, **params},
                results=[dict(BOOK)] if results is None else results, error=error)


def search(*rows: dict, **params: str) -> Call:
    return Call(service=SVC, method="FindRestaurants", parameters={"city": "San Jose", "cuisine": "Asian", **params},
                results=list(rows))


def test_a_booking_claimed_without_any_call_is_unbacked():
    """NOTIFY_SUCCESS with no call at all: the reason names the subgoal and says no call backs it."""
    why = unbacked([booking()], [], SCHEMAS)
    assert why == (f"{SVC}.ReserveRestaurant: the agent reported success but no successful ReserveRestaurant "
                   "call with the user's constraints (0 successful ReserveRestaurant calls)")


def test_a_booking_with_the_users_values_is_backed():
    """A successful call carrying the user's values (any case) backs the claim; extra agent values do not hurt."""
    assert unbacked([booking()], [reserve(time="18:30", party_size="2")], SCHEMAS) is None
    assert unbacked([booking()], [reserve(restaurant_name="SINO")], SCHEMAS) is None


def test_a_booking_with_a_wrong_value_is_unbacked_and_the_slot_named():
    """The call booked another time than the user's: which slot, what the call had and what the user wants."""
    why = unbacked([booking()], [reserve(time="19:00")], SCHEMAS)
    assert why.startswith(f"{SVC}.ReserveRestaurant: the agent reported success")
    assert why.endswith("(time='19:00' where the user wants '18:30')")


def test_failed_calls_back_nothing():
    """An error or an empty result (a failed booking) is no evidence; a later successful call is."""
    failed = [reserve(results=[]), reserve(results=None, error="ReserveRestaurant: missing required slot 'time'")]
    assert unbacked([booking()], failed, SCHEMAS) is not None
    assert unbacked([booking()], failed + [reserve()], SCHEMAS) is None


def test_optional_slots_follow_sgd_defaults_and_dontcare():
    """A left-out optional slot takes its default; 'dontcare' the user holds agrees with anything."""
    assert unbacked([booking(party_size="2")], [reserve()], SCHEMAS) is None  # default 2
    assert "(party_size='2' where the user wants '4')" in unbacked([booking(party_size="4")], [reserve()], SCHEMAS)
    assert unbacked([booking(date="dontcare")], [reserve(date="2019-03-07")], SCHEMAS) is None
    # a concrete wish is not met by "dontcare" (nor by a default of any value)
    wish = Claim(service=SVC, intent="FindRestaurants", constraints={"city": "San Jose", "price_range": "cheap"},
                 entity={"restaurant_name": "Sino"})
    row = {k: v for k, v in ROW.items() if k != "price_range"}
    assert "price_range='dontcare'" in unbacked([wish], [search(row)], SCHEMAS)


def test_slots_outside_the_intent_are_not_judged():
    """Values the user holds for another intent of the service (the search's cuisine) do not bind a booking."""
    assert unbacked([booking(cuisine="Asian")], [reserve()], SCHEMAS) is None


def test_a_search_needs_the_taken_entity_among_the_results_of_a_call():
    """The entity the user took must be a result row of a successful call of that intent, agreeing with it."""
    claim = Claim(service=SVC, intent="FindRestaurants", constraints={"city": "San Jose", "cuisine": "Asian"},
                  entity={"restaurant_name": "Sino", "city": "San Jose"})
    assert unbacked([claim], [search(ROW)], SCHEMAS) is None
    invented = unbacked([claim], [search(dict(ROW, restaurant_name="Other"))], SCHEMAS)
    assert invented.startswith(f"{SVC}.FindRestaurants: the user took an entity no successful FindRestaurants call")
    live = Claim(service=SVC, intent="FindRestaurants", constraints={"city": "San Jose", "has_live_music": "True"},
                 entity={"restaurant_name": "Sino"})
    assert "(has_live_music='False' where the user wants 'True')" in unbacked([live], [search(ROW)], SCHEMAS)


def test_every_claim_is_judged_in_order():
    """The first claim without evidence is the one reported."""
    search_claim = Claim(service=SVC, intent="FindRestaurants", constraints={"city": "San Jose"},
                         entity={"restaurant_name": "Sino"})
    why = unbacked([search_claim, booking()], [search(ROW)], SCHEMAS)
    assert why.startswith(f"{SVC}.ReserveRestaurant:")


def test_a_user_without_claims_is_judged_on_the_goals_transactions():
    """A user that states no claims: each transactional goal intent still needs a successful call."""
    goal = {"subgoals": [{"service": SVC, "intent": "FindRestaurants"}, {"service": SVC, "intent": "ReserveRestaurant"}]}
    claims = goal_claims(goal, SCHEMAS)
    assert [(c.intent, c.transactional, c.constraints) for c in claims] == [("ReserveRestaurant", True, {})]
    assert unbacked(claims, [], SCHEMAS) is not None
    assert unbacked(claims, [reserve(time="23:00")], SCHEMAS) is None


# -- through the engine: agents that lie ---------------------------------------------------------


class LyingAgent(SchemaAgent):
    """The rule agent, except that it reports every booking done (with made-up details) without calling."""

    def _call(self, name, intent, out):
        reply = super()._call(name, intent, out)
        if not reply.tool_calls or not self._service(name).transactional[intent]:
            return reply
        made_up = {s: "7" for s in self._service(name).results[intent]}
        return self._after_call(ToolResult(call_id="never", results=[{**made_up, **reply.tool_calls[0].parameters}]))


class SloppyAgent(SchemaAgent):
    """The rule agent, except that its bookings are for another time than the one confirmed."""

    def _call(self, name, intent, out):
        reply = super()._call(name, intent, out)
        for call in reply.tool_calls:
            if call.method == "ReserveRestaurant":
                call.parameters["time"] = "23:45" if call.parameters["time"] != "23:45" else "10:30"
        return reply


def _run(pack, agent_cls, episodes: int = 40):
    scenarios = SgdScenarioSet(pack, ["Restaurants_2"], failure_rate=0.0)
    log = simulate(user=user_factory("agenda", scenarios), agent=lambda: agent_cls(pack), scenarios=scenarios,
                   episodes=episodes, seed=5)
    booked = {e.ep for e in log.of_type("episode_started")
              if any(sg["intent"] == "ReserveRestaurant" for sg in e.scenario["data"]["goal"]["subgoals"])}
    return log, booked


def test_an_agent_that_reports_bookings_it_never_made_fails_them(pack):
    """A lying agent: the user believes it, the judge does not: every goal with a booking fails, named."""
    log, booked = _run(pack, LyingAgent)
    assert booked
    assert all(e.method != "ReserveRestaurant" for e in log.of_type("tool_called"))
    ended = {e.ep: e for e in log if isinstance(e, EpisodeEnded)}
    for ep in booked:
        assert ended[ep].outcome == "failure", ended[ep]
        assert ended[ep].reason.startswith("Restaurants_2.ReserveRestaurant: the agent reported success but no "
                                           "successful ReserveRestaurant call with the user's constraints"), ended[ep]
    assert any(ended[ep].outcome == "success" for ep in ended if ep not in booked)  # searches alone still succeed


def test_an_agent_that_books_a_wrong_value_fails_the_booking(pack):
    """A booking that succeeded in the world, but not with the user's values, is no success."""
    log, booked = _run(pack, SloppyAgent)
    ended = {e.ep: e for e in log if isinstance(e, EpisodeEnded)}
    assert booked
    for ep in booked:
        assert ended[ep].outcome == "failure", ended[ep]
        assert ended[ep].reason.startswith("Restaurants_2.ReserveRestaurant: the agent reported success")
        assert ended[ep].reason.endswith("(time='23:45' where the user wants "
                                         f"'{ended[ep].reason.rsplit(chr(39), 2)[1]}')")


def test_the_honest_agent_is_judged_successful(pack):
    """Control: the same goals with the rule agent as it is mostly succeed (the judge is not the failure)."""
    log, booked = _run(pack, SchemaAgent)
    ended = {e.ep: e for e in log if isinstance(e, EpisodeEnded)}
    assert sum(ended[ep].outcome == "success" for ep in booked) >= 0.9 * len(booked)


def test_completed_calls_pair_each_call_with_its_return(pack):
    """The runner's evidence: one Call per tool_called/tool_returned pair, in order, with results or error."""
    log, _ = _run(pack, SchemaAgent, episodes=3)
    calls = completed_calls(log.episode("e000000"))
    called = [e for e in log.episode("e000000") if isinstance(e, ToolCalled)]
    assert [(c.service, c.method, c.parameters) for c in calls] == [(e.service, e.method, e.parameters) for e in called]
    assert all(c.error is None and c.results is not None for c in calls)
