"""The sgd projection and `import sgd`: round trips, incremental runs, live-agent episodes, bad input, SGD-X."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dialogsim.engine.cli import main
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import AgentTurn, EpisodeEnded, EpisodeStarted, Frame, ToolCalled, ToolReturned, UserTurn
from dialogsim.engine.log import read_episodes, write_events
from dialogsim.engine.projections import run_projection
from dialogsim.engine.registry import projection as get_projection
from dialogsim.scenarios.sgd.import_command import import_sgd
from dialogsim.testing import simulate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sgd"


def _dialogues(directory: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for path in sorted(directory.glob("dialogues_*.json")):
        for d in json.loads(path.read_text()):
            out[d["dialogue_id"]] = d
    return out


def test_fixture_import_then_project_gives_the_files_back(tmp_path):
    """CLI: import the fixture split, project it, get the same dialogues file and schema file bytes."""
    run, out = tmp_path / "run", tmp_path / "sgd"
    assert main(["import", "sgd", str(FIXTURES), "--out", str(run)]) == 0
    assert main(["project", str(run), "--to", "sgd", "--out", str(out), "--no-progress"]) == 0
    assert (out / "dialogues_001.json").read_bytes() == (FIXTURES / "dialogues_001.json").read_bytes()
    assert (out / "schema.json").read_bytes() == (FIXTURES / "schema.json").read_bytes()
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["dialogues_001.json", "schema.json"]


def test_default_output_dir_is_versioned_under_the_run(tmp_path):
    """Without --out the projection lands in RUN_DIR/projections/sgd@v1/."""
    run = tmp_path / "run"
    import_sgd(FIXTURES, run)
    assert main(["project", str(run), "--to", "sgd", "--no-progress"]) == 0
    assert (run / "projections" / "sgd@v1" / "dialogues_001.json").is_file()


@pytest.mark.slow
def test_every_real_dev_dialogue_round_trips(shared_sgd, tmp_path):
    """All 2,098 real dev dialogues: import then project gives dialogues equal to the originals."""
    run, out = tmp_path / "run", tmp_path / "sgd"
    stats = import_sgd(shared_sgd / "dev", run, schema=shared_sgd / "schemas" / "dev" / "schema.json")
    assert stats.dialogues == 2098 and stats.turns == 38768
    report = run_projection(run, get_projection("sgd"), out)
    assert report.episodes_total == 2098
    assert _dialogues(out) == _dialogues(shared_sgd / "dev")
    files = sorted(out.glob("dialogues_*.json"))
    assert len(files) == 17 and all(len(json.loads(f.read_text())) == 128 for f in files[:-1])
    original_schema = json.loads((shared_sgd / "schemas" / "dev" / "schema.json").read_text())
    assert json.loads((out / "schema.json").read_text()) == sorted(original_schema, key=lambda s: s["service_name"])


def _split(tmp_path: Path, dialogues: list, name: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "dialogues_001.json").write_text(json.dumps(dialogues))
    shutil.copy(FIXTURES / "schema.json", directory / "schema.json")
    return directory


class _Counting:
    """Wraps a projection and records which episodes it folded."""

    def __init__(self, inner):
        self.inner, self.folded = inner, []
        self.name, self.version = inner.name, inner.version

    def fold_options(self):
        return self.inner.fold_options()

    def fold(self, events):
        self.folded.append(events[0].ep)
        return self.inner.fold(events)

    def render(self, outputs):
        return self.inner.render(outputs)


def test_second_run_folds_only_new_episodes(tmp_path):
    """A grown log: the second projection run folds just the new episodes and outputs all of them."""
    data = json.loads((FIXTURES / "dialogues_001.json").read_text())
    run, out = tmp_path / "run", tmp_path / "out"
    import_sgd(_split(tmp_path, data[:4], "a"), run)
    first = _Counting(get_projection("sgd"))
    run_projection(run, first, out)
    assert len(first.folded) == 4
    # grow the log: append the remaining dialogues' episodes as a second shard
    more = tmp_path / "more"
    import_sgd(_split(tmp_path, data[4:], "b"), more)
    manifest = json.loads((run / "manifest.json").read_text())
    shutil.copy(more / "events" / "shard-000.jsonl", run / "events" / "shard-001.jsonl")
    manifest["shards"].append("events/shard-001.jsonl")
    (run / "manifest.json").write_text(json.dumps(manifest))
    second = _Counting(get_projection("sgd"))
    report = run_projection(run, second, out)
    assert second.folded == [d["dialogue_id"] for d in data[4:]]
    assert report.episodes_total == len(data) and report.episodes_new == 2
    assert [d["dialogue_id"] for d in json.loads((out / "dialogues_001.json").read_text())] == \
        [d["dialogue_id"] for d in data]
    third = _Counting(get_projection("sgd"))
    run_projection(run, third, out, rebuild=True)
    assert len(third.folded) == len(data)


def test_checkpoint_of_another_run_is_refused(tmp_path):
    """--out holding another run's projection is an error unless --rebuild."""
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    import_sgd(FIXTURES, a, run_id="one")
    import_sgd(FIXTURES, b, run_id="two")
    run_projection(a, get_projection("sgd"), out)
    with pytest.raises(UserError, match="another --out"):
        run_projection(b, get_projection("sgd"), out)
    run_projection(b, get_projection("sgd"), out, rebuild=True)


