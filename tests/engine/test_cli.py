"""The command line as a user meets it: runs, bad input, kill -9 and resume, Ctrl-C, reading events."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from dialogsim.engine.events import EpisodeEnded
from dialogsim.engine.log import read_events

CLI = [sys.executable, "-m", "dialogsim.engine.cli"]


def dialogsim(*args: str, check: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the CLI in a subprocess and capture its output."""
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"dialogsim {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def assert_exactly_once(run_dir: Path, episodes: int) -> None:
    """Every episode of the run ended exactly once, and each episode's seq is gapless."""
    ended = Counter()
    seqs: dict[str, list[int]] = {}
    for event in read_events(run_dir):
        if event.ep:
            seqs.setdefault(event.ep, []).append(event.seq)
        if isinstance(event, EpisodeEnded):
            ended[event.ep] += 1
    assert sorted(ended) == [f"e{i:06d}" for i in range(episodes)]
    assert set(ended.values()) == {1}
    assert all(s == list(range(len(s))) for s in seqs.values())


@pytest.mark.slow
def test_run_and_read_events(tmp_path):
    """A small run completes, and `events` shows it as text and as JSON lines."""
    out = tmp_path / "demo"
    proc = dialogsim("run", "--scenarios", "builtin", "--episodes", "6", "--out", str(out), check=True)
    assert "completed: 6 episodes" in proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["counts"]["episodes"] == 6
    text = dialogsim("events", str(out), "--episode", "e000001", check=True).stdout
    assert "Find me a Thai place" in text and "episode_ended" in text
    lines = dialogsim("events", str(out), "--type", "episode_ended", "--json", check=True).stdout.splitlines()
    assert [json.loads(x)["outcome"] for x in lines] == ["success"] * 6


