"""`dialogsim import tcbot`: episodes and acts into a run verbatim, and one-line refusals of malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dialogsim.engine.cli import main
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import AgentTurn, EpisodeEnded, EpisodeStarted, UserTurn
from dialogsim.engine.log import RunDir, read_episodes
from dialogsim.rl.tcbot import import_tcbot, read_tcbot_file

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "rl_tuples" / "simulated_dialog_10.json"


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "dialogs.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _act(speaker: str, diaact: str = "inform", **extra: object) -> dict:
    return {"diaact": diaact, "request_slots": {}, "inform_slots": {}, "speaker": speaker, **extra}


def test_import_keeps_every_act_verbatim(tmp_path):
    """One episode per id in file order; turn i holds act i as it was, speaker deciding the event type."""
    run = tmp_path / "run"
    assert main(["import", "tcbot", str(FIXTURE), "--out", str(run)]) == 0
    source = json.loads(FIXTURE.read_text(encoding="utf-8"))
    episodes = list(read_episodes(run))
    assert [events[0].ep for events in episodes] == list(source)
    for events in episodes:
        acts = source[events[0].ep]
        assert isinstance(events[0], EpisodeStarted) and events[0].scenario["kind"] == "tcbot_dialogue"
        turns = events[1:-1]
        assert [t.raw_act for t in turns] == acts
        assert [list(t.raw_act) for t in turns] == [list(a) for a in acts]  # key order too
        assert all(isinstance(t, UserTurn if a["speaker"] == "user" else AgentTurn) for t, a in zip(turns, acts))
        assert isinstance(events[-1], EpisodeEnded) and events[-1].reason == "imported"
        assert events[-1].turns == len(acts)
    manifest = RunDir.open(run).manifest
    assert manifest["run_id"] == "tcbot-simulated_dialog_10" and manifest["status"] == "completed"
    assert manifest["config"]["command"] == "import tcbot"


def test_events_shows_the_recorded_act(tmp_path, capsys):
    """`dialogsim events` prints an imported turn's act as recorded."""
    path = _write(tmp_path, {"a": [_act("user", inform_slots={"x": "1"}), _act("agent", "bye")]})
    import_tcbot(path, tmp_path / "run")
    capsys.readouterr()
    assert main(["events", str(tmp_path / "run"), "--episode", "a"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert '"inform_slots": {"x": "1"}' in lines[1] and '"diaact": "bye"' in lines[2]


def test_extra_keys_and_natural_language_are_kept(tmp_path):
    """Keys beyond the four are kept; an act's "nl" text becomes the turn's utterance."""
    path = _write(tmp_path, {"a": [_act("user", nl="hello", extra=[1]), _act("agent")]})
    import_tcbot(path, tmp_path / "run")
    [events] = list(read_episodes(tmp_path / "run"))
    assert events[1].utterance == "hello" and events[1].raw_act["extra"] == [1]
    assert events[2].utterance == ""


@pytest.mark.parametrize("data, message", [
    ([], "expected a JSON object {episode_id: [act, ...]}, got a list"),
    ({"7": {}}, "episode '7': expected a list of acts, got an object"),
    ({"": []}, 'episode "": an episode id must not be empty'),
    ({"1": [_act("user")], "2": [_act("user"), "x"]}, "episode '2', act 1: expected an act object, got a string"),
    ({"1": [{"diaact": "inform", "request_slots": {}, "speaker": "user"}]}, "episode '1', act 0: missing 'inform_slots'"),
    ({"1": [_act("user", diaact=3)]}, "episode '1', act 0: 'diaact' must be a string, got a number"),
    ({"1": [{**_act("user"), "request_slots": ["a"]}]}, "episode '1', act 0: 'request_slots' must be an object"),
    ({"1": [_act("system")]}, "episode '1', act 0: 'speaker' must be 'user' or 'agent', got \"system\""),
])
def test_malformed_files_are_refused_with_one_line(tmp_path, capsys, data, message):
    """A bad file: exit 2, one line naming the file, episode and act, and no run directory left behind."""
    path = _write(tmp_path, data)
    with pytest.raises(UserError, match=None) as err:
        read_tcbot_file(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert main(["import", "tcbot", str(path), "--out", str(tmp_path / "run")]) == 2
    err_text = capsys.readouterr().err
    assert err_text.count("\n") == 1 and message in err_text
    assert not (tmp_path / "run").exists()


def test_not_json_missing_file_and_used_out_dir(tmp_path, capsys):
    """Broken JSON, a missing file and a non-empty --out are refused, each in one line."""
    broken = tmp_path / "broken.json"
    broken.write_text('{"1": [')
    assert main(["import", "tcbot", str(broken), "--out", str(tmp_path / "r1")]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main(["import", "tcbot", str(tmp_path / "nope.json"), "--out", str(tmp_path / "r2")]) == 2
    assert "no such file" in capsys.readouterr().err
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    assert main(["import", "tcbot", str(FIXTURE), "--out", str(used)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert (used / "keep.txt").read_text() == "mine"
