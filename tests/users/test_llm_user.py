"""The model-driven user against loopback model servers that behave like real ones: one playing the user of its
prompt's goal, ones that fail; recorded calls, the llm cache, per-role cost and the budget."""

from __future__ import annotations

import json
import shutil
import time

import msgspec
import pytest
from aiohttp import web

from dialogsim.agents.http.testing import serve_in_thread
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import ModelCalled, UserTurn
from dialogsim.engine.log import RunDir, read_episodes, read_events
from dialogsim.engine.session import RunConfig, resume_run, start_run
from dialogsim.users.llm import LlmUserFactory
from dialogsim.users.testing import REQUESTS, TIMES, request_digests, user_model_app

FAST = {"read_timeout": "0.5", "total_timeout": "1", "backoff_base": "0.01", "backoff_max": "0.02"}


@pytest.fixture(scope="module")
def model_url(pack):
    """A well-behaved user model for the whole module (its request list grows test by test)."""
    app = user_model_app(pack)
    with serve_in_thread(app) as url:
        yield url, app


def _config(url: str, episodes: int, **options) -> RunConfig:
    user_options = {"model": "fake-user", **options.pop("user_options", {})}
    return RunConfig(user=f"llm:{url}", user_options=user_options, episodes=episodes, seed=3, **options)


@pytest.mark.slow
def test_a_model_user_finishes_sgd_goals_and_its_turns_are_annotated(tmp_path, model_url):
    """20 SGD dialogues against the schema agent: mostly successes; each user turn follows its model call, carries
    usage, inferred acts and the true state; the calls' digests are the requests' digests."""
    url, app = model_url
    before = len(app[REQUESTS])
    result = start_run(tmp_path / "run", _config(url, 20, user_options={"price_in_per_1k": "0.5",
                                                                         "price_out_per_1k": "2"}), progress=False)
    assert result.status == "completed" and result.counts["success"] >= 16, result.counts
    events = [e for ep in read_episodes(RunDir.open(tmp_path / "run")) for e in ep]
    calls = [e for e in events if isinstance(e, ModelCalled)]
    turns = [e for e in events if isinstance(e, UserTurn)]
    assert len(calls) == len(turns) == len(app[REQUESTS]) - before
    assert sorted(c.digest for c in calls) == sorted(request_digests(app[REQUESTS][before:]))
    by_seq = {(e.ep, e.seq): e for e in events}
    for turn in turns:
        call = by_seq[(turn.ep, turn.seq - 1)]
        assert isinstance(call, ModelCalled) and call.role == "user" and call.model == "fake-user"
        assert turn.inferred is True and turn.usage == call.usage and turn.cost == call.cost > 0
        assert turn.frames and all(f.state is not None for f in turn.frames)
        assert "###STOP###" not in turn.utterance
    assert sum(bool(f.actions) for t in turns for f in t.frames) > 0.8 * len(turns)
    usage = result.usage["user"]
    assert usage.calls == len(calls) and usage.cost == pytest.approx(sum(c.cost for c in calls))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["usage"]["user"]["calls"] == len(calls) and "agent" not in manifest["usage"]


