"""The "sgd" scenario set: stable draws, scenario shape, tools as JSON Schema, registry and pack paths."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from dialogsim.engine.errors import UserError
from dialogsim.engine.registry import load_scenarios
from dialogsim.scenarios.sgd.pack import DEFAULT_PACK, load_pack
from dialogsim.scenarios.sgd.scenario_set import SgdScenarioSet, load_scenario_set
from dialogsim.scenarios.sgd.world import SgdWorld


@pytest.fixture(scope="module")
def sset():
    """The default sgd scenario set."""
    return SgdScenarioSet(load_pack())


def test_draw_shape_and_stability(sset):
    """A draw is a Scenario with the goal and its services' schemas; the same (seed, index) repeats."""
    scenario, trial = sset.draw(42, 7)
    assert trial == 0 and scenario.id == "sgd-000042" and scenario.kind == "sgd"
    data = scenario.data
    assert data["pack"] == sset.pack.id
    assert set(data["schemas"]) == set(data["goal"]["services"])
    assert sset.draw(42, 7)[0].data == data
    others = [sset.draw(i, 7)[0].data["goal"] for i in range(20)]
    assert len({json.dumps(g, sort_keys=True) for g in others}) == 20
    assert sset.draw(42, 8)[0].data["goal"] != data["goal"]
    assert SgdScenarioSet(sset.pack, seed_offset=1).draw(42, 7)[0].data["goal"] != data["goal"]
    assert (sset.name, sset.default_user, sset.default_agent) == ("sgd", "agenda", "schema")


@pytest.mark.slow
def test_draws_do_not_depend_on_python_hash_seed():
    """Draws are keyed by blake2b, not hash(): two interpreters with different hash seeds agree."""
    code = ("import json; from dialogsim.scenarios.sgd.scenario_set import load_scenario_set; "
            "s = load_scenario_set(None); print(json.dumps([s.draw(i, 3)[0].data['goal'] for i in range(5)]))")
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   check=True).stdout)
    assert outs[0] == outs[1] and outs[0].startswith("[")


def test_tools_follow_the_schema(sset):
    """One tool per intent of the goal's services: required slots, enums of categorical slots, defaults."""
    scenario, _ = sset.draw(3, 1)
    tools = sset.tools(scenario)
    pack = sset.pack
    expected = {(s, i) for s in scenario.data["goal"]["services"] for i in pack.service(s).intents}
    assert {(t.service, t.method) for t in tools} == expected
    for t in tools:
        intent = pack.service(t.service).intents[t.method]
        assert t.transactional == intent.is_transactional and t.description == intent.description
        params = t.parameters
        assert params["type"] == "object" and params["required"] == list(intent.required_slots)
        assert set(params["properties"]) == set(intent.required_slots) | set(intent.optional_slots)
        for slot, prop in params["properties"].items():
            spec = pack.service(t.service).slots[slot]
            assert prop["description"] == spec.description
            if spec.is_categorical:
                assert prop["enum"] == list(spec.possible_values)  # no "dontcare": not a value of the slot
                assert prop.get("default", prop["enum"][0]) in prop["enum"]  # a default must be valid
            else:
                assert "enum" not in prop
            assert prop.get("default") != "dontcare"


def test_world_per_episode(sset):
    """world() gives a fresh SgdWorld that runs the goal's first search."""
    scenario, _ = sset.draw(0, 0)
    world = sset.world(scenario, random.Random(0))
    assert isinstance(world, SgdWorld)
    sg = scenario.data["goal"]["subgoals"][0]
    assert world.call(sg["service"], sg["intent"], {}) is not None


def test_registry_and_pack_paths(tmp_path):
    """The registry loads "sgd", "sgd:PACK_DIR", "sgd:#services" and a bare pack directory."""
    default = load_scenarios("sgd")
    assert default.name == "sgd" and default.pack.id == load_pack().id
    by_path = load_scenarios(str(DEFAULT_PACK))
    assert by_path.pack.id == default.pack.id
    assert load_scenarios(f"sgd:{DEFAULT_PACK}").pack.id == default.pack.id
    narrowed = load_scenario_set("#Trains_1,Messaging_1")
    for i in range(10):
        assert set(narrowed.draw(i, 0)[0].data["goal"]["services"]) <= {"Trains_1", "Messaging_1"}
    with pytest.raises(UserError, match="Ghost_1"):
        load_scenario_set("#Ghost_1")
    with pytest.raises(UserError, match="not a pack"):
        load_scenario_set(str(tmp_path))


def test_options_in_the_spec():
    """``sgd:[PACK][#services][?key=value&...]`` sets the failure options; bad ones are a clear UserError."""
    default = load_scenario_set(None)
    assert (default.failure_rate, default.infeasible_share, default.multi_share) == (0.04, 0.03, None)
    tuned = load_scenarios("sgd:#Restaurants_2,RideSharing_1?failure_rate=0.5&infeasible_share=0.25&multi_share=1")
    assert (tuned.failure_rate, tuned.infeasible_share, tuned.multi_share) == (0.5, 0.25, 1.0)
    assert tuned.services == ["Restaurants_2", "RideSharing_1"]
    assert tuned.world(tuned.draw(0, 0)[0], random.Random(0)).failure_rate == 0.5
    assert all(len(tuned.draw(i, 0)[0].data["goal"]["services"]) == 2 for i in range(10))
    assert load_scenarios(f"sgd:{DEFAULT_PACK}?failure_rate=0").failure_rate == 0.0
    with pytest.raises(UserError, match="unknown option 'failure' .*known: failure_rate, infeasible_share"):
        load_scenario_set("?failure=0.1")
    with pytest.raises(UserError, match="'failure_rate' needs a number between 0 and 1, got '2'"):
        load_scenario_set("?failure_rate=2")
    with pytest.raises(UserError, match="'multi_share' needs a number"):
        load_scenario_set("#Weather_1?multi_share=lots")


@pytest.mark.slow
def test_default_failures_are_near_real_sgd(sset):
    """With the defaults few searches are infeasible (real dev: 0.4% find nothing) yet some are, to exercise
    NOTIFY_FAILURE, REQUEST_ALTS and relaxation."""
    searches = infeasible = 0
    for i in range(2000):
        goal = sset.draw(i, 5)[0].data["goal"]
        for sg in goal["subgoals"]:
            if not sset.pack.service(sg["service"]).intents[sg["intent"]].is_transactional:
                searches += 1
                infeasible += not sg["feasible"]
    assert 0.005 < infeasible / searches < 0.06


def test_a_pack_directory_takes_services_and_options_like_the_sgd_spec():
    """`--scenarios PACK_DIR#Svc?key=value` restricts services and sets options as `sgd:PACK_DIR#...` does."""
    from dialogsim.engine.errors import UserError
    from dialogsim.engine.registry import load_scenarios
    from dialogsim.scenarios.sgd.pack import load_pack

    path = load_pack().path
    scenarios = load_scenarios(f"{path}#Restaurants_1?failure_rate=0.5")
    assert scenarios.services == ["Restaurants_1"] and scenarios.failure_rate == 0.5
    assert scenarios.draw(0, 0)[0].data["goal"]["services"] == ["Restaurants_1"]
    with pytest.raises(UserError, match="not a scenario pack"):
        load_scenarios(f"{path.parent}#Restaurants_1")
