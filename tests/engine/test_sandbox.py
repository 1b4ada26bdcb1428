"""The sandbox for untrusted code: results, limits, and the attacks of issue #18 (each fails, nothing leaks)."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from dialogsim.engine.sandbox import (Limits, SandboxPool, SandboxServer, UID_BASE, isolation_available, run_python,
                                      sandbox_uid)

FAILING_TESTS = "\n\nassert remove_Occ('hello', 'l') == 'heo'\n"  # an MBPP assert the attacks never satisfy
QUICK = Limits(timeout=1.5)


def leftover_processes() -> list[str]:
    """Processes still running under one of this test process's sandbox uids."""
    mine = range(sandbox_uid(0), sandbox_uid(0) + 256)
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
            if uid in mine:
                found.append(entry.name)
    return found


def needs(*parts: str) -> None:
    """Skip unless the sandbox gets these kinds of isolation on this machine."""
    missing = [p for p in parts if p not in isolation_available()]
    if missing:
        pytest.skip(f"the sandbox gets no {', '.join(missing)} isolation here (not root, or no namespaces)")


def test_exit_status_decides_and_output_is_kept():
    """Exit 0 passes; a failed assert, sys.exit(3) and SystemExit('text') do not; stdout and stderr are kept."""
    ok = run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert ok.passed and ok.exit_code == 0 and b"out\n" in ok.output and b"err\n" in ok.output
    with SandboxPool(2) as pool:
        failed, three, text = pool.map(["assert 1 == 2", "import sys\nsys.exit(3)", "raise SystemExit('bye')"])
    assert (failed.exit_code, three.exit_code, text.exit_code) == (1, 3, 1)
    assert b"AssertionError" in failed.output and b"bye" in text.output
    assert not any(r.passed for r in (failed, three, text))


def test_program_runs_as_a_script_in_a_fresh_directory_without_environment(monkeypatch):
    """__name__ is __main__, the cwd is an empty directory that is also HOME, and the environment is empty."""
    monkeypatch.setenv("DIALOGSIM_PROBE", "x")
    result = run_python("import os, sys\nprint(__name__, os.getcwd() == os.environ['HOME'], sorted(os.listdir()),"
                        " sorted(os.environ))")
    assert result.output.decode() == "__main__ True ['program.py'] ['HOME', 'LANG', 'PATH', 'TMPDIR']\n"


@pytest.mark.slow
def test_infinite_loop_times_out_and_scores_nothing():
    """A program that never ends is killed at the wall-clock timeout."""
    start = time.monotonic()
    result = run_python("while True:\n    pass\n" + FAILING_TESTS, QUICK)
    assert result.timed_out and not result.passed and result.signal == 9
    assert time.monotonic() - start < QUICK.timeout + 3


@pytest.mark.slow
def test_fork_bomb_is_contained_and_leaves_nothing_running():
    """A fork bomb meets the process limit, is killed at the timeout, leaves no process, and the pool goes on."""
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n" + FAILING_TESTS
    with SandboxPool(2, QUICK) as pool:
        results = list(pool.map([bomb, "assert 1 + 1 == 2"]))
    assert not results[0].passed and results[0].timed_out
    assert results[1].passed
    assert leftover_processes() == []


def test_children_that_leave_the_process_group_are_killed_too():
    """A child that calls setsid() and sleeps does not survive its program."""
    needs("pid")
    program = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n")
    result = run_python(program, QUICK)
    assert result.passed
    assert leftover_processes() == []


def test_ten_gigabyte_allocation_fails():
    """Allocating 10 GB raises MemoryError under the address-space limit."""
    result = run_python("x = bytearray(10 * 1024 ** 3)\n" + FAILING_TESTS)
    assert not result.passed and b"MemoryError" in result.output


