"""Official SGD DST metrics: fuzzy matching, hand-computed frames, aggregation, eval-dst, the projection."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import msgspec
import pytest

from dialogsim.engine.cli import main
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import AgentTurn, DialogueState, EpisodeEnded, EpisodeStarted, Frame, SlotSpan, UserTurn
from dialogsim.engine.log import write_events
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import projection as get_projection
from dialogsim.scenarios.sgd.dst_metrics import Aggregator, compute_f1, frame_metrics, score_episode, token_sort_ratio
from dialogsim.scenarios.sgd.eval_dst_command import evaluate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sgd"

SERVICE = {"service_name": "Restaurants_9", "slots": [
    {"name": "city", "is_categorical": False}, {"name": "cuisine", "is_categorical": False},
    {"name": "price_range", "is_categorical": True}, {"name": "date", "is_categorical": False}]}


@pytest.mark.parametrize("a,b,expected", [
    ("fuzzy wuzzy was a bear", "wuzzy fuzzy was a bear", 100),  # token order ignored
    ("this is a test", "This is a test!", 100),  # case and punctuation ignored
    ("abc", "abd", 67),  # (3 + 3 - 2) / 6
    ("Café", "Cafe", 86),  # fuzzywuzzy drops Latin-1 letters: "caf" vs "cafe" = 6 / 7
    ("a_b", "a b", 67),  # "_" is a word character for fuzzywuzzy's \W
    ("abcdefgh", "abcdexyz", 62),  # 1 - 6/16 = 0.625 exactly: 62.5 rounds half to even (Python's round)
    # 1 - 46/80 is 0.42500000000000004 in floats, so fuzzywuzzy (python-Levenshtein) says 43, not 42
    ("one thousand three hundred and thirty dollars", "Napoli Pizza-taste of The Himalayas", 43),
    ("!!!", "???", 100),  # both empty after processing: equal strings
    ("", "abc", 0),
])
def test_token_sort_ratio_matches_fuzzywuzzy(a, b, expected):
    """token_sort_ratio as fuzzywuzzy (with python-Levenshtein) computes it, worked out by hand."""
    assert token_sort_ratio(a, b) == expected


def test_compute_f1_edge_cases():
    """Both empty = 1; one empty side; multiset counting."""
    assert compute_f1([], []) == (1.0, 1.0, 1.0)
    assert compute_f1(["a"], []) == (pytest.approx(2 * 1.0 * 0.0 / 1.0), 1.0, 0.0)
    assert compute_f1([], ["a"]) == (0.0, 0.0, 1.0)
    f1, p, r = compute_f1(["a", "a", "b"], ["a", "c"])
    assert (p, r) == (0.5, pytest.approx(1 / 3)) and f1 == pytest.approx(0.4)


def test_hand_computed_frame():
    """One frame worked out by hand: fuzzy city hit, categorical miss, a false positive, an absent slot."""
    utterance = "I want Thai food in San Jose"
    ref = {"active_intent": "FindRestaurants", "requested_slots": ["phone_number", "address"],
           "slot_values": {"city": ["San Jose", "SJ"], "price_range": ["cheap"]}}
    hyp = {"active_intent": "FindRestaurants", "requested_slots": ["phone_number"],
           "slot_values": {"city": ["sj"], "price_range": ["moderate"], "cuisine": ["Thai"]}}
    m = frame_metrics(ref, hyp, SERVICE, utterance=utterance,
                      ref_spans=[{"slot": "city", "start": 20, "exclusive_end": 28}],
                      hyp_spans=[{"slot": "city", "start": 20, "exclusive_end": 28},
                                 {"slot": "cuisine", "start": 7, "exclusive_end": 11}])
    assert m["active_intent_accuracy"] == 1.0
    assert (m["requested_slots_precision"], m["requested_slots_recall"]) == (1.0, 0.5)
    assert m["requested_slots_f1"] == pytest.approx(2 / 3)
    assert (m["slot_tagging_precision"], m["slot_tagging_recall"]) == (0.5, 1.0)
    # per slot (city, cuisine, price_range, date): [1, 0, 0, 1]; active: city, price_range
    assert m["average_goal_accuracy"] == 0.5
    assert (m["average_cat_accuracy"], m["average_noncat_accuracy"]) == (0.0, 1.0)
    assert (m["joint_goal_accuracy"], m["joint_cat_accuracy"], m["joint_noncat_accuracy"]) == (0.0, 0.0, 0.0)


def test_partial_fuzzy_credit_and_na():
    """A near miss on a non-categorical slot scores its fuzzy ratio; no active categorical slot is NA."""
    ref = {"active_intent": "X", "requested_slots": [], "slot_values": {"city": ["abc"]}}
    hyp = {"active_intent": "Y", "requested_slots": [], "slot_values": {"city": ["abd"]}}
    m = frame_metrics(ref, hyp, SERVICE)
    assert m["active_intent_accuracy"] == 0.0
    assert m["average_goal_accuracy"] == 0.67 and m["joint_noncat_accuracy"] == 0.67
    assert m["average_cat_accuracy"] == "NA" and m["joint_cat_accuracy"] == 1.0
    assert "slot_tagging_f1" not in m  # no hypothesis spans: not scored, as in the official script


def test_aggregation_is_a_macro_mean_skipping_na():
    """Groups: all, seen/unseen, service, domain; "NA" values do not count."""
    agg = Aggregator(seen={"Restaurants_9"})
    agg.add("Restaurants_9", {"joint_goal_accuracy": 0.0, "average_cat_accuracy": "NA"})
    agg.add("Restaurants_9", {"joint_goal_accuracy": 1.0, "average_cat_accuracy": 1.0})
    agg.add("Hotels_2", {"joint_goal_accuracy": 1.0, "average_cat_accuracy": 0.0})
    r = agg.result()
    assert r["#ALL_SERVICES"] == {"joint_goal_accuracy": pytest.approx(2 / 3), "average_cat_accuracy": 0.5}
    assert r["#SEEN_SERVICES"]["joint_goal_accuracy"] == 0.5 and r["#SEEN_SERVICES"]["average_cat_accuracy"] == 1.0
    assert r["#UNSEEN_SERVICES"]["joint_goal_accuracy"] == 1.0
    assert r["Restaurants"] == r["Restaurants_9"] and r["Hotels"] == r["Hotels_2"]


def _fixture_split() -> tuple[dict, dict]:
    ref = {d["dialogue_id"]: d for d in json.loads((FIXTURES / "dialogues_001.json").read_text())}
    schemas = {s["service_name"]: s for s in json.loads((FIXTURES / "schema.json").read_text())}
    return ref, schemas


def _user_frames(dialogues: dict):
    for d in dialogues.values():
        for t in d["turns"]:
            if t["speaker"] == "USER":
                yield from t["frames"]


def test_reference_against_itself_scores_one():
    """Every metric is 1.0 when the prediction is the reference."""
    ref, schemas = _fixture_split()
    result, frames = evaluate(ref, copy.deepcopy(ref), schemas, None)
    assert frames == sum(1 for _ in _user_frames(ref))
    assert all(v == 1.0 for group in result.values() for v in group.values())


def test_perturbed_predictions_score_what_was_broken():
    """Intent set to NONE and one slot value dropped per frame: the scores count exactly those frames."""
    ref, schemas = _fixture_split()
    hyp = copy.deepcopy(ref)
    for frame in _user_frames(hyp):
        frame["state"]["active_intent"] = "NONE"
        values = frame["state"]["slot_values"]
        if values:
            del values[sorted(values)[0]]
    frames = list(_user_frames(ref))
    none_share = sum(f["state"]["active_intent"] == "NONE" for f in frames) / len(frames)
    empty_share = sum(not f["state"]["slot_values"] for f in frames) / len(frames)
    result, _ = evaluate(ref, hyp, schemas, None)
    assert result["#ALL_SERVICES"]["active_intent_accuracy"] == pytest.approx(none_share)
    assert result["#ALL_SERVICES"]["joint_goal_accuracy"] == pytest.approx(empty_share)
    assert result["#ALL_SERVICES"]["requested_slots_f1"] == 1.0
    assert 0.0 < result["#ALL_SERVICES"]["average_goal_accuracy"] < 1.0


def test_eval_dst_cli_and_mismatches(tmp_path, capsys):
    """eval-dst writes the official JSON; a changed utterance is a one-line error naming dialogue and turn."""
    pred = tmp_path / "pred"
    pred.mkdir()
    shutil.copy(FIXTURES / "dialogues_001.json", pred)
    shutil.copy(FIXTURES / "schema.json", pred)  # an SGD split's schema.json is not read as predictions
    out = tmp_path / "m.json"
    per_frame = tmp_path / "frames.jsonl"
    assert main(["eval-dst", "--ref", str(FIXTURES), "--pred", str(pred), "--out", str(out),
                 "--train-schema", str(FIXTURES / "schema.json"), "--per-frame", str(per_frame)]) == 0
    rows = [json.loads(line) for line in per_frame.read_text().splitlines()]
    assert rows[0]["frame"].startswith("8_00114-000-") and rows[0]["joint_goal_accuracy"] == 1.0
    assert len(rows) == sum(1 for _ in _user_frames(_fixture_split()[0]))
    result = json.loads(out.read_text())
    assert set(result) >= {"#ALL_SERVICES", "#SEEN_SERVICES", "Restaurants_2", "Restaurants"}
    assert "#UNSEEN_SERVICES" not in result
    assert "JGA" in capsys.readouterr().out
    data = json.loads((pred / "dialogues_001.json").read_text())
    data[0]["turns"][2]["utterance"] = "something else"
    (pred / "dialogues_001.json").write_text(json.dumps(data))
    assert main(["eval-dst", "--ref", str(FIXTURES), "--pred", str(pred)]) == 2
    err = capsys.readouterr().err
    assert data[0]["dialogue_id"] in err and "turn 2" in err


@pytest.mark.slow
def test_eval_dst_whole_dev_split_against_itself(shared_sgd, tmp_path):
    """The real dev split scored against itself: 1.0 everywhere, seen and unseen groups present."""
    from dialogsim.scenarios.sgd.eval_dst_command import read_split
    ref = read_split(sorted((shared_sgd / "dev").glob("dialogues_*.json")))
    schemas = {s["service_name"]: s for s in json.loads((shared_sgd / "schemas" / "dev" / "schema.json").read_text())}
    train = {s["service_name"] for s in json.loads((shared_sgd / "schemas" / "train" / "schema.json").read_text())}
    result, frames = evaluate(ref, ref, schemas, train)
    assert frames == 20542
    assert {"#SEEN_SERVICES", "#UNSEEN_SERVICES"} <= set(result)
    assert all(v == 1.0 for group in result.values() for v in group.values())


# -- the projection over a run's events ------------------------------------------------------------------


def _episode(ep: str, agent_states: list) -> list:
    env = dict(run="r", wall=0, t=0.0, ep=ep)
    schemas = {"Restaurants_9": SERVICE}
    events = [EpisodeStarted(**env, seq=0, scenario_id="s", seed=0,
                             scenario={"id": "s", "kind": "sgd", "data": {"services": ["Restaurants_9"],
                                                                          "schemas": schemas}})]
    truth = [DialogueState(active_intent="FindRestaurants", slot_values={"city": ["San Jose"]}),
             DialogueState(active_intent="FindRestaurants", requested_slots=["phone_number"],
                           slot_values={"city": ["San Jose"], "price_range": ["cheap"]})]
    seq = 1
    for k, state in enumerate(truth):
        events.append(UserTurn(**env, seq=seq, turn=2 * k, utterance="u", frames=[
            Frame(service="Restaurants_9", state=state, slots=[SlotSpan(slot="city", start=0, exclusive_end=1)])]))
        seq += 1
        if k < len(agent_states):
            events.append(AgentTurn(**env, seq=seq, turn=2 * k + 1, utterance="a", state=agent_states[k]))
            seq += 1
    events.append(EpisodeEnded(**env, seq=seq, outcome="success"))
    return events


def test_score_episode_uses_the_agents_next_state():
    """Prediction for user turn k = the state in the agent's reply; an untracked service is an empty guess."""
    good = {"Restaurants_9": DialogueState(active_intent="FindRestaurants", slot_values={"city": ["san jose"]})}
    scores = score_episode(_episode("e1", [good, {}]))
    first, second = scores.frames
    assert first.metrics["joint_goal_accuracy"] == 1.0 and first.metrics["active_intent_accuracy"] == 1.0
    assert second.metrics["joint_goal_accuracy"] == 0.0 and second.metrics["active_intent_accuracy"] == 0.0
    assert second.metrics["requested_slots_recall"] == 0.0
    assert "slot_tagging_f1" not in first.metrics
    partial = score_episode(_episode("e2", [good]))
    assert len(partial.frames) == 1 and partial.unscored_turns == 1
    assert score_episode(_episode("e3", [None, None])) is None