def test_live_engine_episodes_project_to_loadable_sgd(tmp_path):
    """Episodes of the real engine with agents that produce no acts still give SGD-shaped dialogues."""
    log = simulate(episodes=3)
    run = tmp_path / "run"
    write_events(run, log, run_id="test-run", config={})
    out = tmp_path / "out"
    run_projection(run, get_projection("sgd"), out)
    dialogues = json.loads((out / "dialogues_001.json").read_text())
    assert len(dialogues) == 3 and sum(1 for d in dialogues if d["services"]) == 2
    for d in dialogues:
        assert set(d) == {"dialogue_id", "services", "turns"}
        assert d["turns"][0]["speaker"] == "USER"
        for turn in d["turns"]:
            # a scenario without any service (small talk) has no frame to give
            assert bool(turn["frames"]) == bool(d["services"])
            for frame in turn["frames"]:
                assert {"actions", "service", "slots"} <= set(frame)
                assert ("state" in frame) == (turn["speaker"] == "USER")


def test_tool_calls_attach_to_the_system_frame(tmp_path):
    """ToolCalled/ToolReturned before an agent turn become service_call/service_results (frame created)."""
    env = dict(run="r", ep="e1", wall=0, t=0.0)
    events = [
        EpisodeStarted(**env, seq=0, scenario_id="s", seed=0,
                       scenario={"id": "s", "kind": "sgd", "data": {"services": ["Hotels_4"]}}),
        UserTurn(**env, seq=1, turn=0, utterance="find a hotel", frames=[Frame(service="Hotels_4")]),
        ToolCalled(**env, seq=2, call_id="c1", service="Hotels_4", method="SearchHotel",
                   parameters={"location": "Paris", "stars": 4}),
        ToolReturned(**env, seq=3, call_id="c1", results=[{"hotel_name": "Le H", "star_rating": 4}]),
        AgentTurn(**env, seq=4, turn=1, utterance="Le H is nice."),
        UserTurn(**env, seq=5, turn=2, utterance="and a table nearby?", frames=[Frame(service="Hotels_4")]),
        ToolCalled(**env, seq=6, call_id="c2", service="Restaurants_2", method="FindRestaurants",
                   parameters={"city": "Paris"}),
        ToolReturned(**env, seq=7, call_id="c2", error="backend down"),
        AgentTurn(**env, seq=8, turn=3, utterance="Sorry, no luck."),
        EpisodeEnded(**env, seq=9, outcome="success"),
    ]
    run = tmp_path / "run"
    write_events(run, events, run_id="r", config={})
    out = tmp_path / "out"
    run_projection(run, get_projection("sgd"), out)
    (d,) = json.loads((out / "dialogues_001.json").read_text())
    system = d["turns"][1]["frames"]
    assert system == [{"actions": [], "service": "Hotels_4",
                       "service_call": {"method": "SearchHotel", "parameters": {"location": "Paris", "stars": "4"}},
                       "service_results": [{"hotel_name": "Le H", "star_rating": "4"}], "slots": []}]
    assert d["turns"][0]["frames"][0]["state"] == {"active_intent": "NONE", "requested_slots": [], "slot_values": {}}
    # a call outside the scenario's services still lists its service; a failed call has no results
    assert d["services"] == ["Hotels_4", "Restaurants_2"]
    assert d["turns"][3]["frames"] == [{"actions": [], "service": "Restaurants_2",
                                        "service_call": {"method": "FindRestaurants", "parameters": {"city": "Paris"}},
                                        "service_results": [], "slots": []}]


