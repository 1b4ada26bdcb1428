"""verify, replay, fork and diff on real runs (the bundled SGD pack, the built-in scenarios, a live agent)."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import msgspec
import pytest

from dialogsim.engine.events import event_type
from dialogsim.engine.log import read_episodes, read_events
from dialogsim.engine.session import RunConfig, start_run

from .test_cli import _start_and_kill, cli, dialogsim


@pytest.fixture(scope="module")
def sgd_run(tmp_path_factory) -> Path:
    """A default run: 40 SGD episodes, agenda user against the schema agent, seed 3."""
    out = tmp_path_factory.mktemp("sgd") / "run"
    start_run(out, RunConfig(episodes=40, seed=3), progress=False)
    return out


def _edit(run: Path, ep: str, seq: int, **changes) -> None:
    """Hand-edit one event of a run's log."""
    shard = run / "events" / "shard-000.jsonl"
    lines = shard.read_text().splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line)
        if event["ep"] == ep and event["seq"] == seq:
            event.update(changes)
            lines[i] = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    shard.write_text("\n".join(lines) + "\n")


def test_verify_passes_on_a_default_run_and_names_the_event_a_hand_edit_changed(sgd_run, tmp_path, capsys):
    """verify re-simulates every episode and finds the log equal; after an agent turn's text and a user turn's time
    are edited, it names each episode's first differing event (seq, type, field, both values) and exits 1."""
    status, out, _ = cli(capsys, "verify", sgd_run, "--no-progress")
    assert (status, out) == (0, "verified 40/40\n")
    edited = tmp_path / "edited"
    shutil.copytree(sgd_run, edited)
    logged = {e.seq: e for e in read_events(sgd_run, episodes={"e000005"})}
    turn = next(seq for seq in sorted(logged) if seq > 2 and hasattr(logged[seq], "utterance"))
    _edit(edited, "e000005", turn, utterance=logged[turn].utterance + "!")
    _edit(edited, "e000009", 3, t=1000.0)
    status, out, _ = cli(capsys, "verify", edited, "--no-progress")
    assert status == 1
    lines = out.splitlines()
    assert lines[0] == (f"e000005: event {turn} ({event_type(logged[turn])}) differs at utterance: "
                        f"logged {logged[turn].utterance + '!'!r}, re-run {logged[turn].utterance!r}")
    assert lines[1].startswith("e000009: event 3 (") and "differs at t: logged 1000.0, re-run " in lines[1]
    assert lines[-1] == "verified 38/40"