def test_slot_tagging_scores_the_spans_the_agent_tagged():
    """An agent that reports tagged_slots gets slot tagging F1 over the user's non-categorical spans."""
    good = {"Restaurants_9": DialogueState(active_intent="FindRestaurants", slot_values={"city": ["san jose"]})}
    events = _episode("e1", [good, good])
    right = [SlotSpan(slot="city", start=0, exclusive_end=1)]
    events[2] = msgspec.structs.replace(events[2], tagged_slots={"Restaurants_9": right})
    events[4] = msgspec.structs.replace(events[4], tagged_slots={})  # tagged the text, found nothing
    first, second = score_episode(events).frames
    assert first.metrics["slot_tagging_f1"] == 1.0
    assert second.metrics["slot_tagging_recall"] == 0.0


@pytest.mark.slow
def test_text_listening_schema_agent_is_scored_on_slot_tagging(tmp_path):
    """`--agent-opt listen=text` makes the schema agent tag the user's text; dst_metrics reports its tag F1."""
    run = tmp_path / "run"
    assert main(["run", "--episodes", "40", "--agent-opt", "listen=text", "--out", str(run), "--no-progress"]) == 0
    assert main(["project", str(run), "--to", "dst_metrics", "--no-progress"]) == 0
    result = json.loads((run / "projections" / "dst_metrics@v1" / "dst_metrics.json").read_text())
    assert 0.5 < result["#ALL_SERVICES"]["slot_tagging_f1"] <= 1.0