def test_bad_dialogue_fails_cleanly_or_is_skipped(tmp_path, capsys):
    """An unknown service: exit 2 naming file, dialogue and turn, no run left; --skip-invalid imports the rest."""
    data = json.loads((FIXTURES / "dialogues_001.json").read_text())
    data[3]["turns"][2]["frames"][0]["service"] = "Spaceships_1"
    src = _split(tmp_path, data, "bad")
    run = tmp_path / "run"
    assert main(["import", "sgd", str(src), "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert "dialogues_001.json" in err and data[3]["dialogue_id"] in err and "turn 2" in err
    assert "Spaceships_1" in err and not run.exists()
    assert main(["import", "sgd", str(src), "--out", str(run), "--skip-invalid"]) == 0
    captured = capsys.readouterr()
    assert "skipped 1 invalid" in captured.err and f"imported {len(data) - 1} dialogues" in captured.out
    assert sum(1 for _ in read_episodes(run)) == len(data) - 1


def test_missing_schema_is_a_user_error(tmp_path):
    """A split without schema.json and no --schema is refused with the path."""
    src = tmp_path / "split"
    src.mkdir()
    shutil.copy(FIXTURES / "dialogues_001.json", src)
    with pytest.raises(UserError, match="schema.json"):
        import_sgd(src, tmp_path / "run")


def test_sgdx_on_projection_and_import_agree(tmp_path):
    """--sgdx v1 on the projection equals --sgdx v1 on import; schema.json holds the variant schemas."""
    sgdx = ["--sgdx", "v1", "--sgdx-dir", str(FIXTURES / "sgd_x"), "--sgdx-originals", str(FIXTURES / "originals")]
    plain, renamed = tmp_path / "plain", tmp_path / "renamed"
    assert main(["import", "sgd", str(FIXTURES), "--out", str(plain)]) == 0
    assert main(["import", "sgd", str(FIXTURES), "--out", str(renamed), *sgdx]) == 0
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["project", str(plain), "--to", "sgd", "--out", str(a), "--no-progress", *sgdx]) == 0
    assert main(["project", str(renamed), "--to", "sgd", "--out", str(b), "--no-progress"]) == 0
    assert (a / "dialogues_001.json").read_bytes() == (b / "dialogues_001.json").read_bytes()
    variant = json.loads((FIXTURES / "sgd_x" / "v1" / "dev" / "schema.json").read_text())
    assert json.loads((a / "schema.json").read_text()) == sorted(variant, key=lambda s: s["service_name"])
    services = {f["service"] for d in _dialogues(a).values() for t in d["turns"] for f in t["frames"]}
    assert services == {s["service_name"] for s in variant}
    # changing the option on the same output dir refolds instead of mixing names
    assert main(["project", str(plain), "--to", "sgd", "--out", str(a), "--no-progress"]) == 0
    assert (a / "dialogues_001.json").read_bytes() == (FIXTURES / "dialogues_001.json").read_bytes()


@pytest.mark.slow
def test_import_memory_does_not_grow_with_the_number_of_files(tmp_path):
    """Peak traced memory of an import of 16 files stays close to that of 4 files (one file at a time)."""
    import tracemalloc

    data = json.loads((FIXTURES / "dialogues_001.json").read_text())

    def split(name: str, files: int) -> Path:
        directory = tmp_path / name
        directory.mkdir()
        for n in range(files):
            copies = [{**d, "dialogue_id": f"{d['dialogue_id']}-{n}-{k}"} for k in range(4) for d in data]
            (directory / f"dialogues_{n + 1:03d}.json").write_text(json.dumps(copies))
        shutil.copy(FIXTURES / "schema.json", directory / "schema.json")
        return directory

    peaks = []
    for name, files in (("small", 4), ("large", 16)):
        src = split(name, files)
        tracemalloc.start()
        import_sgd(src, tmp_path / f"run-{name}")
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0]