@pytest.mark.parametrize("args, message", [
    (["run", "--scenarios", "nope", "--out", "{tmp}/a"], "unknown scenario set 'nope'"),
    (["run", "--scenarios", "builtin", "--user", "nobody", "--out", "{tmp}/a"], "unknown user 'nobody'"),
    (["run", "--scenarios", "builtin", "--agent", "ghost:x", "--out", "{tmp}/a"], "unknown agent 'ghost'"),
    (["run", "--scenarios", "builtin", "--out", "{tmp}/full"], "not empty"),
    (["run", "--scenarios", "builtin", "--seed", "-3", "--out", "{tmp}/a"], "bad seed"),
    (["run", "--scenarios", "builtin", "--seed", "abc", "--out", "{tmp}/a"], "bad seed"),
    (["run", "--scenarios", "builtin", "--think", "gauss:1", "--out", "{tmp}/a"], "bad --think"),
    (["run", "--resume", "{tmp}/full"], "not a dialogsim run"),
    (["events", "{tmp}/foreign"], "not a dialogsim run manifest"),
    (["events", "{tmp}/missing"], "no such run directory"),
])
@pytest.mark.slow
def test_bad_input_is_one_clear_line(tmp_path, args, message):
    """Bad input gives one line naming the problem, a non-zero exit, no traceback, nothing overwritten."""
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "precious.txt").write_text("keep me")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "manifest.json").write_text('{"format": "other-tool"}')
    proc = dialogsim(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (tmp_path / "full" / "precious.txt").read_text() == "keep me"
    assert not (tmp_path / "a").exists()


@pytest.mark.slow
def test_corrupt_log_is_reported_with_file_and_line(tmp_path):
    """A corrupt line in a shard is named by file and line; --skip-corrupt reads on and counts it."""
    out = tmp_path / "run"
    dialogsim("run", "--scenarios", "builtin", "--episodes", "2", "--out", str(out), check=True)
    shard = out / "events" / "shard-000.jsonl"
    lines = shard.read_bytes().split(b"\n")
    lines[3] = b"garbage"
    shard.write_bytes(b"\n".join(lines))
    proc = dialogsim("events", str(out))
    assert proc.returncode == 2 and "shard-000.jsonl: line 4: corrupt event" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = dialogsim("events", str(out), "--skip-corrupt")
    assert proc.returncode == 0 and "skipped 1 corrupt line" in proc.stderr


def _start_and_kill(out: Path, episodes: int, sig: int, min_bytes: int = 200_000) -> subprocess.Popen:
    proc = subprocess.Popen([*CLI, "run", "--scenarios", "builtin", "--episodes", str(episodes), "--durability",
                             "none", "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shard = out / "events" / "shard-000.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if shard.exists() and shard.stat().st_size > min_bytes:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    proc.send_signal(sig)
    proc.wait(timeout=60)
    return proc


@pytest.mark.slow
def test_sigkill_mid_batch_then_resume_is_exactly_once(tmp_path):
    """A run killed with SIGKILL mid-batch, then resumed, ends every episode exactly once."""
    out = tmp_path / "run"
    episodes = 30_000
    _start_and_kill(out, episodes, signal.SIGKILL)
    ended_before = sum(1 for _ in read_events(out, types={"episode_ended"}))
    assert 0 < ended_before < episodes
    proc = dialogsim("run", "--resume", str(out), "--no-progress", check=True, timeout=300)
    assert f"completed: {episodes} episodes" in proc.stdout
    assert_exactly_once(out, episodes)
    assert json.loads((out / "manifest.json").read_text())["status"] == "completed"


@pytest.mark.slow
def test_ctrl_c_marks_the_run_interrupted_and_resume_finishes_it(tmp_path):
    """SIGINT flushes, marks the run interrupted in the manifest, exits non-zero; resume completes it."""
    out = tmp_path / "run"
    episodes = 30_000
    proc = _start_and_kill(out, episodes, signal.SIGINT)
    assert proc.returncode == 130
    assert "Traceback" not in proc.stderr
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    assert out.joinpath("events", "shard-000.jsonl").read_bytes().endswith(b"\n")
    dialogsim("run", "--resume", str(out), "--no-progress", check=True, timeout=300)
    assert_exactly_once(out, episodes)


@pytest.mark.slow
def test_resume_of_a_completed_run_changes_nothing(tmp_path):
    """Resuming a finished run runs no episode again."""
    out = tmp_path / "run"
    dialogsim("run", "--scenarios", "builtin", "--episodes", "4", "--out", str(out), check=True)
    proc = dialogsim("run", "--resume", str(out), check=True)
    assert "completed: 4 episodes" in proc.stdout
    assert_exactly_once(out, 4)


@pytest.mark.slow
def test_ctrl_c_stops_a_run_waiting_on_an_agent_that_never_answers(tmp_path):
    """SIGINT while every episode waits on a hung live agent still ends the run at once, marked interrupted."""
    import socket

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)  # accepts connections and never answers
    out = tmp_path / "run"
    try:
        proc = subprocess.Popen([*CLI, "run", "--scenarios", "builtin", "--agent",
                                 f"http:http://127.0.0.1:{hung.getsockname()[1]}/", "--episodes", "3",
                                 "--no-progress", "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not (out / "events" / "shard-000.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=10)
    finally:
        hung.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"


@pytest.mark.parametrize("url", ["http://user:SECRETPW@127.0.0.1:9/", "http://127.0.0.1:9/?api_key=SECRETQ",
                                 "https://127.0.0.1:9/v1?access_token=SECRETQ"])
@pytest.mark.slow
def test_agent_urls_with_credentials_are_refused_before_anything_is_written(tmp_path, url):
    """A credential in an agent URL would be recorded in the manifest and every episode: refused, nothing created."""
    out = tmp_path / "run"
    proc = dialogsim("run", "--scenarios", "builtin", "--agent", f"http:{url}", "--out", str(out))
    assert proc.returncode == 2 and "credential" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "SECRET" not in proc.stderr
    assert not out.exists()


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI in this process; return its exit status, stdout and stderr."""
    from dialogsim.engine.cli import main
    try:
        status = main([str(a) for a in args])
    except SystemExit as exc:  # argparse
        status = exc.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_line_error(status: int, err: str, *fragments: str) -> None:
    """Exit status 2 and exactly one stderr line holding every fragment, no traceback."""
    assert status == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A completed four-episode builtin run, to copy and break."""
    out = tmp_path_factory.mktemp("small") / "run"
    dialogsim("run", "--scenarios", "builtin", "--episodes", "4", "--out", str(out), "--no-progress", check=True)
    return out


def _edit_manifest(run: Path, **changes) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(changes)
    (run / "manifest.json").write_text(json.dumps(manifest))


def _shard_is_directory(run: Path) -> None:
    shard = run / "events" / "shard-000.jsonl"
    shard.unlink()
    shard.mkdir()


BROKEN_RUNS = {
    "shard is a directory": (_shard_is_directory, ["shard-000.jsonl", "not a regular file"]),
    "shard missing": (lambda r: (r / "events" / "shard-000.jsonl").unlink(), ["shard-000.jsonl", "missing"]),
    "shards a string": (lambda r: _edit_manifest(r, shards="events/shard-000.jsonl"), ["manifest.json", "'shards'"]),
    "shards of numbers": (lambda r: _edit_manifest(r, shards=[1]), ["manifest.json", "'shards'"]),
    "shard outside the run": (lambda r: _edit_manifest(r, shards=["/etc/passwd"]), ["manifest.json", "'shards'"]),
    "format_version a string": (lambda r: _edit_manifest(r, format_version="1"), ["manifest.json", "format_version"]),
    "format_version unknown": (lambda r: _edit_manifest(r, format_version=0), ["manifest.json", "format_version"]),
    "format_version newer": (lambda r: _edit_manifest(r, format_version=7), ["manifest.json", "newer"]),
    "manifest not JSON": (lambda r: (r / "manifest.json").write_text("{nope"), ["manifest.json", "not JSON"]),
    "manifest a list": (lambda r: (r / "manifest.json").write_text("[1]"), ["manifest.json", "not a JSON object"]),
}


@pytest.mark.parametrize("command", [["events"], ["project", "--to", "sgd", "--no-progress"], ["stats"],
                                     ["run", "--no-progress", "--resume"]], ids=lambda c: c[0])
@pytest.mark.parametrize("breakage", BROKEN_RUNS)
@pytest.mark.slow
def test_broken_run_directories_are_one_clear_line(tmp_path, capsys, small_run, command, breakage):
    """Every way a run directory can be broken gives one line naming the file and the problem, exit 2."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    breaker, fragments = BROKEN_RUNS[breakage]
    breaker(run)
    status, _, err = cli(capsys, *command, run)
    assert_one_line_error(status, err, *fragments)


def test_an_unreadable_shard_is_one_clear_line(tmp_path, capsys, small_run, monkeypatch):
    """A shard that cannot be opened (permissions) is named with the reason, for readers and for --resume."""
    import builtins
    import shutil
    from dialogsim.engine import log
    run = tmp_path / "run"
    shutil.copytree(small_run, run)

    def denied(path, *args, **kwargs):
        if str(path).endswith(".jsonl"):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(log, "open", denied, raising=False)  # root ignores chmod, so deny at the open call
    for args in (["events", run], ["stats", run], ["project", run, "--to", "sgd", "--no-progress"],
                 ["run", "--resume", run, "--no-progress"]):
        status, _, err = cli(capsys, *args)
        assert_one_line_error(status, err, "shard-000.jsonl", "Permission denied")


def test_project_out_that_is_a_file_is_refused(tmp_path, capsys, small_run):
    """project --out naming an existing regular file is refused, and the file is left alone."""
    target = tmp_path / "afile"
    target.write_text("keep me")
    status, _, err = cli(capsys, "project", small_run, "--to", "sgd", "--out", target, "--no-progress")
    assert_one_line_error(status, err, "afile", "not a directory")
    assert target.read_text() == "keep me"


def test_events_refuses_an_unknown_type_or_episode(capsys, small_run):
    """--type outside the catalogue lists the known types; --episode not in the run is named; both exit 2."""
    status, out, err = cli(capsys, "events", small_run, "--type", "bogus")
    assert_one_line_error(status, err, "--type bogus", "user_turn", "episode_ended")
    assert out == ""
    status, out, err = cli(capsys, "events", small_run, "--episode", "nope", "--type", "episode_ended")
    assert_one_line_error(status, err, "--episode nope", "no such episode")
    status, out, err = cli(capsys, "events", small_run, "--episode", "e000001", "--type", "episode_ended")
    assert status == 0 and out.count("\n") == 1 and err == ""


SGD_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sgd"


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and ".checkpoint" not in p.parts}


def assert_interrupted(status: int, err: str) -> None:
    """Exit status 130, no traceback, and the interruption said once, last (operational log lines may precede it)."""
    assert status == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "dialogsim: interrupted" and err.count("interrupted") == 1, err


@pytest.fixture
def imported(tmp_path, capsys) -> Path:
    """The SGD fixture split imported and projected to sgd once."""
    run = tmp_path / "imported"
    assert cli(capsys, "import", "sgd", SGD_FIXTURES, "--out", run)[0] == 0
    assert cli(capsys, "project", run, "--to", "sgd", "--no-progress")[0] == 0
    return run


@pytest.mark.parametrize("where", ["fold", "render"])
@pytest.mark.slow
def test_ctrl_c_during_project_leaves_the_previous_output_whole(capsys, imported, monkeypatch, where):
    """Ctrl-C while folding or after the first rendered file: exit 130, one line, old files intact, no temp files."""
    from dialogsim.scenarios.sgd.projection import SgdProjection
    out = imported / "projections" / "sgd@v1"
    before = _snapshot(out)
    if where == "fold":
        monkeypatch.setattr(SgdProjection, "fold", _interrupt)
    else:
        render = SgdProjection.render

        def first_file_then_interrupt(self, outputs):
            name, _ = next(render(self, outputs))
            yield name, b"changed"
            raise KeyboardInterrupt
        monkeypatch.setattr(SgdProjection, "render", first_file_then_interrupt)
    status, _, err = cli(capsys, "project", imported, "--to", "sgd", "--rebuild", "--no-progress")
    assert_interrupted(status, err)
    assert _snapshot(out) == before
    monkeypatch.undo()
    assert cli(capsys, "project", imported, "--to", "sgd", "--no-progress")[0] == 0
    assert _snapshot(out) == before


def test_ctrl_c_during_import_leaves_nothing(tmp_path, capsys, monkeypatch):
    """Ctrl-C in the middle of an import removes the half-written run directory."""
    from dialogsim.scenarios.sgd import corpus as sgd_corpus
    convert = sgd_corpus.dialogue_to_events
    calls = []

    def second_dialogue_interrupts(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return convert(*args)
    monkeypatch.setattr(sgd_corpus, "dialogue_to_events", second_dialogue_interrupts)
    status, _, err = cli(capsys, "import", "sgd", SGD_FIXTURES, "--out", tmp_path / "run")
    assert_interrupted(status, err)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command, target", [("events", "dialogsim.engine.commands.events.describe"),
                                             ("stats", "dialogsim.engine.commands.stats.from_episode")])
def test_ctrl_c_while_reading_a_run(capsys, small_run, monkeypatch, command, target):
    """Ctrl-C while events or stats reads the log: exit 130, one line."""
    monkeypatch.setattr(target, _interrupt)
    assert_interrupted(*cli(capsys, command, small_run)[::2])


def test_ctrl_c_during_eval_dst_writes_no_output(tmp_path, capsys, monkeypatch):
    """Ctrl-C between eval-dst's two output files leaves neither file and no temporary file."""
    pred = tmp_path / "pred"
    pred.mkdir()
    (pred / "dialogues_001.json").write_bytes((SGD_FIXTURES / "dialogues_001.json").read_bytes())
    write_bytes = Path.write_bytes
    calls = []

    def second_write_interrupts(self, data):
        calls.append(self)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return write_bytes(self, data)
    monkeypatch.setattr(Path, "write_bytes", second_write_interrupts)
    status, _, err = cli(capsys, "eval-dst", "--ref", SGD_FIXTURES, "--pred", pred, "--out", tmp_path / "m.json",
                         "--per-frame", tmp_path / "frames.jsonl")
    assert_interrupted(status, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred"]


def test_ctrl_c_during_pack_build_keeps_the_old_pack(tmp_path, capsys, monkeypatch):
    """Ctrl-C while a pack is written leaves the previous pack as it was and no temporary directory."""
    small = SGD_FIXTURES.parent / "sgd_small"
    args = ["pack", "build", "--sgd", small, "--schemas", small / "schema.json", "--out", tmp_path / "pack",
            "--no-progress"]
    assert cli(capsys, *args)[0] == 0
    before = _snapshot(tmp_path / "pack")
    monkeypatch.setattr(Path, "write_text", _interrupt)
    assert_interrupted(*cli(capsys, *args)[::2])
    assert _snapshot(tmp_path / "pack") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack"]


@pytest.mark.parametrize("option, value, recorded", [
    ("--episodes", "5", "4"), ("--seed", "1", "0"), ("--scenarios", "sgd", "'builtin'"),
    ("--agent-model", "gpt-x", "not set"), ("--durability", "none", "'episode'"),
])
def test_resume_refuses_options_that_differ_from_the_run(tmp_path, capsys, small_run, option, value, recorded):
    """--resume with an option that differs from the manifest names the option and the recorded value."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    before = _snapshot(run)
    status, _, err = cli(capsys, "run", "--resume", run, option, value, "--no-progress")
    assert_one_line_error(status, err, f"{option} ", f"({recorded})")
    assert _snapshot(run) == before


def test_resume_accepts_options_equal_to_the_recorded_ones(tmp_path, capsys, small_run):
    """Repeating the run's own options on --resume is fine."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    status, out, err = cli(capsys, "run", "--resume", run, "--episodes", "4", "--seed", "0", "--scenarios", "builtin",
                           "--no-progress")
    assert status == 0 and "completed: 4 episodes" in out, err


@pytest.mark.slow
def test_resume_finds_a_relative_pack_from_another_directory(tmp_path):
    """A run started with --scenarios ./pack records the absolute path, so --resume works from any directory."""
    small = SGD_FIXTURES.parent / "sgd_small"
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    for args in (["pack", "build", "--sgd", str(small), "--schemas", str(small / "schema.json"), "--out", "mypack",
                  "--no-progress"],
                 ["run", "--scenarios", "./mypack", "--episodes", "3", "--out", "run", "--no-progress"]):
        proc = subprocess.run([*CLI, *args], cwd=work, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    manifest = json.loads((work / "run" / "manifest.json").read_text())
    assert manifest["config"]["scenarios"] == str((work / "mypack").resolve())
    proc = subprocess.run([*CLI, "run", "--resume", str(work / "run"), "--no-progress"], cwd=elsewhere,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "completed: 3 episodes" in proc.stdout, proc.stderr
    proc = subprocess.run([*CLI, "run", "--resume", "run", "--scenarios", "mypack", "--no-progress"], cwd=work,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_an_unfinished_import_is_refused_by_project_and_resume(tmp_path, capsys):
    """An import killed midway (status running) is refused by project; --resume of any import says to re-import."""
    run = tmp_path / "imported"
    assert cli(capsys, "import", "sgd", SGD_FIXTURES, "--out", run)[0] == 0
    status, _, err = cli(capsys, "run", "--resume", run, "--no-progress")
    assert_one_line_error(status, err, str(run), "imported corpus", "import again", f"import sgd {SGD_FIXTURES}")
    _edit_manifest(run, status="running")  # what a SIGKILL mid-import leaves
    status, _, err = cli(capsys, "project", run, "--to", "sgd", "--no-progress")
    assert_one_line_error(status, err, str(run), "the import did not finish", "import again")
    assert not (run / "projections" / "sgd@v1").exists()


@pytest.fixture
def corrupt_run(tmp_path, small_run) -> Path:
    """A copy of the small run whose fourth event line is garbage."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    shard = run / "events" / "shard-000.jsonl"
    lines = shard.read_bytes().split(b"\n")
    lines[3] = b"garbage"
    shard.write_bytes(b"\n".join(lines))
    return run


@pytest.mark.parametrize("command, advice", [
    (["events"], "rerun with --skip-corrupt"), (["stats"], "rerun with --skip-corrupt"),
    (["project", "--to", "sgd", "--no-progress"], "rerun with --skip-corrupt"),
    (["run", "--no-progress", "--resume"], "dialogsim run cannot skip corrupt lines"),
], ids=lambda c: c[0] if isinstance(c, list) else None)
def test_corrupt_line_advice_fits_the_command(capsys, corrupt_run, command, advice):
    """Only the commands that have --skip-corrupt are told to use it."""
    status, _, err = cli(capsys, *command, corrupt_run)
    assert_one_line_error(status, err, "shard-000.jsonl: line 4: corrupt event", advice)


@pytest.mark.parametrize("command", [["project", "--to", "sgd", "--no-progress"], ["stats"], ["events"]],
                         ids=lambda c: c[0])
def test_skip_corrupt_reports_how_many_lines_it_skipped(capsys, corrupt_run, command):
    """With --skip-corrupt, project, stats and events say how many lines they skipped."""
    status, _, err = cli(capsys, *command, corrupt_run, "--skip-corrupt")
    assert status == 0 and "skipped 1 corrupt line(s)" in err


def _pred_dir(tmp_path: Path, edit=None, data=None) -> Path:
    """A prediction directory: the fixture dialogues, edited by ``edit`` or replaced by ``data`` (raw text)."""
    pred = tmp_path / "pred"
    pred.mkdir()
    if data is None:
        dialogues = json.loads((SGD_FIXTURES / "dialogues_001.json").read_text())
        if edit is not None:
            edit(dialogues)
        data = json.dumps(dialogues)
    (pred / "dialogues_001.json").write_text(data)
    return pred


def _first_user_frame(dialogues):
    return dialogues[1]["turns"][0]["frames"][0]


@pytest.mark.parametrize("edit, data, fragments", [
    (None, "{x", ["dialogues_001.json", "not JSON"]),
    (None, '"hello"', ["dialogues_001.json", "expected a list of dialogues"]),
    (lambda d: _first_user_frame(d).pop("service"), None, ["dialogues_001.json", "dialogue 1_00001, turn 0", "`service`"]),
    (lambda d: _first_user_frame(d).pop("state"), None, ["dialogues_001.json", "dialogue 1_00001, turn 0", "no 'state'"]),
    (lambda d: _first_user_frame(d)["state"].update(slot_values=[1]), None,
     ["dialogues_001.json", "dialogue 1_00001, turn 0", "slot_values"]),
    (lambda d: d[1]["turns"][0].update(frames=5), None, ["dialogues_001.json", "dialogue 1_00001, turn 0", "frames"]),
    (lambda d: d[0].update(dialogue_id="nope_1"), None, ["dialogues_001.json", "nope_1", "not in the reference"]),
    (lambda d: d.append(d[0]), None, ["dialogues_001.json", "also appears in"]),
], ids=["not-json", "not-a-list", "no-service", "no-state", "bad-slot-values", "bad-frames", "unknown-id",
        "duplicate"])
def test_eval_dst_malformed_predictions_are_one_line(tmp_path, capsys, edit, data, fragments):
    """A malformed prediction file is one line naming the file (and dialogue and turn where there is one), exit 2."""
    pred = _pred_dir(tmp_path, edit, data)
    status, out, err = cli(capsys, "eval-dst", "--ref", SGD_FIXTURES, "--pred", pred, "--out", tmp_path / "m.json")
    assert_one_line_error(status, err, *fragments)
    assert not (tmp_path / "m.json").exists()


def test_eval_dst_refuses_an_empty_prediction_directory(tmp_path, capsys):
    """--pred without prediction files, or with files holding no dialogue, is an error, not a table of zeros."""
    pred = tmp_path / "pred"
    pred.mkdir()
    status, _, err = cli(capsys, "eval-dst", "--ref", SGD_FIXTURES, "--pred", pred)
    assert_one_line_error(status, err, str(pred), "no prediction files")
    (pred / "dialogues_001.json").write_text("[]")
    status, _, err = cli(capsys, "eval-dst", "--ref", SGD_FIXTURES, "--pred", pred)
    assert_one_line_error(status, err, str(pred), "no dialogues")


def test_import_skip_invalid_reports_counts_files_and_first_problems(tmp_path, capsys):
    """--skip-invalid says how many dialogues it skipped, in which files, with each file's first problem."""
    data = json.loads((SGD_FIXTURES / "dialogues_001.json").read_text())
    src = tmp_path / "src"
    src.mkdir()
    (src / "schema.json").write_bytes((SGD_FIXTURES / "schema.json").read_bytes())
    first, second = json.loads(json.dumps(data[:3])), json.loads(json.dumps(data[3:]))
    first[0]["turns"][0]["speaker"] = "BOT"
    first[2]["turns"][0]["frames"][0]["state"]["slot_values"]["colour"] = ["red"]
    second[0]["dialogue_id"] = first[1]["dialogue_id"]
    for name, dialogues in (("dialogues_001.json", first), ("dialogues_002.json", second)):
        (src / name).write_text(json.dumps(dialogues))
    (src / "dialogues_003.json").write_text('{"not": "a list"}')
    status, out, err = cli(capsys, "import", "sgd", src, "--out", tmp_path / "run", "--skip-invalid")
    assert status == 0, err
    assert f"imported {len(data) - 3} dialogues" in out
    lines = err.strip().splitlines()
    assert lines[0] == "skipped 3 invalid dialogue(s) in 2 file(s):"
    assert lines[1].startswith(f"  {src / 'dialogues_001.json'}: 2 skipped; first: dialogue {first[0]['dialogue_id']}, "
                               "turn 0: not SGD") and "'BOT'" in lines[1]
    assert lines[2].startswith(f"  {src / 'dialogues_002.json'}: 1 skipped; first: dialogue") and "duplicate" in lines[2]
    assert lines[3:] == ["skipped 1 unreadable file(s):",
                         f"  {src / 'dialogues_003.json'}: not an SGD dialogue file (the top level is not a JSON list)"]


def test_import_refuses_an_unknown_slot_naming_file_dialogue_turn_and_element(tmp_path, capsys):
    """Without --skip-invalid, a slot name outside the schema stops the import with one line and leaves no run."""
    data = json.loads((SGD_FIXTURES / "dialogues_001.json").read_text())
    data[1]["turns"][2]["frames"][0]["state"]["requested_slots"] = ["colour"]
    src = tmp_path / "src"
    src.mkdir()
    (src / "schema.json").write_bytes((SGD_FIXTURES / "schema.json").read_bytes())
    (src / "dialogues_001.json").write_text(json.dumps(data))
    status, _, err = cli(capsys, "import", "sgd", src, "--out", tmp_path / "run")
    assert_one_line_error(status, err, "dialogues_001.json", f"dialogue {data[1]['dialogue_id']}, turn 2",
                          "state.requested_slots: unknown slot 'colour'")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("position", ["before", "after"])
@pytest.mark.slow
def test_log_format_is_accepted_before_or_after_the_subcommand(tmp_path, position):
    """--log-format json works as a global option and after the subcommand, also a nested one."""
    out = tmp_path / "run"
    run = ["run", "--scenarios", "builtin", "--episodes", "2", "--out", str(out), "--no-progress"]
    args = ["--log-format", "json", *run] if position == "before" else [run[0], "--log-format", "json", *run[1:]]
    proc = dialogsim(*args, check=True)
    assert json.loads(proc.stderr.strip().splitlines()[-1])["event"] == "run completed"
    assert "projection written" in dialogsim("project", str(out), "--to", "sgd", "--rebuild", check=True).stderr
    proc = dialogsim("project", "--log-level", "warning", str(out), "--to", "sgd", "--rebuild", check=True)
    assert proc.stderr == ""
    small = SGD_FIXTURES.parent / "sgd_small"
    proc = dialogsim("pack", "build", "--log-level", "warning", "--sgd", str(small), "--schemas",
                     str(small / "schema.json"), "--out", str(tmp_path / "pack"), "--no-progress", check=True)
    assert proc.stderr == ""
