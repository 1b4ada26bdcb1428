"""The rl projection: transitions and feasible actions from simulated runs, SGD imports and TC-Bot imports."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dialogsim.engine.cli import main
from dialogsim.scenarios.sgd.import_command import import_sgd
from dialogsim.engine.errors import UserError
from dialogsim.engine.log import read_episodes
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import projection as get_projection
from dialogsim.rl.acts import episode_acts, placeholder_action
from dialogsim.rl.tracker import BYE, GREETING, StateTracker

ROOT = Path(__file__).resolve().parents[2]
SGD = ROOT / "tests" / "fixtures" / "sgd"
TCBOT = ROOT / "tests" / "fixtures" / "rl_tuples" / "simulated_dialog_10.json"
KEYS = ["episode", "index", "state", "action", "action_id", "reward", "next_state", "done", "outcome", "success"]


def _lines(out: Path) -> list[dict]:
    with open(out / "transitions.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _feasible(out: Path) -> dict:
    return json.loads((out / "feasible_actions.json").read_text(encoding="utf-8"))


def _project(run: Path, out: Path, *options: str) -> None:
    assert main(["project", str(run), "--to", "rl", "--out", str(out), "--no-progress", *options]) == 0


def check_transitions(run: Path, out: Path, per_turn: float = -1) -> list[dict]:
    """Every agent turn is one transition; states chain; ids and rewards agree with the episodes' acts."""
    lines = _lines(out)
    feasible = _feasible(out)
    assert list(feasible.values())[:2] == [GREETING, BYE]
    episodes = [episode_acts(events) for events in read_episodes(run)]
    expected = [(ep, act) for ep in episodes for act in ep.acts if act["speaker"] == "agent"]
    assert len(lines) == len(expected)
    for line, (ep, act) in zip(lines, expected):
        assert list(line) == KEYS and line["episode"] == ep.episode and line["outcome"] == ep.outcome
        assert line["action"] == {k: v for k, v in act.items() if k != "speaker"}
        assert feasible[str(line["action_id"])] == placeholder_action(act)
    by_episode: dict[str, list[dict]] = {}
    for line in lines:
        by_episode.setdefault(line["episode"], []).append(line)
    for ep in episodes:
        got = by_episode.get(ep.episode, [])
        assert [t["index"] for t in got] == list(range(len(got)))
        assert [t["done"] for t in got] == [False] * (len(got) - 1) + [True] * bool(got)
        for a, b in zip(got, got[1:]):
            assert a["next_state"] == b["state"] and a["reward"] == per_turn
        if got:
            tracker = StateTracker()
            for act in ep.acts:
                tracker.update(act)
            assert got[-1]["next_state"] == tracker.state()
    return lines


def test_simulated_sgd_run(tmp_path):
    """A simulated SGD run: one transition per agent turn, rewards from the outcome and the run's max_turns."""
    run, out = tmp_path / "run", tmp_path / "rl"
    assert main(["run", "--out", str(run), "--episodes", "12", "--max-turns", "40", "--no-progress"]) == 0
    _project(run, out)
    lines = check_transitions(run, out)
    last = [t for t in lines if t["done"]]
    assert len(last) == 12
    assert all(t["reward"] == (80 if t["outcome"] == "success" else -40) for t in last)
    assert all(t["success"] == (t["outcome"] == "success") for t in last)
    diaacts = {t["action"]["diaact"] for t in lines}
    assert {"request", "offer", "confirm_question", "notify_success", "bye"} <= diaacts
    first = lines[0]["state"]
    assert first["agent_action"] == GREETING and first["user_action"]["speaker"] == "user"
    assert "intent" in first["current_slots"]["inform_slots"]


def test_imported_sgd_corpus(tmp_path):
    """The SGD fixture import projects; without a recorded max_turns the default is 50."""
    run, out = tmp_path / "run", tmp_path / "rl"
    import_sgd(SGD, run)
    _project(run, out)
    lines = check_transitions(run, out)
    assert {t["reward"] for t in lines if t["done"]} == {100}


