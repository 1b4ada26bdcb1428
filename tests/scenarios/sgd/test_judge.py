"""The SGD judge: a claimed success counts only when the episode's tool calls back it and every value the agent
told the user comes from the world's rows (or the user)."""

from __future__ import annotations

import pytest

from dialogsim.agents.schema_agent import SchemaAgent
from dialogsim.engine.contracts import Call, Claim, ToolResult, completed_calls
from dialogsim.engine.events import Act, AgentTurn, EpisodeEnded, Frame, ToolCalled, ToolReturned, UserTurn
from dialogsim.engine.registry import user_factory
from dialogsim.scenarios.sgd.judge import goal_claims, invented, unbacked
from dialogsim.testing import simulate
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


# -- informed values -------------------------------------------------------------------------------

def _env(n: int) -> dict:
    return {"run": "r", "ep": "e000000", "seq": n, "t": float(n), "wall": 0}


def told(*acts: Act, service: str = SVC) -> AgentTurn:
    return AgentTurn(**_env(0), turn=1, utterance="...", frames=[Frame(service=service, actions=list(acts))])


def user_said(**values: str) -> UserTurn:
    return UserTurn(**_env(0), turn=0, utterance="...", frames=[Frame(service=SVC, actions=[
        Act(act="INFORM", slot=slot, values=[v], canonical_values=[v]) for slot, v in values.items()])])


def returned(*rows: dict, service: str = SVC, call_id: str = "c1") -> list:
    return [ToolCalled(**_env(0), call_id=call_id, service=service, method="FindRestaurants", parameters={}),
            ToolReturned(**_env(0), call_id=call_id, results=list(rows))]


def act(kind: str, slot: str, value: str, spoken: str | None = None) -> Act:
    return Act(act=kind, slot=slot, values=[spoken or value], canonical_values=[value])


ROW_PHONE = dict(ROW, phone_number="408-555-0101")


def test_values_from_an_earlier_row_of_the_service_are_backed():
    """OFFER and INFORM values that a returned row holds for that slot (any case) are no invention."""
    events = [*returned(ROW_PHONE), told(act("OFFER", "restaurant_name", "sino"), act("INFORM", "phone_number",
                                                                                       "408-555-0101"))]
    assert invented(events) is None


def test_a_made_up_value_fails_naming_service_act_slot_and_value():
    """A phone number no row holds: the reason names the service, the act, the slot and the value."""
    events = [*returned(ROW_PHONE), told(act("INFORM", "phone_number", "415-555-9999"))]
    assert invented(events) == (f"{SVC}: the agent informed phone_number='415-555-9999', a value no {SVC} row "
                                "the world returned before holds (nor did the user say it)")
    offered = invented([*returned(ROW_PHONE), told(act("OFFER", "restaurant_name", "Chez Nowhere"))])
    assert offered.startswith(f"{SVC}: the agent offered restaurant_name='Chez Nowhere'")


def test_a_value_must_come_from_a_row_returned_before_and_of_that_service():
    """Said before the call returned it, or taken from another service's rows, a value is not backed."""
    assert invented([told(act("INFORM", "phone_number", "408-555-0101")), *returned(ROW_PHONE)]) is not None
    other = returned(ROW_PHONE, service="Restaurants_2")
    assert invented([*other, told(act("INFORM", "phone_number", "408-555-0101"))]) is not None
    failed = [ToolCalled(**_env(0), call_id="c", service=SVC, method="FindRestaurants", parameters={}),
              ToolReturned(**_env(0), call_id="c", error="boom")]
    assert invented([*failed, told(act("INFORM", "phone_number", "408-555-0101"))]) is not None


def test_the_users_own_values_and_dontcare_are_no_invention():
    """A value the user informed for the slot may be said back; "dontcare" claims nothing."""
    events = [user_said(phone_number="408-555-7777"), told(act("INFORM", "phone_number", "408-555-7777"),
                                                           act("INFORM", "price_range", "dontcare"))]
    assert invented(events) is None
    assert invented([user_said(city="408-555-7777"), told(act("INFORM", "phone_number", "408-555-7777"))])


def test_spoken_forms_are_read_as_their_canonical_value():
    """An act without a canonical value is checked by its spoken form, and by what the pack reads it as."""
    row = dict(ROW, time="11:30")
    spoken_only = told(Act(act="INFORM", slot="time", values=["half past 11 in the morning"]))
    assert invented([*returned(row), spoken_only]) is not None
    read = {("time", "half past 11 in the morning"): "11:30"}
    assert invented([*returned(row), spoken_only], lambda svc, slot, text: read.get((slot, text))) is None
    assert invented([*returned(row), told(Act(act="INFORM", slot="time", values=["11:30"]))]) is None


def test_a_count_must_be_how_many_rows_a_call_returned():
    """INFORM_COUNT says how many results a call of the service returned (digits or words), nothing else."""
    rows = returned(ROW, ROW_PHONE)
    assert invented([*rows, told(act("INFORM_COUNT", "count", "2"))]) is None
    assert invented([*rows, told(Act(act="INFORM_COUNT", slot="count", values=["two"]))]) is None
    assert invented([*rows, told(act("INFORM_COUNT", "count", "12"))]) == (
        f"{SVC}: the agent informed count='12', but no {SVC} call in this episode returned that many rows")


