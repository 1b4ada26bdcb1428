"""Batches through `dialogsim run` against live agent servers: both protocols, kill and resume, determinism."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from dialogsim.agents.http.server import make_app
from dialogsim.agents.http.testing import EchoAgent, STATS, faulty_app, serve_in_thread
from dialogsim.engine.contracts import AgentReply, EpisodeContext, Observation
from dialogsim.engine.events import EpisodeEnded
from dialogsim.engine.log import RunDir, read_events
from dialogsim.engine.session import RunConfig, start_run

CLI = [sys.executable, "-m", "dialogsim.engine.cli"]


def _run(*args: str, env: dict | None = None, timeout: float = 120, pre: tuple = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *pre, "run", "--no-progress", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _events(run_dir: Path) -> list:
    return sorted(read_events(run_dir), key=lambda e: (e.ep, e.seq, e.wall))


def _serve_subprocess(*args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([*CLI, "serve-agent", "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    line = proc.stdout.readline().strip()
    assert line.startswith("listening on "), line
    return proc, line.split()[-1]


@pytest.mark.slow
def test_a_batch_against_each_protocol_completes_with_tool_calls_logged(tmp_path):
    """`dialogsim run` against serve-agent (native, scripted agent) and an OpenAI-mode server completes."""
    proc, url = _serve_subprocess("--agent", "scripted", "--protocol", "native")
    try:
        native = _run("--scenarios", "builtin", "--user", "scripted", "--agent", f"http:{url}",
                      "--episodes", "6", "--out", str(tmp_path / "native"))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    # Chat requests carry no scenario, so the OpenAI side serves the echo agent (it calls a tool itself).
    with serve_in_thread(make_app(EchoAgent, "openai")) as url:
        openai = _run("--scenarios", "builtin", "--user", "scripted", "--agent", f"openai:{url}",
                      "--agent-model", "echo", "--episodes", "6", "--out", str(tmp_path / "openai"))
    for name, done in (("native", native), ("openai", openai)):
        assert done.returncode == 0, done.stderr
        events = _events(tmp_path / name)
        ends = [e for e in events if isinstance(e, EpisodeEnded)]
        assert len(ends) == 6 and {e.outcome for e in ends} == {"success"}
        kinds = Counter(type(e).__name__ for e in events)
        assert kinds["ToolCalled"] == kinds["ToolReturned"] >= 6 and kinds["Fault"] == 0


@pytest.mark.slow
def test_killed_mid_batch_then_resumed_ends_every_episode_exactly_once(tmp_path):
    """SIGKILL a run against a live server mid-batch; --resume finishes it with each episode ended once, as many
    at once as the run chose by default."""
    app = faulty_app(EchoAgent, "native", plan=lambda key, attempt: None, delay=0.05)
    out = tmp_path / "run"
    n = 60
    with serve_in_thread(app) as url:
        proc = subprocess.Popen([*CLI, "run", "--no-progress", "--scenarios", "builtin", "--user", "scripted",
                                 "--agent", f"http:{url}", "--episodes", str(n), "--agent-concurrency", "4",
                                 "--think", "0", "--latency", "0", "--out", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = b"".join(p.read_bytes() for p in (out / "events").glob("*.jsonl")) if (out / "events").exists() else b""
            if text.count(b'"episode_ended"') >= 5:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        before = [e for e in read_events(out, skip_corrupt=True) if isinstance(e, EpisodeEnded)]
        assert 5 <= len(before) < n, "the kill must land mid-batch"
        done = _run("--resume", str(out))
    assert done.returncode == 0, done.stderr
    assert RunDir.open(out).manifest["config"]["concurrency"] == 16  # the live default, recorded and resumed
    events = _events(out)
    ended = Counter(e.ep for e in events if isinstance(e, EpisodeEnded))
    assert sorted(ended) == [f"e{i:06d}" for i in range(n)] and set(ended.values()) == {1}
    for ep in ended:
        assert [e.seq for e in events if e.ep == ep] == list(range(sum(1 for e in events if e.ep == ep)))
    assert {e.outcome for e in events if isinstance(e, EpisodeEnded)} == {"success"}


@pytest.mark.slow
def test_a_live_agent_gets_four_episodes_in_flight_per_request_slot_unless_told(tmp_path):
    """Without --concurrency a run against a live agent has 4 episodes per agent slot in flight (recorded in the
    manifest and run_started) and keeps the slots full; an explicit value wins; in-process agents get 32."""
    app = faulty_app(EchoAgent, "native", plan=lambda key, attempt: None, delay=0.02)
    base = dict(scenarios="builtin", user="scripted", episodes=14, think="0", latency="0")
    with serve_in_thread(app) as url:
        live = dict(base, agent=f"http:{url}", agent_options={"concurrency": 3})
        runs = {name: start_run(tmp_path / name, RunConfig(**config), progress=False).run_dir for name, config in
                (("default", live), ("given", dict(live, concurrency=5)), ("local", dict(base, agent="scripted")))}
    assert app[STATS]["max_inflight"] == 3
    for name, chosen in (("default", 12), ("given", 5), ("local", 32)):
        (started,) = read_events(runs[name], types={"run_started"})
        assert RunDir.open(runs[name]).manifest["config"]["concurrency"] == started.config["concurrency"] == chosen


class _JitteryEcho(EchoAgent):
    """EchoAgent whose answers arrive after a random real delay, as a real service's would."""

    def start(self, ctx: EpisodeContext) -> None:
        super().start(ctx)
        self.jitter = random.Random()  # unseeded on purpose: real latency varies run to run

    async def respond(self, obs: Observation) -> AgentReply:
        import asyncio

        await asyncio.sleep(self.jitter.random() * 0.01)
        return super().respond(obs)