def test_verify_checks_a_part_of_a_run_and_refuses_what_it_cannot_check(sgd_run, tmp_path, capsys):
    """--episodes N checks the first N, --sample K K of them (seeded); both at once, or a run with an unfinished
    episode, is one line and exit status 2."""
    assert cli(capsys, "verify", sgd_run, "--episodes", "5", "--no-progress")[1] == "verified 5/5 (of 40 episodes)\n"
    assert cli(capsys, "verify", sgd_run, "--sample", "7", "--no-progress")[1] == "verified 7/7 (of 40 episodes)\n"
    status, _, err = cli(capsys, "verify", sgd_run, "--sample", "7", "--episodes", "3")
    assert status == 2 and "give --episodes N or --sample K, not both" in err
    cut = tmp_path / "cut"
    (cut / "events").mkdir(parents=True)
    (cut / "manifest.json").write_bytes((sgd_run / "manifest.json").read_bytes())
    lines = (sgd_run / "events" / "shard-000.jsonl").read_bytes().splitlines(keepends=True)
    (cut / "events" / "shard-000.jsonl").write_bytes(b"".join(lines[:len(lines) // 2]))
    status, _, err = cli(capsys, "verify", cut)
    assert status == 2 and "did not end" in err and f"dialogsim run --resume {cut}" in err and "Traceback" not in err


def test_a_replay_against_the_same_agent_gives_the_same_episodes_and_names_its_source(sgd_run, tmp_path, capsys):
    """The users of a run replayed against the same agent: every episode has the same outcome and turns (common random
    numbers), its start names the episode and run it replays, and the replay verifies and resumes as a normal run."""
    out = tmp_path / "replay"
    status, stdout, _ = cli(capsys, "replay", sgd_run, "--agent", "schema", "--out", out, "--no-progress")
    assert status == 0 and "completed: 40 episodes" in stdout
    source = {events[0].ep: events for events in read_episodes(sgd_run)}
    run_id = json.loads((sgd_run / "manifest.json").read_text())["run_id"]
    for events in read_episodes(out):
        started, parent = events[0], source[events[0].ep]
        assert (started.parent.ep, started.parent.seq, started.parent_run, started.branch) == (
            started.ep, 1, run_id, None)
        assert (started.scenario, started.seed) == (parent[0].scenario, parent[0].seed)
        assert events[-1].outcome == parent[-1].outcome
        said = lambda episode: [getattr(e, "utterance", None) for e in episode[1:]]
        assert said(events) == said(parent)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["source"]["command"] == "replay" and manifest["config"]["source"]["run_id"] == run_id
    assert cli(capsys, "verify", out, "--no-progress")[1] == "verified 40/40\n"
    assert "completed: 40 episodes" in cli(capsys, "run", "--resume", out, "--no-progress")[1]


def test_a_forks_sgd_dialogue_starts_with_its_parents_turns_byte_for_byte(sgd_run, tmp_path, capsys):
    """A fork at turn 4 with another agent option: its SGD projection holds the parent's first four turns exactly
    (copied, not re-run: the listen=text agent would have tracked its state differently), then goes its own way."""
    out = tmp_path / "fork"
    status, stdout, _ = cli(capsys, "fork", sgd_run, "--at-turn", "4", "--agent-opt", "listen=text", "--out", out,
                            "--no-progress")
    assert status == 0
    for run in (sgd_run, out):
        assert cli(capsys, "project", run, "--to", "sgd", "--no-progress")[0] == 0

    def dialogues(run: Path) -> dict[str, dict]:
        files = sorted((run / "projections" / "sgd@v1").glob("dialogues_*.json"))
        return {d["dialogue_id"]: d for f in files for d in json.loads(f.read_text())}

    parents, forks = dialogues(sgd_run), dialogues(out)
    assert len(forks) == len([d for d in parents.values() if len(d["turns"]) >= 4])
    enc = lambda turns: json.dumps(turns, sort_keys=True).encode()
    assert all(enc(d["turns"][:4]) == enc(parents[ep[:-len("-fork")]]["turns"][:4]) for ep, d in forks.items())
    assert any(enc(d["turns"]) != enc(parents[ep[:-len("-fork")]]["turns"]) for ep, d in forks.items())
    assert cli(capsys, "verify", out, "--no-progress")[1] == f"verified {len(forks)}/{len(forks)}\n"


def test_branches_of_one_episode_in_one_fork_run_each_with_its_own_options(sgd_run, tmp_path, capsys):
    """--branches a,b at the decision point after the user's first turn, b with its own agent option: two episodes
    per parent, named EP-a and EP-b, with the parent's seq 2 as their branch point; a (the parent's agent, its rng
    untouched by the copy) answers the copied turn as the parent's agent did, then the warmed user goes its own
    way."""
    out = tmp_path / "branches"
    status, _, _ = cli(capsys, "fork", sgd_run, "--at-turn", "1", "--branches", "a,b", "--branch-agent-opt",
                       "b:listen=text", "--episode", "e000002", "--episode", "e000007", "--out", out, "--no-progress")
    assert status == 0
    episodes = {events[0].ep: events for events in read_episodes(out)}
    assert sorted(episodes) == ["e000002-a", "e000002-b", "e000007-a", "e000007-b"]
    parents = {events[0].ep: events for events in read_episodes(sgd_run, episodes={"e000002", "e000007"})}
    for ep, events in episodes.items():
        started = events[0]
        assert (started.parent.ep, started.parent.seq, started.branch) == (ep[:7], 2, ep[-1])
        if ep.endswith("-a"):
            assert [getattr(e, "utterance", None) for e in events[:3]] == [getattr(e, "utterance", None)
                                                                           for e in parents[ep[:7]][:3]]
    config = json.loads((out / "manifest.json").read_text())["config"]
    assert [(b["name"], b["agent_options"]) for b in config["branches"]] == [("a", {}), ("b", {"listen": "text"})]
    status, _, err = cli(capsys, "fork", sgd_run, "--at-turn", "1", "--branches", "a", "--branch-agent-opt",
                         "c:listen=text", "--out", tmp_path / "bad")
    assert status == 2 and "--branch-agent-opt 'c:listen=text'" in err and not (tmp_path / "bad").exists()


def test_diff_of_a_run_and_the_same_users_against_a_weaker_agent_finds_the_transitions(sgd_run, tmp_path, capsys):
    """The agent reading text instead of acts loses episodes: diff pairs all 40, lists each success -> failure pair,
    tests success with McNemar (b = those pairs, c = the reverse), reports DST joint goal accuracy; against itself
    nothing changes."""
    weaker = tmp_path / "text"
    cli(capsys, "replay", sgd_run, "--agent", "schema", "--agent-opt", "listen=text", "--out", weaker, "--no-progress")
    status, out, _ = cli(capsys, "diff", sgd_run, weaker, "--out", tmp_path / "diff.json")
    assert status == 0
    report = json.loads((tmp_path / "diff.json").read_text())
    a = {e[0].scenario_id: e[-1].outcome for e in read_episodes(sgd_run)}
    b = {e[0].scenario_id: e[-1].outcome for e in read_episodes(weaker)}
    lost = sorted(ep for ep in a if a[ep] == "success" and b[ep] != "success")
    assert lost and report["pairs"] == 40 and report["only_in_a"] == report["only_in_b"] == []
    assert sorted(ep for name, eps in report["transitions"].items() if name.startswith("success ->") for ep in eps) == [
        "e0000" + ep[-2:] for ep in lost]
    success = next(m for m in report["metrics"] if m["name"] == "success")
    assert success["discordant"][0] == len(lost) and success["delta"] < 0
    assert any(m["name"] == "dst_joint_goal_accuracy" and m["delta"] < 0 for m in report["metrics"])
    assert "success -> failure" in out and "McNemar exact p=" in out and "dst joint goal accuracy" in out
    status, out, _ = cli(capsys, "diff", sgd_run, sgd_run)
    assert "outcomes: no pair changed" in out and "pairs whose turns are identical: 40" in out


@pytest.mark.slow
def test_a_run_against_a_live_agent_verifies_with_the_agent_gone(tmp_path, capsys):
    """The live agent's replies are read back from the log: with its server stopped, verify re-runs the user, the
    world and the judge around them and finds every event as logged."""
    from dialogsim.agents.http.server import make_app
    from dialogsim.agents.http.testing import serve_in_thread
    from dialogsim.agents.scripted import ScriptedAgent

    out = tmp_path / "live"
    with serve_in_thread(make_app(ScriptedAgent, "native")) as url:
        status, _, err = cli(capsys, "run", "--scenarios", "builtin", "--agent", f"http:{url}", "--episodes", "12",
                             "--out", out, "--no-progress")
        assert status == 0, err
    assert any(e.service for e in read_events(out) if type(e).__name__ == "ToolCalled")
    assert cli(capsys, "verify", out, "--no-progress")[1] == "verified 12/12\n"


@pytest.mark.slow
def test_a_run_killed_with_sigkill_and_resumed_verifies_and_equals_an_uninterrupted_run(tmp_path, capsys):
    """kill -9 mid-batch, --resume: the run verifies, and every episode's events equal those of a run never
    interrupted, virtual times included (wall clock aside)."""
    out, whole = tmp_path / "killed", tmp_path / "whole"
    episodes = 30_000
    _start_and_kill(out, episodes, signal.SIGKILL)
    dialogsim("run", "--resume", str(out), "--no-progress", check=True, timeout=300)
    assert dialogsim("verify", str(out), "--no-progress", timeout=300).stdout == f"verified {episodes}/{episodes}\n"
    dialogsim("run", "--scenarios", "builtin", "--episodes", str(episodes), "--durability", "none", "--out",
              str(whole), "--no-progress", check=True, timeout=300)

    def by_episode(run: Path) -> dict[str, list[bytes]]:
        return {events[0].ep: [msgspec.json.encode(msgspec.structs.replace(e, wall=0)) for e in events]
                for events in read_episodes(run)}

    assert by_episode(out) == by_episode(whole)


def test_branches_in_the_same_run_verify_and_resume(tmp_path, capsys):
    """run --branches a,b --at-turn 1 with b's own agent option: each of 6 episodes is followed by its two branches
    in the same run (18 episodes); the run verifies, and resuming it changes nothing."""
    out = tmp_path / "branched"
    status, stdout, _ = cli(capsys, "run", "--episodes", "6", "--seed", "2", "--branches", "a,b", "--at-turn", "1",
                            "--branch-agent-opt", "b:listen=text", "--out", out, "--no-progress")
    assert status == 0 and "completed: 18 episodes" in stdout
    started = {e.ep: e for e in read_events(out) if event_type(e) == "episode_started"}
    assert sorted(started) == sorted(f"e{i:06d}{b}" for i in range(6) for b in ("", "-a", "-b"))
    assert all((s.parent.ep, s.parent.seq, s.branch) == (ep[:7], 2, ep[8:]) for ep, s in started.items() if s.branch)
    assert cli(capsys, "verify", out, "--no-progress")[1] == "verified 18/18\n"
    before = (out / "events" / "shard-000.jsonl").read_bytes()
    assert "completed: 18 episodes" in cli(capsys, "run", "--resume", out, "--no-progress")[1]
    after = (out / "events" / "shard-000.jsonl").read_bytes()
    assert after.startswith(before) and after[len(before):].count(b"\n") == 2  # run_started and run_ended only


class _Branching:
    """The built-in scenarios, with a branch of every episode that has a tool call (the scenario set's hook)."""

    def __init__(self):
        from dialogsim.scenarios.builtin import BuiltinScenarios

        self.inner = BuiltinScenarios()
        self.name, self.default_user, self.default_agent = "branching", "scripted", "scripted"

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def branches(self, events):
        from dialogsim.engine.runner import Branch

        called = any(event_type(e) == "tool_called" for e in events)
        return [Branch(name="again", at_turn=2)] if called else []


def test_a_scenario_set_asks_for_branches_of_its_episodes(tmp_path, capsys):
    """A scenario set's branches(events) is asked when each episode ends: here only episodes that called a tool
    get a branch, which copies their first two turns and plays the rest again as the mainline did."""
    from dialogsim.engine import registry

    registry.register("scenarios", "branching", lambda arg: _Branching())
    out = tmp_path / "hooked"
    status, stdout, _ = cli(capsys, "run", "--scenarios", "branching", "--episodes", "6", "--out", out,
                            "--no-progress")
    episodes = {events[0].ep: events for events in read_episodes(out)}
    assert status == 0 and sorted(episodes) == ["e000000", "e000000-again", "e000001", "e000001-again", "e000002",
                                                 "e000003", "e000003-again", "e000004", "e000004-again", "e000005"]
    mainline, branch = episodes["e000001"], episodes["e000001-again"]
    said = lambda events: [getattr(e, "utterance", None) for e in events[1:]]
    assert said(branch) == said(mainline) and branch[0].parent.seq == 5
    assert cli(capsys, "verify", out, "--no-progress")[1] == "verified 10/10\n"


def test_fields_added_later_are_left_out_of_the_record_while_empty():
    """branches, source, max_cost and llm_cache are left out of a config's record, and so of its run id, while
    empty: a config of the fields an older version had keeps its run id; given, each is recorded."""
    from dialogsim.engine.runner import Branch
    from dialogsim.engine.seeding import stable_hash
    from dialogsim.engine.session import config_record, run_id_for

    plain = RunConfig(scenarios="builtin", user="scripted", agent="scripted", episodes=3, concurrency=32)
    older = {"scenarios": "builtin", "user": "scripted", "agent": "scripted", "episodes": 3, "seed": 0,
             "concurrency": 32, "max_turns": 50, "think": "uniform:1,4", "latency": "uniform:0.2,0.8",
             "arrivals": "all", "durability": "episode", "user_options": {}, "agent_options": {}}
    assert config_record(plain) == older
    assert run_id_for(plain) == f"run-{stable_hash(json.dumps(older, sort_keys=True)):016x}"
    given = msgspec.structs.replace(plain, max_cost=2.5, llm_cache="/tmp/cache", branches=[Branch(name="b", at_turn=1)])
    record = config_record(given)
    assert (record["max_cost"], record["llm_cache"], record["branches"][0]["name"]) == (2.5, "/tmp/cache", "b")
    assert "source" not in record and run_id_for(given) != run_id_for(plain)