def test_duplicate_dialogue_ids_are_refused(tmp_path):
    """Two dialogues with one id would be one episode: refused, or skipped with --skip-invalid."""
    data = json.loads((FIXTURES / "dialogues_001.json").read_text())
    src = _split(tmp_path, data + data[:1], "dup")
    with pytest.raises(UserError, match="duplicate dialogue id"):
        import_sgd(src, tmp_path / "run")
    stats = import_sgd(src, tmp_path / "run2", skip_invalid=True)
    assert stats.dialogues == len(data) and len(stats.skipped) == 1


@pytest.mark.slow
def test_real_dev_split_imports_as_an_sgdx_variant(shared_sgd, tmp_path):
    """import --sgdx v3 of the real dev split: every frame service is a v3 name; values untouched."""
    from dialogsim.scenarios.sgd.sgdx import load_sgdx

    mapping = load_sgdx("v3", shared_sgd / "sgd_x")
    run, out = tmp_path / "run", tmp_path / "out"
    import_sgd(shared_sgd / "dev", run, schema=shared_sgd / "schemas" / "dev" / "schema.json", sgdx=mapping)
    run_projection(run, get_projection("sgd"), out)
    got = _dialogues(out)
    original = _dialogues(shared_sgd / "dev")
    assert got.keys() == original.keys()
    variant_services = {s["service_name"] for s in json.loads((out / "schema.json").read_text())}
    for dialogue_id, d in got.items():
        o = original[dialogue_id]
        assert d["services"] == [mapping.service(s) for s in o["services"]]
        assert set(d["services"]) <= variant_services
        for t, to in zip(d["turns"], o["turns"]):
            assert t["utterance"] == to["utterance"]
            for f, fo in zip(t["frames"], to["frames"]):
                if "state" in f:
                    assert sorted(map(sorted, f["state"]["slot_values"].values())) == \
                        sorted(map(sorted, fo["state"]["slot_values"].values()))


def test_import_into_a_non_empty_directory_leaves_it_alone(tmp_path):
    """An existing run directory as --out is refused and kept intact."""
    run = tmp_path / "run"
    import_sgd(FIXTURES, run)
    before = sorted(p.name for p in run.rglob("*"))
    with pytest.raises(UserError, match="not an empty directory"):
        import_sgd(FIXTURES, run)
    assert sorted(p.name for p in run.rglob("*")) == before


@pytest.mark.slow
def test_simulated_sgd_run_projects_to_valid_sgd_and_round_trips(tmp_path):
    """A default simulated run (SGD pack, agenda user, schema agent): valid SGD out, import gives it back."""
    from dialogsim.scenarios.sgd.schema import load_schemas
    from dialogsim.scenarios.sgd.corpus import dialogue_files, read_dialogue_file, validate_dialogue

    run, out = tmp_path / "run", tmp_path / "sgd"
    assert main(["run", "--out", str(run), "--episodes", "40", "--no-progress"]) == 0
    assert main(["project", str(run), "--to", "sgd", "--out", str(out), "--no-progress"]) == 0
    schemas = {s["service_name"]: s for s in load_schemas(out / "schema.json")}
    dialogues = [d for path in dialogue_files(out) for d in read_dialogue_file(path)]
    assert len(dialogues) == 40
    assert all(validate_dialogue(d, schemas) is None for d in dialogues)
    assert any(f.service_call for d in dialogues for t in d.turns for f in t.frames)
    again = tmp_path / "again"
    import_sgd(out, tmp_path / "imported")
    run_projection(tmp_path / "imported", get_projection("sgd"), again)
    assert (again / "dialogues_001.json").read_bytes() == (out / "dialogues_001.json").read_bytes()
    assert main(["project", str(run), "--to", "dst_metrics", "--no-progress"]) == 0
    result = json.loads((run / "projections" / "dst_metrics@v1" / "dst_metrics.json").read_text())
    assert 0.5 < result["#ALL_SERVICES"]["joint_goal_accuracy"] <= 1.0