@pytest.mark.slow
def test_same_seed_against_a_deterministic_server_gives_the_same_log(tmp_path):
    """Two runs with one seed against a server with random real latency: identical events but for wall."""
    logs = []
    with serve_in_thread(make_app(_JitteryEcho, "native")) as url:
        for name in ("a", "b"):
            out = tmp_path / name
            done = _run("--scenarios", "builtin", "--user", "scripted", "--agent", f"http:{url}",
                        "--episodes", "12", "--concurrency", "6", "--seed", "7", "--out", str(out))
            assert done.returncode == 0, done.stderr
            logs.append([msgspec.json.encode(msgspec.structs.replace(e, wall=0)) for e in _events(out)])
    assert logs[0] == logs[1]
    assert len(logs[0]) > 12 * 5


@pytest.mark.slow
def test_the_api_key_never_reaches_the_run_directory_or_stderr(tmp_path):
    """--api-key-env: the key is sent as a Bearer token, and is absent from every file and log line."""
    secret = "sk-live-THIS-MUST-NOT-BE-LOGGED-42"
    app = faulty_app(EchoAgent, "native", plan=lambda key, attempt: "500" if attempt == 1 else None)
    out = tmp_path / "run"
    with serve_in_thread(app) as url:
        done = _run("--scenarios", "builtin", "--user", "scripted", "--agent",
                    f"http:{url}", "--episodes", "3", "--api-key-env", "DS_TEST_KEY", "--agent-opt",
                    "backoff_base=0.01", "--out", str(out), env={"DS_TEST_KEY": secret},
                    pre=("--log-level", "debug"))
    assert done.returncode == 0, done.stderr
    assert app[STATS]["authorization"] == {f"Bearer {secret}"}
    assert any(isinstance(e, EpisodeEnded) for e in read_events(out))
    assert sum(1 for e in read_events(out) if type(e).__name__ == "Fault") > 0
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files and all(secret.encode() not in p.read_bytes() for p in files)
    assert "agent request failed, retrying" in done.stderr  # the faults did reach the operational log
    assert secret not in done.stderr + done.stdout
    assert "DS_TEST_KEY" in (RunDir.open(out).manifest["config"]["agent_options"]["api_key_env"])


@pytest.mark.slow
def test_a_batch_against_a_faulty_server_completes_with_every_fault_in_the_run_directory(tmp_path):
    """`dialogsim run` against the fault-injecting server: all episodes end once, every fault is logged."""
    from dialogsim.agents.http.testing import INJECTED

    app = faulty_app(EchoAgent, "native", hang_seconds=1.0, drip_chunks=10, drip_delay=0.1)
    out = tmp_path / "run"
    with serve_in_thread(app) as url:
        done = _run("--scenarios", "builtin", "--user", "scripted", "--agent", f"http:{url}", "--episodes", "12",
                    "--agent-timeout", "0.6", "--agent-opt", "read_timeout=0.3", "--agent-opt", "backoff_base=0.01",
                    "--agent-opt", "max_response_bytes=65536", "--out", str(out))
    assert done.returncode == 0, done.stderr
    events = _events(out)
    ended = Counter(e.ep for e in events if isinstance(e, EpisodeEnded))
    assert len(ended) == 12 and set(ended.values()) == {1}
    assert {e.outcome for e in events if isinstance(e, EpisodeEnded)} == {"success"}
    faults = [e for e in events if type(e).__name__ == "Fault"]
    assert len(faults) == len(app[INJECTED]) > 0 and {f.who for f in faults} == {"agent"}
