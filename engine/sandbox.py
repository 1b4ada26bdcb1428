"""Running untrusted Python (model-written code) in separate, confined processes, on every core.

``SandboxPool(workers).map(sources)`` runs programs and returns how each ended (``SandboxResult``:
exit code, timeout, the first bytes of output); ``run_python(source)`` runs one. Each worker keeps one
sandbox server (``sandbox_child.py``, a ``python -I -S`` without environment or site-packages) that forks
a fresh, confined process per program. What is enforced, and where:

- always: a separate process per program; a wall-clock timeout (5 s by default) after which the program
  and everything it started are killed; rlimits on CPU time, address space (1 GiB), file size, core
  dumps and processes; an empty environment (HOME and TMPDIR are the program's own fresh directory, which
  is its working directory); stdin from /dev/null; stdout and stderr through a pipe of which only the
  first ``max_output`` bytes are kept; no new privileges (setuid binaries do not elevate);
- as root: an unprivileged uid of its own per concurrent program (the process limit counts per uid,
  and root is exempt from it; the uid cannot read or change root's files nor signal other processes);
  and where the kernel allows namespaces: no network (a new, empty network namespace), a PID namespace
  under a trusted PID 1 (when the program ends, is killed at the timeout, or its supervisor dies, every
  process it forked dies too, also those that left its process group), a private tmpfs on /tmp, /var/tmp
  and /dev/shm (the working directory lives there: nothing is written to the host's disk), the standard
  library bound read-only. Without namespaces, as root, every process of the program's uid is killed
  afterwards; and a program is refused (``SandboxResult.error``) rather than run as root when no uid can
  be dropped to (the standard library unreadable by other users and no mount namespace to show it);
- not root: a fresh directory under TMPDIR, removed afterwards; the process limit is the user's own
  RLIMIT_NPROC (shared with the user's other processes); the network is reachable, the program can read
  what the user can, and a process that leaves its process group can outlive the timeout.

``SandboxResult.isolation`` lists what a run got: "network", "pid", "ipc", "mount", "uid".
"""

from __future__ import annotations

import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import msgspec

CHILD_SCRIPT = str(Path(__file__).with_name("sandbox_child.py"))
UID_BASE = 2_000_000_000  # sandbox uids: UID_BASE + (pid & 0xFFFF) * 256 + slot, far from real users
GRACE = 5.0  # seconds beyond the timeout for set-up and teardown before the host kills the server


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """What one program may use."""

    timeout: float = 5.0  # wall-clock seconds
    memory_mb: int = 1024  # address space
    max_processes: int = 32  # processes and threads of the program's uid
    max_output: int = 64 * 1024  # bytes of stdout+stderr kept
    file_size_mb: int = 16  # largest file the program may write
    tmpfs_mb: int = 64  # size of each private tmpfs


class SandboxResult(msgspec.Struct, kw_only=True):
    """How a program ended: exit code (None when a signal killed it), timeout, output, isolation it got."""

    exit_code: int | None
    signal: int | None = None
    timed_out: bool = False
    output: bytes = b""
    truncated: bool = False
    isolation: list[str] = []
    error: str | None = None  # the sandbox itself failed (the program may not have run)

    @property
    def passed(self) -> bool:
        """Exit status 0 within the time limit."""
        return self.exit_code == 0 and not self.timed_out and self.error is None


class SandboxServer:
    """One ``sandbox_child.py`` process that runs one program at a time; restarted when it fails."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        self.proc: subprocess.Popen | None = None

    def run(self, source: str, limits: Limits) -> SandboxResult:
        """Run one program and wait for its result."""
        data = source.encode("utf-8", "surrogatepass")
        header = (f"{limits.timeout!r} {int(limits.timeout) + 1} {limits.memory_mb << 20} {limits.max_processes} "
                  f"{limits.file_size_mb << 20} {self.uid} {limits.tmpfs_mb << 20} {limits.max_output} {len(data)}\n")
        proc = self._started()
        try:
            proc.stdin.write(header.encode() + data)
            proc.stdin.flush()
            answer = _read_answer(proc.stdout.fileno(), time.monotonic() + limits.timeout + GRACE)
        except OSError as exc:
            answer = None
            problem = f"sandbox server failed: {exc}"
        else:
            problem = "sandbox server did not answer in time"
        if answer is None:
            self.close(kill=True)
            return SandboxResult(exit_code=None, timed_out=True, error=problem)
        return answer

    def _started(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", CHILD_SCRIPT], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         env={"TMPDIR": tempfile.gettempdir()}, cwd="/", start_new_session=True)
        return self.proc

    def close(self, kill: bool = False) -> None:
        """Stop the server (at once with ``kill``, else after its current program)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if kill:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        proc.wait()