@pytest.mark.slow
def test_a_resumed_episode_asks_the_model_nothing_its_log_holds(tmp_path, model_url):
    """A crash mid-run (the log cut at an arbitrary line): resuming re-runs the user from its recorded calls, so
    every request sent after the crash is one the log did not hold, and every episode ends exactly once."""
    url, app = model_url
    start_run(tmp_path / "run", _config(url, 12, concurrency=6, durability="none"), progress=False)
    shard = next((tmp_path / "run" / "events").glob("*.jsonl"))
    lines = shard.read_bytes().splitlines(keepends=True)
    cut = lines[: len(lines) * 3 // 5]
    shard.write_bytes(b"".join(cut))
    logged = {json.loads(line)["digest"] for line in cut if b'"model_called"' in line}
    unfinished = {json.loads(line)["ep"] for line in cut if b'"episode_started"' in line} - {
        json.loads(line)["ep"] for line in cut if b'"episode_ended"' in line}
    assert logged and unfinished
    before = len(app[REQUESTS])
    result = resume_run(tmp_path / "run", progress=False)
    assert result.status == "completed" and result.counts["episodes"] == 12
    resent = set(request_digests(app[REQUESTS][before:])) & logged
    assert not resent
    ended = [e.ep for e in read_events(RunDir.open(tmp_path / "run"), types={"episode_ended"})]
    assert sorted(ended) == sorted(set(ended)) and len(ended) == 12
    assert not [e for e in read_events(RunDir.open(tmp_path / "run"), types={"fault"})]  # no divergence


@pytest.mark.slow
def test_the_llm_cache_answers_a_second_run_without_the_model(tmp_path, model_url):
    """--llm-cache: a second run of the same config sends nothing; its calls say cached and cost nothing."""
    url, app = model_url
    config = _config(url, 4, llm_cache=str(tmp_path / "cache"), user_options={"price_in_per_1k": "1"})
    first = start_run(tmp_path / "a", config, progress=False)
    before = len(app[REQUESTS])
    second = start_run(tmp_path / "b", config, progress=False)
    assert len(app[REQUESTS]) == before and first.counts == second.counts
    a, b = (sorted((e for e in read_events(RunDir.open(tmp_path / d)) if isinstance(e, ModelCalled)),
                   key=lambda e: (e.ep, e.seq)) for d in "ab")  # cached answers come at once: another log order
    assert [c.digest for c in a] == [c.digest for c in b] and [c.content for c in a] == [c.content for c in b]
    assert {c.cached for c in a} == {False} and {c.cached for c in b} == {True}
    assert {c.cost for c in b} == {0.0} and second.usage["user"].cached == len(b)
    assert list((tmp_path / "cache").rglob("*.json"))


@pytest.mark.slow
def test_max_cost_stops_starting_episodes_and_resume_can_raise_it(tmp_path, model_url):
    """Once the budget is spent no episode starts: status stopped, the reason in the manifest and run_ended; a
    resume with a higher budget finishes the run."""
    url, _ = model_url
    config = _config(url, 40, concurrency=2, max_cost=0.05, user_options={"price_in_per_1k": "0.02"})
    result = start_run(tmp_path / "run", config, progress=False)
    assert result.status == "stopped" and result.counts["episodes"] < 40
    assert result.usage["user"].cost >= 0.05 and "--max-cost 0.05 USD spent" in result.reason
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "stopped" and manifest["reason"] == result.reason
    ended = list(read_events(RunDir.open(tmp_path / "run"), types={"run_ended"}))
    assert ended[-1].status == "stopped" and ended[-1].reason == result.reason
    again = resume_run(tmp_path / "run", progress=False, max_cost=100.0)
    assert again.status == "completed" and again.counts["episodes"] == 40 and not again.reason
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["config"]["max_cost"] == 100.0


@pytest.mark.slow
def test_every_failure_is_a_user_fault_and_retries_carry_on(tmp_path, pack):
    """500, 429 with Retry-After, malformed JSON and a hang on first attempts: one who=user fault each, the
    episodes go on; the retry after a 429 waits at least its Retry-After."""
    faults = {"e000000/2": "500", "e000001/2": "429", "e000002/2": "malformed", "e000003/2": "hang"}
    app = user_model_app(pack, plan=lambda key, attempt: faults.get(key) if attempt == 1 else None,
                         hang_seconds=2.0, retry_after="0.3")
    with serve_in_thread(app) as url:
        result = start_run(tmp_path / "run", _config(url, 4, user_options=FAST), progress=False)
    assert result.status == "completed"
    got = {(f.ep, f.who, f.kind, f.attempt) for f in read_events(RunDir.open(tmp_path / "run"), types={"fault"})}
    assert got == {("e000000", "user", "http_status", 1), ("e000001", "user", "http_status", 1),
                   ("e000002", "user", "protocol", 1), ("e000003", "user", "timeout", 1)}
    calls = {c.ep: c for c in read_events(RunDir.open(tmp_path / "run"), types={"model_called"}) if c.attempt > 1}
    assert set(calls) == {"e000000", "e000001", "e000002", "e000003"}
    sent = [(b["user"], t) for b, t in zip(app[REQUESTS], app[TIMES]) if b["user"] == "e000001"][:2]
    assert sent[1][1] - sent[0][1] >= 0.3


@pytest.mark.slow
def test_a_user_model_that_keeps_failing_ends_its_episode_with_user_faults(tmp_path, pack):
    """Retries exhausted: outcome error naming the user, every attempt a who=user fault; other episodes go on."""
    app = user_model_app(pack, plan=lambda key, attempt: "500" if key.startswith("e000001/") else None)
    with serve_in_thread(app) as url:
        result = start_run(tmp_path / "run", _config(url, 3, user_options={**FAST, "retries": "2"}), progress=False)
    ends = {e.ep: e for e in read_events(RunDir.open(tmp_path / "run"), types={"episode_ended"})}
    assert ends["e000001"].outcome == "error"
    assert ends["e000001"].reason.startswith("user failed: user request failed after 3 attempts: HTTP 500")
    faults = [f for f in read_events(RunDir.open(tmp_path / "run"), types={"fault"})]
    assert [(f.ep, f.who, f.attempt) for f in faults] == [("e000001", "user", n) for n in (1, 2, 3)]
    assert result.counts["episodes"] == 3


def test_options_are_checked_and_named():
    """A missing model, a misspelt option or a bad URL: one UserError naming the user's option."""
    with pytest.raises(UserError, match="--user-model"):
        LlmUserFactory("http://127.0.0.1:9", None, {})
    with pytest.raises(UserError, match="unknown option 'temprature' for user llm:"):
        LlmUserFactory("http://127.0.0.1:9", None, {"model": "m", "temprature": "1"})
    with pytest.raises(UserError, match="unknown option 'latency'"):
        LlmUserFactory("http://127.0.0.1:9", None, {"model": "m", "latency": "measured"})
    with pytest.raises(UserError, match="bad user option temperature='hot'"):
        LlmUserFactory("http://127.0.0.1:9", None, {"model": "m", "temperature": "hot"})
    with pytest.raises(UserError, match="bad user spec 'llm:'"):
        LlmUserFactory(None, None, {"model": "m"})


def _cli(capsys, *args) -> tuple[int, str, str]:
    from dialogsim.engine.cli import main

    try:
        status = main([str(a) for a in args])
    except SystemExit as exc:
        status = exc.code
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.mark.parametrize("args, fragment", [
    (["--user-price", "cheap"], "--user-price 'cheap': expected IN,OUT"),
    (["--max-cost", "-1"], "--max-cost must be a number of USD >= 0"),
    (["--llm-cache", "CACHE"], "--llm-cache"),
])
def test_bad_model_options_are_one_line_errors(tmp_path, capsys, args, fragment):
    """A bad price or budget, or a cache with no model to use it: exit 2, one line, nothing written."""
    args = [a.replace("CACHE", str(tmp_path / "cache")) for a in args]
    status, _, err = _cli(capsys, "run", "--scenarios", "builtin", *args, "--out", tmp_path / "run", "--no-progress")
    assert status == 2 and len(err.strip().splitlines()) == 1 and fragment in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_command_line_prints_usage_and_resume_keeps_the_cache_as_recorded(tmp_path, capsys, model_url):
    """The summary names each role's calls, tokens and cost; --resume refuses another --llm-cache but takes a new
    --max-cost."""
    url, _ = model_url
    run = tmp_path / "run"
    status, out, err = _cli(capsys, "run", "--user", f"llm:{url}", "--user-model", "m", "--user-price", "1,2",
                            "--llm-cache", tmp_path / "cache", "--episodes", "2", "--out", run, "--no-progress")
    assert status == 0, err
    assert "completed: 2 episodes" in out and "  user: " in out and " USD" in out
    status, _, err = _cli(capsys, "run", "--resume", run, "--llm-cache", tmp_path / "other", "--no-progress")
    assert status == 2 and "--llm-cache" in err and "differs" in err
    status, out, err = _cli(capsys, "run", "--resume", run, "--max-cost", "5", "--no-progress")
    assert status == 0, err
    status, out, _ = _cli(capsys, "stats", run)
    assert status == 0 and "model usage" in out
