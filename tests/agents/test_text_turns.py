"""Text-only turns at the agent side: the schema agent's NLU, its opening question, the OpenAI server's content."""

from __future__ import annotations

import pytest

import json
import random
import urllib.request

from dialogsim.agents.http.server import make_app
from dialogsim.agents.http.testing import serve_in_thread
from dialogsim.agents.nlu import ValueMatcher
from dialogsim.agents.schema_agent import SchemaAgent
from dialogsim.engine.contracts import AgentReply, EpisodeContext, Observation, Scenario
from dialogsim.engine.events import UserTurn
from dialogsim.scenarios.sgd.pack import load_pack


def test_a_first_question_names_its_intent_and_its_values():
    """"What's the weather in Discovery Bay on March 7th?" opens GetWeather with the city and the date."""
    pack = load_pack()
    acts = ValueMatcher(pack, ["Weather_1", "Restaurants_2"]).parse(
        "What's the weather in Discovery Bay on March 7th?", None, None, set(), [])
    got = {(s, a.act, a.slot, a.canonical_values[0] if a.canonical_values else "") for s, a in acts}
    assert got == {("Weather_1", "INFORM_INTENT", "intent", "GetWeather"), ("Weather_1", "INFORM", "city", "Discovery Bay"),
                   ("Weather_1", "INFORM", "date", "2019-03-07")}


def test_a_yes_to_a_yes_no_question_is_the_flags_value():
    """Asked "Do you want a shared ride?", "That's fine with me" informs shared_ride=True, "no" False."""
    nlu = ValueMatcher(load_pack(), ["RideSharing_1"])
    for text, value in (("That's fine with me.", "True"), ("No, a private one.", "False")):
        acts = nlu.parse(text, "RideSharing_1", "GetRide", {"REQUEST"}, ["shared_ride"])
        assert [(a.act, a.slot, a.canonical_values) for _, a in acts] == [("INFORM", "shared_ride", [value])]


def test_the_schema_agent_never_says_an_empty_turn():
    """A first user text the agent cannot place in any service still gets a question back, not ""."""
    pack = load_pack()
    agent = SchemaAgent(pack)
    scenario = Scenario(id="t", kind="sgd", data={"schemas": {"Weather_1": pack.schemas["Weather_1"]}})
    agent.start(EpisodeContext(episode_id="e", scenario=scenario, tools=[], rng=random.Random(1), seed=1))
    turn = UserTurn(run="r", ep="e", seq=0, t=0.0, wall=0, turn=0, utterance="Hello there.")
    reply = agent.respond(Observation(user=turn, history=[]))
    assert reply.utterance.strip() and not reply.tool_calls


class _Mute:
    """An agent that answers with neither words nor tool calls."""

    deterministic = True

    def start(self, ctx) -> None:
        pass

    def respond(self, obs) -> AgentReply:
        return AgentReply()


@pytest.mark.slow
def test_the_openai_server_never_sends_an_empty_assistant_content():
    """A reply without words or tool calls still goes out with non-blank content (clients reject a blank one)."""
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with serve_in_thread(make_app(_Mute, "openai")) as url:
        req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(chat).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            message = json.loads(resp.read())["choices"][0]["message"]
    assert message["content"].strip() and "tool_calls" not in message