def test_imported_tcbot_file_and_the_document_s_rule(tmp_path):
    """A TC-Bot import with success_slot=phone_number: success read from the final inform_slots."""
    run, out = tmp_path / "run", tmp_path / "rl"
    assert main(["import", "tcbot", str(TCBOT), "--out", str(run)]) == 0
    _project(run, out, "--reward-opt", "success_slot=phone_number", "--reward-opt", "max_turns=episode",
             "--reward-opt", "per_turn=-2")
    lines = check_transitions(run, out, per_turn=-2)
    source = json.loads(TCBOT.read_text(encoding="utf-8"))
    for t in lines:
        if t["done"]:
            n = len(source[t["episode"]])
            assert t["success"] == ("phone_number" in t["next_state"]["current_slots"]["inform_slots"])
            assert t["reward"] == (2 * n if t["success"] else -n)
        else:
            assert t["reward"] == -2
    assert sum(t["success"] for t in lines if t["done"]) == 6


def test_reward_config_file_and_option_errors(tmp_path, capsys):
    """--reward-config sets the constants, --reward-opt overrides it; bad options are one-line errors."""
    run, out = tmp_path / "run", tmp_path / "rl"
    import_sgd(SGD, run)
    config = tmp_path / "reward.json"
    config.write_text(json.dumps({"success": 1.5, "failure": -3, "per_turn": 0}))
    _project(run, out, "--reward-config", str(config), "--reward-opt", "per_turn=-0.5")
    lines = _lines(out)
    assert {t["reward"] for t in lines} == {-0.5, 1.5}
    for options, message in ((["--reward-opt", "bonus=1"], "unknown reward option 'bonus'"),
                             (["--reward-opt", "success=lots"], "success must be a number"),
                             (["--reward-opt", "max_turns=0"], "max_turns must be >= 1"),
                             (["--reward-opt", "per_turn"], "expected KEY=VALUE"),
                             (["--reward-config", str(tmp_path / "none.json")], "no such reward config")):
        assert main(["project", str(run), "--to", "rl", "--out", str(out), "--no-progress", *options]) == 2
        assert message in capsys.readouterr().err
    assert main(["project", str(run), "--to", "sgd", "--reward-opt", "per_turn=1", "--no-progress"]) == 2
    assert "--to sgd: unrecognized arguments: --reward-opt" in capsys.readouterr().err


def test_changing_rewards_rerenders_without_refolding(tmp_path):
    """A second projection with other rewards folds nothing again and rewrites the rewards."""
    run, out = tmp_path / "run", tmp_path / "rl"
    import_sgd(SGD, run)
    first = run_projection(run, get_projection("rl"), out)
    assert first.episodes_new == first.episodes_total > 0
    again = run_projection(run, get_projection("rl", {"reward": {"success": "7"}}), out)
    assert again.episodes_new == 0 and not again.rebuilt
    assert {t["reward"] for t in _lines(out) if t["done"]} == {7}


def test_grown_log_projects_incrementally(tmp_path):
    """Project, grow the log by a second shard, project again: the same files as one projection of the whole."""
    data = json.loads((SGD / "dialogues_001.json").read_text())
    parts = []
    for name, chunk in (("a", data[:4]), ("b", data[4:])):
        split = tmp_path / f"split-{name}"
        split.mkdir()
        (split / "dialogues_001.json").write_text(json.dumps(chunk))
        shutil.copy(SGD / "schema.json", split / "schema.json")
        import_sgd(split, tmp_path / name, run_id="grown")
        parts.append(tmp_path / name)
    run, more = parts
    out = tmp_path / "out"
    run_projection(run, get_projection("rl"), out)
    manifest = json.loads((run / "manifest.json").read_text())
    shutil.copy(more / "events" / "shard-000.jsonl", run / "events" / "shard-001.jsonl")
    manifest["shards"].append("events/shard-001.jsonl")
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert run_projection(run, get_projection("rl"), out).episodes_new == len(data) - 4
    whole = tmp_path / "whole"
    import_sgd(SGD, whole)
    run_projection(whole, get_projection("rl"), tmp_path / "whole-rl")
    for name in ("transitions.jsonl", "feasible_actions.json"):
        assert (out / name).read_bytes() == (tmp_path / "whole-rl" / name).read_bytes()


def test_bad_reward_options_fail_before_any_work():
    """The projection checks its reward options when it is built."""
    with pytest.raises(UserError, match="unknown reward option"):
        get_projection("rl", {"reward": {"nope": 1}})
