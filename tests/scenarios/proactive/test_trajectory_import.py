"""``import trajectories`` -> events (branch structure in the log) -> ``project --to trajectories`` round trips."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from dialogsim.engine.cli import main
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import AgentTurn, EpisodeEnded, EpisodeRef, EpisodeStarted, UserTurn
from dialogsim.engine.log import read_episodes
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import projection as get_projection
from dialogsim.scenarios.proactive.importer import import_trajectories

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "trajectories"
SYNTHETIC = FIXTURES / "original_synthetic.jsonl"
MIXED = FIXTURES / "mbpp_mixed.jsonl"


def project(run: Path, name: str = "trajectories") -> Path:
    """Run a projection of ``run``; its output directory."""
    report = run_projection(run, get_projection(name))
    return Path(report.out_dir)


def round_trip(tmp_path: Path, text: str) -> str:
    """Import ``text`` as a trajectories file and project it back."""
    src = tmp_path / "in.jsonl"
    src.write_text(text, encoding="utf-8")
    import_trajectories(src, tmp_path / "run")
    return (project(tmp_path / "run") / "trajectories.jsonl").read_text(encoding="utf-8")


@pytest.mark.parametrize("fixture", [SYNTHETIC, MIXED], ids=lambda p: p.stem)
def test_round_trip_is_byte_exact(tmp_path, fixture):
    """project --to trajectories of an imported file equals the file."""
    assert round_trip(tmp_path, fixture.read_text(encoding="utf-8")) == fixture.read_text(encoding="utf-8")


def test_branch_structure_in_the_log(tmp_path):
    """Per state: a mainline episode, then two branches with parent=(mainline, 2) and branch=action."""
    counts = import_trajectories(SYNTHETIC, tmp_path / "run")
    assert (counts.records, counts.mainlines, counts.branches, counts.unlinked, counts.kept_as_is) == (9, 3, 6, 0, 0)
    episodes = list(read_episodes(tmp_path / "run"))
    assert [e[0].ep for e in episodes] == [f"e{i:06d}" for i in range(9)]
    first, low_mid, low_high = episodes[:3]
    assert [type(e) for e in first] == [EpisodeStarted, UserTurn, AgentTurn, UserTurn, EpisodeEnded]
    started, query, agent, reply, _ = first
    assert (started.parent, started.branch, started.scenario["kind"]) == (None, None, "proactive")
    assert started.scenario["data"]["id"] == "coding-0" and "layout" not in started.scenario
    assert query.utterance == "帮我写个 Python 爬虫"
    assert (agent.seq, agent.action, agent.action_by) == (2, "LOW", "persona")
    assert agent.prompt.startswith("You are an assistant. The user's coding request is sufficiently clear.")
    assert reply.utterance == "继续。" and reply.reaction["satisfaction"] == 0.6 and reply.end
    assert reply.persona["name"] == "Impatient-Novice"
    for branch, action in ((low_mid, "MID"), (low_high, "HIGH")):
        assert branch[0].parent == EpisodeRef("e000000", 2) and branch[0].branch == action
        assert branch[2].action == action and branch[2].action_by is msgspec.UNSET


def test_branch_events_carry_no_selection_source(tmp_path):
    """Only a mainline's agent turn says who chose its action; the encoded branch turn has no such key."""
    import_trajectories(SYNTHETIC, tmp_path / "run")
    lines = (tmp_path / "run" / "events" / "shard-000.jsonl").read_text(encoding="utf-8").splitlines()
    agent_turns = [json.loads(line) for line in lines if '"type":"agent_turn"' in line]
    assert ["action_by" in t for t in agent_turns] == [True, False, False] * 3
    assert all("persona" in json.loads(line) for line in lines if '"type":"user_turn"' in line
               and '"turn":2' in line)
    assert not any("persona" in json.loads(line) for line in lines if '"type":"user_turn"' in line
                   and '"turn":0' in line)


def records(path: Path) -> list[dict]:
    """The records of a fixture file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def dumps(rows: list[dict]) -> str:
    """Rows written as the original writes them."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def test_odd_records_come_back_unchanged(tmp_path):
    """Extra keys, another key order, values of other types and misplaced branches survive the round trip."""
    rows = records(SYNTHETIC)
    odd = [
        {**rows[0], "turn": 1, "task_completed": True},  # extra keys
        {k: rows[1][k] for k in reversed(list(rows[1]))},  # keys in another order
        {**rows[2], "decision_point": 1, "persona": None},  # values the events do not hold
        rows[5],  # a branch whose mainline is not before it (a HIGH of coding-1)
        rows[3],  # coding-1's mainline, then its branches in the wrong order
        rows[5], rows[4],
        {**rows[6], "mainline_action_selected_by": None, "is_mainline": 1},
        {**rows[7], "mainline_action": "MID"},  # a branch naming another mainline action
        {k: v for k, v in rows[8].items() if k not in ("action_prompt", "persona", "is_mainline")},
        {**rows[0], "user_reaction": {"meta": rows[0]["user_reaction"]["meta"], "user_reply": "x", "mood": 1}},
        {**rows[0], "state": {**rows[0]["state"], "id": 7, "score": 1e16, "neg": -0.0, "big": 123456789012345678901234567890}},
        {**rows[0], "assistant_msg": "line\u2028sep\x85 and \u00e9\U0001f600 \"quoted\" \\ tab\t"},
    ]
    text = dumps(odd)
    assert round_trip(tmp_path, text) == text