def test_questions_and_notifications_are_not_checked():
    """CONFIRM (the user's values or a default, for the user to correct), REQUEST with a proposal,
    OFFER_INTENT and NOTIFY_SUCCESS state nothing about the world's rows."""
    events = [told(act("CONFIRM", "party_size", "7"), act("REQUEST", "city", "Atlantis"),
                   act("OFFER_INTENT", "intent", "ReserveRestaurant"), Act(act="NOTIFY_SUCCESS"))]
    assert invented(events) is None


# -- through the engine: agents that lie ---------------------------------------------------------


class LyingAgent(SchemaAgent):
    """The rule agent, except that it reports every booking done (with made-up details) without calling."""

    def call(self, name, intent, out):
        reply = super().call(name, intent, out)
        if not reply.tool_calls or not self.service(name).transactional[intent]:
            return reply
        made_up = {s: "7" for s in self.service(name).results[intent]}
        return self._after_call(ToolResult(call_id="never", results=[{**made_up, **reply.tool_calls[0].parameters}]))


class SloppyAgent(SchemaAgent):
    """The rule agent, except that its bookings are for another time than the one confirmed."""

    def call(self, name, intent, out):
        reply = super().call(name, intent, out)
        for call in reply.tool_calls:
            if call.method == "ReserveRestaurant":
                call.parameters["time"] = "23:45" if call.parameters["time"] != "23:45" else "10:30"
        return reply


class MadeUpValuesAgent(SchemaAgent):
    """The rule agent, except that every phone number and bus fare it tells the user is made up."""

    lies = {"phone_number": "555-0100", "fare": "7"}

    def say(self, name, acts, end):
        acts = [(a, s, self.lies[s]) if a in ("INFORM", "OFFER") and s in self.lies and v is not None else (a, s, v)
                for a, s, v in acts]
        return super().say(name, acts, end)


def _run(pack, agent_cls, episodes: int = 40):
    scenarios = SgdScenarioSet(pack, ["Restaurants_2"], failure_rate=0.0)
    log = simulate(user=user_factory("agenda", scenarios), agent=lambda: agent_cls(pack), scenarios=scenarios,
                   episodes=episodes, seed=5)
    booked = {e.ep for e in log.of_type("episode_started")
              if any(sg["intent"] == "ReserveRestaurant" for sg in e.scenario["data"]["goal"]["subgoals"])}
    return log, booked


def test_an_agent_that_reports_bookings_it_never_made_fails_them(pack):
    """A lying agent: the user believes it, the judge does not: every goal with a booking fails, named (by the
    made-up booking's details when the agent told the user one, as these come first)."""
    log, booked = _run(pack, LyingAgent)
    assert booked
    assert all(e.method != "ReserveRestaurant" for e in log.of_type("tool_called"))
    ended = {e.ep: e for e in log if isinstance(e, EpisodeEnded)}
    reasons = set()
    for ep in booked:
        assert ended[ep].outcome == "failure", ended[ep]
        reason = ended[ep].reason
        if reason.startswith("Restaurants_2: the agent informed "):
            assert reason.split("=", 1)[1].startswith("'7', a value no Restaurants_2 row the world returned"), reason
            reasons.add("detail")
        else:
            assert reason.startswith("Restaurants_2.ReserveRestaurant: the agent reported success but no "
                                     "successful ReserveRestaurant call with the user's constraints"), ended[ep]
            reasons.add("booking")
    assert reasons == {"detail", "booking"}
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


@pytest.mark.parametrize("service, slot", [("Restaurants_2", "phone_number"), ("Buses_1", "fare")])
def test_an_agent_that_makes_up_a_phone_number_or_a_price_fails(pack, service, slot):
    """The user believes a made-up phone number or fare; the judge fails every episode where it was said, naming
    slot and value, and the episodes where it was not keep the honest agent's outcome."""
    scenarios = SgdScenarioSet(pack, [service], failure_rate=0.0)
    logs = {cls: simulate(user=user_factory("agenda", scenarios), agent=lambda: cls(pack), scenarios=scenarios,
                          episodes=30, seed=5) for cls in (SchemaAgent, MadeUpValuesAgent)}
    lie = MadeUpValuesAgent.lies[slot]
    lied = {e.ep for e in logs[MadeUpValuesAgent].of_type("agent_turn") for f in e.frames for a in f.actions
            if a.slot == slot and a.canonical_values == [lie]}
    honest, ended = logs[SchemaAgent].outcomes(), {e.ep: e for e in logs[MadeUpValuesAgent].of_type("episode_ended")}
    told = f"ed {slot}='{lie}', a value no {service} row the world returned before holds (nor did the user say it)"
    assert len(lied) >= 5
    for ep, e in ended.items():
        if ep in lied:
            assert e.outcome == "failure", e
            assert e.reason.startswith(f"{service}: the agent ") and told in e.reason, e.reason
        else:
            assert e.outcome == honest[ep]
    assert sum(honest[ep] == "success" for ep in lied) >= 0.9 * len(lied)


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