def test_concurrent_projection_runs_on_one_output_are_refused(tmp_path):
    """While one run holds the output's lock, another is refused with a clear message."""
    import fcntl

    run, out = tmp_path / "run", tmp_path / "out"
    import_sgd(FIXTURES, run)
    run_projection(run, get_projection("sgd"), out)
    with open(out / ".checkpoint" / "lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UserError, match="another projection run"):
            run_projection(run, get_projection("sgd"), out)
    run_projection(run, get_projection("sgd"), out)


def test_foreign_output_directory_is_refused(tmp_path):
    """--out naming a non-empty directory that is not a projection output is refused, untouched."""
    run, out = tmp_path / "run", tmp_path / "out"
    import_sgd(FIXTURES, run)
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not a projection output"):
        run_projection(run, get_projection("sgd"), out)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_import_is_deterministic(tmp_path):
    """The same split imported twice gives the same event bytes (virtual time = turn index, wall = 0)."""
    import_sgd(FIXTURES, tmp_path / "a")
    import_sgd(FIXTURES, tmp_path / "b")
    shard = Path("events") / "shard-000.jsonl"
    assert (tmp_path / "a" / shard).read_bytes() == (tmp_path / "b" / shard).read_bytes()


def test_checkpoint_damage_is_recovered(tmp_path):
    """A deleted outputs file refolds everything; a corrupt meta asks for --rebuild, which then works."""
    run, out = tmp_path / "run", tmp_path / "out"
    import_sgd(FIXTURES, run)
    run_projection(run, get_projection("sgd"), out)
    expected = (out / "dialogues_001.json").read_bytes()
    (out / ".checkpoint" / "outputs.jsonl").unlink()
    report = run_projection(run, get_projection("sgd"), out)
    assert report.episodes_new == 6 and (out / "dialogues_001.json").read_bytes() == expected
    (out / ".checkpoint" / "meta.json").write_text("{broken")
    with pytest.raises(UserError, match="--rebuild"):
        run_projection(run, get_projection("sgd"), out)
    assert run_projection(run, get_projection("sgd"), out, rebuild=True).episodes_new == 6
    assert (out / "dialogues_001.json").read_bytes() == expected


def test_a_grown_log_is_read_on_from_the_recorded_offsets(tmp_path):
    """The second projection of a grown log reads from the first event of the episode still open last time,
    the third only the bytes appended since; the output equals a projection of the whole log in one pass."""
    full = tmp_path / "full"
    import_sgd(FIXTURES, full)
    lines: dict[str, list[bytes]] = {}
    for line in (full / "events" / "shard-000.jsonl").read_bytes().splitlines(keepends=True):
        lines.setdefault(json.loads(line)["ep"], []).append(line)
    a, b, c, d, e, f = lines.values()
    run = tmp_path / "run"
    shutil.copytree(full, run)
    shard = run / "events" / "shard-000.jsonl"
    half = len(c) // 2
    # pass 1: c has started but not ended, and b ends after c's first event
    shard.write_bytes(b"".join(a + c[:half] + b))
    c_at = len(b"".join(a))
    first = run_projection(run, get_projection("sgd"), tmp_path / "out")
    assert first.episodes_new == 2 and first.bytes_read == shard.stat().st_size
    # pass 2: c ends and d follows; reading starts at c's first event, so c is folded whole
    with open(shard, "ab") as sink:
        sink.write(b"".join(c[half:] + d))
    second = run_projection(run, get_projection("sgd"), tmp_path / "out")
    assert second.episodes_new == 2 and second.bytes_read == shard.stat().st_size - c_at
    # pass 3: nothing is open any more, so only the appended bytes are read
    size = shard.stat().st_size
    with open(shard, "ab") as sink:
        sink.write(b"".join(e + f))
    third = run_projection(run, get_projection("sgd"), tmp_path / "out")
    assert third.episodes_new == 2 and third.bytes_read == shard.stat().st_size - size
    assert run_projection(run, get_projection("sgd"), tmp_path / "out").bytes_read == 0
    whole = run_projection(full, get_projection("sgd"), tmp_path / "whole")
    for name in whole.files:
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


def test_a_checkpoint_behind_its_outputs_reads_the_log_from_the_start(tmp_path):
    """When outputs.jsonl holds more episodes than meta.json counts (a crash between the two), offsets are not trusted."""
    run = tmp_path / "run"
    import_sgd(FIXTURES, run)
    out = tmp_path / "out"
    run_projection(run, get_projection("sgd"), out)
    meta_path = out / ".checkpoint" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta.update(episodes=meta["episodes"] - 1, log={})
    meta_path.write_text(json.dumps(meta))
    report = run_projection(run, get_projection("sgd"), out)
    assert report.bytes_read == (run / "events" / "shard-000.jsonl").stat().st_size and report.episodes_new == 0