def test_dst_metrics_projection_files(tmp_path, capsys):
    """`project --to dst_metrics` writes the official JSON, a table and per-frame lines; incremental too."""
    good = {"Restaurants_9": DialogueState(active_intent="FindRestaurants", slot_values={"city": ["San Jose"]})}
    run = tmp_path / "run"
    write_events(run, _episode("e1", [good, good]) + _episode("e2", [None, None]), run_id="r", config={})
    assert main(["project", str(run), "--to", "dst_metrics", "--no-progress"]) == 0
    out = run / "projections" / "dst_metrics@v1"
    result = json.loads((out / "dst_metrics.json").read_text())
    assert result["#ALL_SERVICES"]["joint_goal_accuracy"] == 0.5
    assert result["#UNSEEN_SERVICES"] == result["#ALL_SERVICES"] == result["Restaurants"]
    lines = (out / "per_frame.jsonl").read_text().splitlines()
    assert [json.loads(line)["frame"] for line in lines] == ["e1-000-Restaurants_9", "e1-002-Restaurants_9"]
    assert "JGA" in (out / "dst_metrics.txt").read_text() and "JGA" in capsys.readouterr().out
    report = run_projection(run, get_projection("dst_metrics"))
    assert report.episodes_new == 0 and report.episodes_total == 2
    train = tmp_path / "train_schema.json"
    slots = [{**slot, "possible_values": ["cheap"] if slot["is_categorical"] else []} for slot in SERVICE["slots"]]
    train.write_text(json.dumps([{**SERVICE, "slots": slots, "intents": [
        {"name": "FindRestaurants", "is_transactional": False, "required_slots": [], "result_slots": []}]}]))
    assert main(["project", str(run), "--to", "dst_metrics", "--no-progress", "--train-schema", str(train)]) == 0
    result = json.loads((out / "dst_metrics.json").read_text())
    assert "#UNSEEN_SERVICES" not in result and result["#SEEN_SERVICES"]["joint_goal_accuracy"] == 0.5