def _read_answer(fd: int, deadline: float) -> SandboxResult | None:
    """The server's answer (a header line and the output), or None if it does not come by ``deadline``."""
    data = bytearray()
    need = None
    while need is None or len(data) < need:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise OSError("the server exited")
        data += chunk
        if need is None and b"\n" in data:
            end = data.index(b"\n") + 1
            need = end + int(data[:end].split()[-1])
    return _parse_answer(bytes(data))


def _parse_answer(data: bytes) -> SandboxResult:
    # "exit CODE|signal N|error 0 timeout 0|1 truncated 0|1 isolation A,B|- LENGTH\n" + output
    line, output = data.split(b"\n", 1)
    kind, value, _, timed_out, _, truncated, _, isolation, _ = line.decode("ascii").split()
    return SandboxResult(exit_code=int(value) if kind == "exit" else None,
                         signal=int(value) if kind == "signal" else None,
                         timed_out=timed_out == "1", output=output, truncated=truncated == "1",
                         isolation=[] if isolation == "-" else isolation.split(","),
                         error=output.decode("utf-8", "replace").strip() if kind == "error" else None)


def default_workers() -> int:
    """Two sandboxes per core: setting one up waits on the kernel (a network namespace) more than it computes."""
    return 2 * (os.cpu_count() or 1)


class SandboxPool:
    """Runs programs on ``workers`` threads (default: two per core), each with its own sandbox server."""

    def __init__(self, workers: int | None = None, limits: Limits = Limits()) -> None:
        self.workers = workers or default_workers()
        self.limits = limits
        self._servers: queue.SimpleQueue[SandboxServer] = queue.SimpleQueue()
        self._slots = _reserve_slots(self.workers)
        for slot in self._slots:
            self._servers.put(SandboxServer(sandbox_uid(slot)))
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")

    def submit(self, source: str) -> Future[SandboxResult]:
        """Run one program; its result when done."""
        return self._executor.submit(self._run, source)

    def map(self, sources: Iterable[str]) -> Iterator[SandboxResult]:
        """Run every program, results in the order of ``sources``."""
        return self._executor.map(self._run, sources)

    def _run(self, source: str) -> SandboxResult:
        server = self._servers.get()
        try:
            return server.run(source, self.limits)
        finally:
            self._servers.put(server)

    def close(self) -> None:
        """Wait for the running programs, then stop the servers and threads."""
        self._executor.shutdown(wait=True)
        while not self._servers.empty():
            self._servers.get().close()
        _release_slots(self._slots)
        self._slots = []

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_python(source: str, limits: Limits = Limits()) -> SandboxResult:
    """Run one program in the sandbox (a pool of one: use a ``SandboxPool`` for many)."""
    with SandboxPool(1, limits) as pool:
        return pool.submit(source).result()


def sandbox_uid(slot: int) -> int:
    """The uid of a program run in ``slot`` (0-255) by this process, when the host is root."""
    return UID_BASE + ((os.getpid() & 0xFFFF) << 8) + slot


_free_slots = set(range(256))  # one slot per concurrent program of this process, so one uid each
_slots_lock = threading.Lock()


def _reserve_slots(n: int) -> list[int]:
    with _slots_lock:
        if n > len(_free_slots):
            raise ValueError(f"no {n} free sandbox slots left in this process (256 at most)")
        taken = sorted(_free_slots)[:n]
        _free_slots.difference_update(taken)
    return taken


def _release_slots(slots: list[int]) -> None:
    with _slots_lock:
        _free_slots.update(slots)


@lru_cache(maxsize=1)
def isolation_available() -> tuple[str, ...]:
    """What a sandboxed program gets on this machine ("network", "pid", "ipc", "mount", "uid"), probed once."""
    return tuple(run_python("pass", Limits(timeout=10.0)).isolation)