def test_rm_rf_home_removes_nothing_outside(tmp_path, monkeypatch):
    """`rm -rf ~` with the host's HOME set to a temporary home only empties the sandbox's own directory."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "keep.txt").write_text("precious")
    monkeypatch.setenv("HOME", str(home))
    program = "import os\nos.system('rm -rf ~')\n"
    if "uid" in isolation_available():  # its own uid cannot touch root's files even by name
        program += f"os.system('rm -rf {home}')\n"
    result = run_python(program + FAILING_TESTS)
    assert not result.passed
    assert (home / "keep.txt").read_text() == "precious"


def test_environment_secrets_do_not_reach_the_program(monkeypatch):
    """A secret in the host's environment is neither in the program's environment nor readable from /proc."""
    secret = "s3cret-dialogsim-value"
    monkeypatch.setenv("DIALOGSIM_TEST_SECRET", secret)
    digest = hashlib.sha256(secret.encode()).hexdigest()  # the program must not quote the secret itself
    program = ("import hashlib, os\nfound = os.environ.get('DIALOGSIM_TEST_SECRET', '')\nprint(found)\n"
               f"assert hashlib.sha256(found.encode()).hexdigest() == {digest!r}\n")
    if "uid" in isolation_available():  # the host's processes' environments are not readable either
        program = ("import os\nfor pid in os.listdir('/proc'):\n    try:\n"
                   "        data = open(f'/proc/{pid}/environ', 'rb').read()\n    except OSError:\n        continue\n"
                   "    if b'DIALOGSIM_TEST_SECRET' in data:\n        print(data)\n") + program
    result = run_python(program)
    assert not result.passed
    assert secret.encode() not in result.output


@pytest.mark.slow
def test_no_network(tmp_path):
    """A server on the host's loopback cannot be reached from inside."""
    needs("network")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.1)
    port = server.getsockname()[1]
    accepted = []

    def accept() -> None:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and not accepted:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                pass

    waiter = threading.Thread(target=accept)
    waiter.start()
    result = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n")
    waiter.join()
    server.close()
    assert not result.passed and not accepted
    assert b"OSError" in result.output or b"Error" in result.output


def test_files_written_to_tmp_stay_inside():
    """A file written to /tmp goes to the sandbox's private tmpfs, not to the host's /tmp."""
    needs("mount")
    name = f"/tmp/dialogsim-escape-{os.getpid()}"
    result = run_python(f"open({name!r}, 'w').write('x')\nopen('here.txt', 'w').write('y')\n")
    assert result.passed
    assert not Path(name).exists()


def test_output_is_capped_and_the_program_unaffected():
    """Output beyond max_output is dropped (the program still finishes normally)."""
    result = run_python("print('x' * 1_000_000)", Limits(max_output=1000))
    assert result.passed and result.truncated and result.output == b"x" * 1000


def test_pool_keeps_order_and_uses_one_uid_per_worker():
    """map returns results in the order of the programs; each concurrent program has its own uid."""
    programs = [f"import sys\nsys.exit({i % 3})" for i in range(12)]
    with SandboxPool(3) as pool:
        codes = [r.exit_code for r in pool.map(programs)]
        uids = {int(r.output) for r in pool.map(["import os\nprint(os.getuid())"] * 12)}
    assert codes == [i % 3 for i in range(12)]
    if "uid" in isolation_available():
        assert len(uids) <= 3 and all(UID_BASE <= uid for uid in uids) and 0 not in uids


def test_killing_the_server_kills_the_program():
    """When the host kills a sandbox server (its last resort), the running program dies with it."""
    needs("pid")
    server = SandboxServer(sandbox_uid(200))
    results = []
    runner = threading.Thread(target=lambda: results.append(server.run("import time\ntime.sleep(60)", QUICK)))
    runner.start()
    deadline = time.monotonic() + 10
    while not leftover_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftover_processes(), "the program never started"
    server.close(kill=True)
    runner.join()
    deadline = time.monotonic() + 5
    while leftover_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftover_processes() == [] and not results[0].passed
