"""rl_compat: the seed converter's four.json and feasible_action.json, exactly, from an imported TC-Bot file."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from dialogsim.engine.cli import main
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import projection as get_projection
from dialogsim.rl.compat import CompatConverter
from dialogsim.rl.tcbot import import_tcbot

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "rl_tuples"
SHARED = ROOT.parent / "shared" / "reference" / "rl_tuples"


@pytest.fixture
def shared_rl_tuples() -> Path:
    """../shared/reference/rl_tuples, or a skip when this checkout has none beside it."""
    if not (SHARED / "converted_sample.json").is_file():
        pytest.skip(f"the RL tuple reference samples are not at {SHARED} (only on the development machines)")
    return SHARED


def _project(tmp_path: Path, source: Path) -> Path:
    run, out = tmp_path / "run", tmp_path / "out"
    assert main(["import", "tcbot", str(source), "--out", str(run)]) == 0
    assert main(["project", str(run), "--to", "rl_compat", "--out", str(out), "--no-progress"]) == 0
    return out


def _act(speaker: str, diaact: str = "request", inform: dict | None = None, request: dict | None = None) -> dict:
    return {"diaact": diaact, "request_slots": request or {}, "inform_slots": inform or {}, "speaker": speaker}


def test_fixture_gives_the_converter_s_tuples_byte_for_byte(tmp_path):
    """Ten real episodes: four.json equals the converter's output for them, as JSON and as bytes."""
    out = _project(tmp_path, FIXTURES / "simulated_dialog_10.json")
    expected = gzip.decompress((FIXTURES / "four_10.json.gz").read_bytes())
    got = (out / "four.json").read_bytes()
    assert json.loads(got) == json.loads(expected)
    assert got == expected


@pytest.mark.slow
def test_full_sample_equals_the_converter_s_output(tmp_path, shared_rl_tuples):
    """All 100 sample episodes: 995 tuples, JSON-equal (and byte-equal) to converted_sample.json."""
    out = _project(tmp_path, shared_rl_tuples / "simulated_dialog_sample.json")
    reference = (shared_rl_tuples / "converted_sample.json").read_bytes()
    got = (out / "four.json").read_bytes()
    assert len(json.loads(got)) == 995
    assert json.loads(got) == json.loads(reference)
    assert got == reference


def test_feasible_actions_are_the_converter_s_format(tmp_path, shared_rl_tuples):
    """feasible_action.json: greeting and bye first, distinct PLACEHOLDER actions, laid out as the reference file."""
    out = _project(tmp_path, shared_rl_tuples / "simulated_dialog_sample.json")
    feasible = json.loads((out / "feasible_action.json").read_text(encoding="utf-8"))
    reference = json.loads((shared_rl_tuples / "feasible_action.json").read_text(encoding="utf-8"))
    assert list(feasible) == [str(i) for i in range(len(feasible))]
    assert list(feasible.values())[:2] == list(reference.values())[:2]
    actions = list(feasible.values())
    assert len({json.dumps(a, sort_keys=True) for a in actions}) == len(actions)
    # the reference was made from a larger file of the same simulator: every action here is one of its
    assert all(action in reference.values() for action in actions)
    text = (out / "feasible_action.json").read_text(encoding="utf-8")
    assert text == json.dumps(feasible, ensure_ascii=False)


def test_rewards_tuples_and_quirks_on_a_small_episode():
    """Running total -1 per act, terminal bonus into the second-to-last tuple, last tuple dropped."""
    converter = CompatConverter()
    acts = [_act("user", "inform", inform={"goal": "x"}), _act("agent", request={"a": "UNK"}),
            _act("user", "inform", inform={"a": "1"}), _act("agent", inform={"phone_number": "UNK"}, request={"b": "UNK"}),
            _act("user", "inform", inform={"b": "2"}), _act("agent", "bye"), _act("user", "bye")]
    tuples = converter.episode(acts)
    assert [i for i, _ in tuples] == [0, 1]
    (_, first), (_, second) = tuples
    assert first[1] == {"diaact": "request", "request_slots": {"a": "UNK"}, "inform_slots": {}}
    assert first[2] == -2 and first[4] is False
    # an agent inform of phone_number, even "UNK", counts as success: -7 + 2 * 7
    assert second[1]["inform_slots"] == {"phone_number": "PLACEHOLDER"} and second[2] == 7 and second[4] is True
    assert second[0] == first[3] and second[3]["turn"] == 5
    assert acts[3]["inform_slots"] == {"phone_number": "UNK"} and acts[3]["speaker"] == "agent"  # input untouched
    assert converter.feasible[2:] == [first[1], second[1]]  # the last act, bye, equals the built-in bye


def test_short_episodes_and_failure():
    """<= 2 acts: skipped, no feasible action; fewer than two agent acts: no tuple; failure is total - n."""
    converter = CompatConverter()
    assert converter.episode([_act("user", "inform"), _act("agent", "select")]) == []
    assert converter.episode([_act("user"), _act("agent"), _act("user")]) == []
    assert len(converter.feasible) == 3  # the second episode's agent act was seen, the first's was not
    tuples = converter.episode([_act("user"), _act("agent"), _act("user"), _act("agent"), _act("user")])
    assert [(i, t[2], t[4]) for i, t in tuples] == [(0, -5 - 5, True)]


def grow_run(tmp_path: Path, data: dict, split: int) -> Path:
    """A run imported from the first ``split`` episodes of ``data``, grown by a second shard holding the rest."""
    parts = []
    for name, chunk in (("first", dict(list(data.items())[:split])), ("rest", dict(list(data.items())[split:]))):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(chunk, ensure_ascii=False), encoding="utf-8")
        import_tcbot(path, tmp_path / name, run_id="grown")
        parts.append(tmp_path / name)
    return parts


def test_incremental_projection_equals_one_projection_of_the_whole(tmp_path):
    """Project, grow the log, project again (new episodes only): the files equal a projection of the whole."""
    data = json.loads((FIXTURES / "simulated_dialog_10.json").read_text(encoding="utf-8"))
    run, rest = grow_run(tmp_path, data, 4)
    out = tmp_path / "out"
    assert run_projection(run, get_projection("rl_compat"), out).episodes_new == 4
    manifest = json.loads((run / "manifest.json").read_text())
    shutil.copy(rest / "events" / "shard-000.jsonl", run / "events" / "shard-001.jsonl")
    manifest["shards"].append("events/shard-001.jsonl")
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert run_projection(run, get_projection("rl_compat"), out).episodes_new == 6
    whole = _project(tmp_path / "whole", FIXTURES / "simulated_dialog_10.json")
    for name in ("four.json", "feasible_action.json"):
        assert (out / name).read_bytes() == (whole / name).read_bytes()