def test_linking_follows_the_generators_order(tmp_path):
    """Branches link to the mainline just before them only in LOW, MID, HIGH order and with its action."""
    rows = records(SYNTHETIC)
    src = tmp_path / "in.jsonl"
    src.write_text(dumps([rows[0], rows[2], rows[1], rows[3], rows[7]]), encoding="utf-8")
    counts = import_trajectories(src, tmp_path / "run")
    parents = [(e[0].parent, e[0].branch) for e in read_episodes(tmp_path / "run")]
    assert parents == [(None, None), (EpisodeRef("e000000", 2), "HIGH"), (None, "MID"), (None, None),
                       (None, "MID")]
    assert (counts.branches, counts.unlinked, counts.kept_as_is) == (1, 2, 2)


@pytest.mark.parametrize("line, problem", [
    ("not json", "line 2: not JSON"),
    ("[1, 2]", "line 2: not a JSON object"),
    ('{"state": {"id": "s"}, "action": "LOW", "assistant_msg": "", "user_reaction": {"meta": {}}}',
     "line 2: no state"),
    ('{"state": {"domain": "coding", "id": [1]}, "action": "LOW", "assistant_msg": "", '
     '"user_reaction": {"meta": {}}}', "line 2: the state's id"),
    ('{"state": {"domain": "coding"}, "action": 3, "assistant_msg": "", "user_reaction": {"meta": {}}}',
     "line 2: no action"),
    ('{"state": {"domain": "coding"}, "action": "LOW", "user_reaction": {"meta": {}}}', "line 2: no assistant_msg"),
    ('{"state": {"domain": "coding"}, "action": "LOW", "assistant_msg": "", "user_reaction": {}}',
     "line 2: no user_reaction with a meta"),
    ('{"state": {"domain": "coding", "x": NaN}, "action": "LOW", "assistant_msg": "", '
     '"user_reaction": {"meta": {}}}', "line 2: not JSON \\(NaN is not a JSON number\\)"),
    ('{"state": {"domain": "coding", "x": 1e400}, "action": "LOW", "assistant_msg": "", '
     '"user_reaction": {"meta": {}}}', "line 2: not JSON \\(1e400 is too large"),
    ('{"state": {"domain": "coding"}, "action": "LOW", "assistant_msg": "\\ud800", '
     '"user_reaction": {"meta": {}}}', "line 2: cannot be stored"),
])
def test_bad_lines_are_one_error_and_leave_nothing(tmp_path, line, problem):
    """A bad record names its line; the run directory is not left behind."""
    src = tmp_path / "in.jsonl"
    src.write_text(SYNTHETIC.read_text(encoding="utf-8").splitlines()[0] + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=problem):
        import_trajectories(src, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_empty_file_and_used_out_dir(tmp_path):
    """An empty file is an error; an out dir with something in it is refused and left alone."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(UserError, match="no trajectory records"):
        import_trajectories(empty, tmp_path / "run")
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep").write_text("x")
    with pytest.raises(UserError, match="not an empty directory"):
        import_trajectories(SYNTHETIC, used)
    assert (used / "keep").read_text() == "x"


def test_cli_import_and_project(tmp_path, capsys):
    """dialogsim import trajectories + project --to trajectories, and a bad file exits 2 with one line."""
    run = tmp_path / "run"
    assert main(["import", "trajectories", str(SYNTHETIC), "--out", str(run)]) == 0
    assert "imported 9 trajectories (3 mainlines, 6 branches" in capsys.readouterr().out
    assert main(["project", str(run), "--to", "trajectories", "--no-progress"]) == 0
    out = run / "projections" / "trajectories@v1" / "trajectories.jsonl"
    assert out.read_text(encoding="utf-8") == SYNTHETIC.read_text(encoding="utf-8")
    capsys.readouterr()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    assert main(["import", "trajectories", str(bad), "--out", str(tmp_path / "run2")]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "bad.jsonl: line 1: no state" in err