def test_unknown_projection_is_a_user_error():
    """--to with an unknown name lists the known ones."""
    with pytest.raises(UserError, match="dst_metrics"):
        get_projection("nope")


def test_default_seen_services_are_the_real_train_split(shared_sgd):
    """The built-in seen set equals the service names of the real train schema."""
    from dialogsim.scenarios.sgd.dst_metrics import seen_services
    from dialogsim.scenarios.sgd.dst_metrics import SGD_TRAIN_SERVICES

    train = shared_sgd / "schemas" / "train" / "schema.json"
    assert seen_services(str(train)) == set(SGD_TRAIN_SERVICES) == seen_services(None)


def test_multiwoz_style_options():
    """Exact non-categorical matching, and joint accuracy multiplied over a turn's frames per group."""
    ref = {"active_intent": "X", "requested_slots": [], "slot_values": {"city": ["abc"]}}
    hyp = {"active_intent": "X", "requested_slots": [], "slot_values": {"city": ["abd"]}}
    assert frame_metrics(ref, hyp, SERVICE, fuzzy=False)["joint_goal_accuracy"] == 0.0
    assert frame_metrics(ref, hyp, SERVICE, fuzzy=True)["joint_goal_accuracy"] == 0.67
    turn = [("Restaurants_9", {"joint_goal_accuracy": 1.0, "active_intent_accuracy": 1.0}),
            ("Hotels_2", {"joint_goal_accuracy": 0.0, "active_intent_accuracy": 1.0})]
    per_frame, across = Aggregator(None), Aggregator(None, joint_across_turn=True)
    for agg in (per_frame, across):
        agg.add_turn(turn)
        agg.add_turn([("Restaurants_9", {"joint_goal_accuracy": 1.0, "active_intent_accuracy": 0.0})])
    assert per_frame.result()["#ALL_SERVICES"]["joint_goal_accuracy"] == pytest.approx(2 / 3)
    assert across.result()["#ALL_SERVICES"]["joint_goal_accuracy"] == 0.5  # turns: 1 * 0, then 1
    assert across.result()["Restaurants_9"]["joint_goal_accuracy"] == 1.0
    assert across.result()["#ALL_SERVICES"]["active_intent_accuracy"] == pytest.approx(2 / 3)  # per frame still
