"""The inner side of ``engine.sandbox``: a small server, ``python -I -S sandbox_child.py``, that runs programs.

Standalone (stdlib only, nothing from dialogsim): it runs without site-packages, so that the programs do
not see them either. It never runs a program itself: for each request it forks a supervisor, which
isolates itself as far as the machine allows (as root: new network, PID, mount and IPC namespaces, a
private tmpfs on /tmp holding the working directory; otherwise a fresh temporary directory) and forks the
program's process, which takes rlimits and (as root) an unprivileged uid of its own and runs the program.
The supervisor keeps the first bytes of the program's output, kills it at the wall-clock timeout, and
answers. Forking from this warm interpreter instead of starting one per program is what makes scoring fast.

Protocol on stdin/stdout, one request at a time:
  request:  ``timeout cpu_seconds memory_bytes max_processes file_size_bytes uid tmpfs_bytes max_output
            length\\n`` and ``length`` bytes of program source;
  answer:   ``exit CODE|signal N|error 0 timeout 0|1 truncated 0|1 isolation A,B,...|- length\\n`` and
            ``length`` bytes of output (stdout and stderr together).
"""

import builtins
import os
import resource
import select
import signal
import stat
import sys
import time

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 1 << 14, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable places get a private tmpfs each
STDLIB_VIEW = "/tmp/.stdlib"  # the standard library, bound read-only where the program's uid can read it
ENV_PATH = "/usr/local/bin:/usr/bin:/bin"
AFTER_KILL = 1.0  # seconds to wait for the output to end once the program was killed
STDLIB = os.path.dirname(os.__file__)


def serve():
    """Answer requests until stdin closes."""
    libc = load_libc()
    root = libc is not None and os.geteuid() == 0
    requests = os.fdopen(0, "rb", buffering=0)
    while True:
        header = read_line(requests)
        if not header:
            return
        *numbers, length = [float(x) if i == 0 else int(x) for i, x in enumerate(header.split())]
        source = read_exactly(requests, length)
        supervisor = os.fork()
        if supervisor == 0:
            try:
                answer = supervise(libc, root, source, *numbers)
            except BaseException as exc:  # the supervisor's own failure, never the program's
                body = f"sandbox: {type(exc).__name__}: {exc}\n".encode()
                answer = f"error 0 timeout 0 truncated 0 isolation - {len(body)}\n".encode() + body
            write_all(1, answer)
            os._exit(0)
        os.waitpid(supervisor, 0)


def load_libc():
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True)
    except (ImportError, OSError):
        return None


def read_line(stream):
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = stream.read(1)
        if not byte:
            return b""
        line += byte
    return bytes(line)


def read_exactly(stream, length):
    data = bytearray()
    while len(data) < length:
        chunk = stream.read(length - len(data))
        if not chunk:
            raise SystemExit("sandbox: request cut short")
        data += chunk
    return bytes(data)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def supervise(libc, root, source, timeout, cpu, memory, nproc, fsize, uid, tmpfs, max_output):
    """In the supervisor: isolate, run the program in its own process, and describe how it ended."""
    isolation = isolate(libc, tmpfs) if root else []
    if root:
        if "mount" not in isolation and not readable_by_anyone(STDLIB):
            raise PermissionError(f"refusing to run a program as root: no mount namespace here, and other users "
                                  f"cannot read the standard library at {STDLIB}, so there is no uid to drop to")
        isolation.append("uid")
    if "mount" in isolation:
        workdir = "/tmp/sandbox"
        os.mkdir(workdir, 0o700)
    else:
        workdir = fresh_directory()
    program = os.path.join(workdir, "program.py")
    with open(program, "wb") as f:
        f.write(source)
    if root:
        os.chown(workdir, uid, uid)
    out_read, out_write = os.pipe()

    def start():  # the program's process, confined (it closes every other descriptor); returns its pid
        pid = os.fork()
        if pid == 0:
            try:
                confine(libc, uid if "uid" in isolation else None, workdir, out_write, cpu, memory, nproc, fsize)
            except BaseException:
                os._exit(126)  # never run a program that is not confined
            run(program)  # does not return
        os.close(out_write)
        return pid

    if "pid" in isolation:
        output, truncated, status, timed_out = run_in_namespace(start, out_read, out_write, timeout, max_output)
    else:
        pid = start()
        output, truncated, status, timed_out = watch(pid, out_read, timeout, max_output, own_group=True)
        kill_leftovers(uid if "uid" in isolation else None, pid)
    status = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.waitstatus_to_exitcode(status)}"
    if "mount" not in isolation:  # a directory on the host's disk (a private tmpfs vanishes by itself)
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    head = (f"{status} timeout {int(timed_out)} truncated {int(truncated)} "
            f"isolation {','.join(isolation) or '-'} {len(output)}\n")
    return head.encode() + output


def run_in_namespace(start, out_read, out_write, timeout, max_output):
    """Run the program under a trusted PID 1 of its namespace, which ends the namespace (killing every process
    in it) when the program exits, when the supervisor kills it at the timeout, or when the supervisor dies."""
    status_read, status_write = os.pipe()
    life_read, life_write = os.pipe()  # the supervisor holds the write end: EOF means it is gone
    init = os.fork()
    if init == 0:
        try:
            os.close(out_read)
            os.close(status_read)
            os.close(life_write)
            namespace_init(start(), life_read, status_write)
        finally:
            os._exit(1)  # never back into the supervisor's code (its answer goes to the server's stdout)
    os.close(out_write)
    os.close(status_write)
    os.close(life_read)
    output, truncated, _, timed_out = watch(init, out_read, timeout, max_output, own_group=False)
    os.close(life_write)
    with os.fdopen(status_read, "rb") as f:
        reported = f.read()
    return output, truncated, int(reported) if reported else signal.SIGKILL, timed_out


def namespace_init(program, life, report):
    """PID 1 of the program's namespace: wait for the program (or the supervisor's end), report, exit."""
    poller = select.poll()
    poller.register(life, select.POLLIN)
    try:
        poller.register(os.pidfd_open(program), select.POLLIN)
        wait = None
    except (AttributeError, OSError):
        wait = 10  # ms between checks of the program's exit
    while True:
        for fd, _ in poller.poll(wait):
            if fd == life:
                os._exit(1)
        done, status = os.waitpid(program, os.WNOHANG)
        if done:
            write_all(report, str(status).encode())
            os._exit(0)


def isolate(libc, tmpfs_bytes):
    """New namespaces for what follows (the program's process is PID 1 of the new PID namespace); [] if refused."""
    if libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC) != 0:
        return []
    isolation = ["network", "pid", "ipc"]
    # mounts made from here on stay in this namespace (the host's propagation could be shared)
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return isolation
    # the standard library may sit where the program's uid cannot go (/root/.pyenv, say) or under /tmp:
    # held open now, it is bound read-only into the private /tmp and the import paths point there
    held = os.open(STDLIB, os.O_PATH | os.O_DIRECTORY)
    options = f"size={tmpfs_bytes},mode=1777".encode()
    for target in PRIVATE_TMP:
        if os.path.isdir(target):
            if libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
                if target == "/tmp":
                    return isolation
    os.mkdir(STDLIB_VIEW, 0o755)
    if (libc.mount(f"/proc/self/fd/{held}".encode(), STDLIB_VIEW.encode(), None, MS_BIND | MS_REC, None) != 0
            or libc.mount(None, STDLIB_VIEW.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY, None) != 0):
        return isolation
    os.close(held)
    point_imports_at(STDLIB_VIEW)
    isolation.append("mount")
    return isolation


def point_imports_at(view):
    """Import the standard library from ``view``: sys.path and the packages already imported."""
    def moved(paths):
        return [view + p[len(STDLIB):] if p == STDLIB or p.startswith(STDLIB + "/") else p for p in paths]
    sys.path[:] = moved(sys.path)
    for module in list(sys.modules.values()):
        if isinstance(getattr(module, "__path__", None), list):
            module.__path__[:] = moved(module.__path__)
    sys.path_importer_cache.clear()


def readable_by_anyone(path):
    """Whether a user with no rights of its own can list ``path`` (and search every directory above it)."""
    if not os.stat(path).st_mode & stat.S_IROTH:
        return False
    while True:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def fresh_directory():
    base = os.environ.get("TMPDIR") or "/tmp"
    for attempt in range(100):
        path = os.path.join(base, f"dialogsim-sandbox-{os.getpid()}-{attempt}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise OSError(f"cannot make a directory in {base}")


def confine(libc, uid, workdir, output, cpu, memory, nproc, fsize):
    """The program's process: its own process group, rlimits, no privileges, an empty environment."""
    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.closerange(3, 1 << 16)
    limit(resource.RLIMIT_CPU, cpu)
    limit(resource.RLIMIT_AS, memory)
    limit(resource.RLIMIT_FSIZE, fsize)
    limit(resource.RLIMIT_CORE, 0)
    limit(resource.RLIMIT_NPROC, nproc)  # counted per uid, and not enforced for root
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if libc is not None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid, which clears it
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary gives privileges back
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(HOME=workdir, TMPDIR=workdir, PATH=ENV_PATH, LANG="C.UTF-8")


def limit(kind, value):
    """Set soft and hard limit to ``value``, or to the hard limit already in place if that is lower."""
    hard = resource.getrlimit(kind)[1]
    if hard != resource.RLIM_INFINITY and hard < value:
        value = hard
    resource.setrlimit(kind, (value, value))


def run(program):
    """Run the program as ``python program.py`` would, and exit as that interpreter would (never returns)."""
    sys.argv = [program]
    main = type(sys)("__main__")  # a fresh __main__, as runpy would make it, without importing runpy
    main.__file__, main.__cached__, main.__builtins__ = program, None, builtins
    sys.modules["__main__"] = main
    code = 0
    try:
        with open(program, "rb") as f:
            compiled = compile(f.read(), program, "exec", dont_inherit=True)
        exec(compiled, main.__dict__)
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    # what the interpreter does at exit, in its order: join threads, run atexit callbacks, flush
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        code = code or 120  # as Python does when flushing stdout fails at exit
    os._exit(code)


def exit_code(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def watch(pid, output, timeout, max_output, own_group):
    """Collect the output of process ``pid`` (the first ``max_output`` bytes) and its wait status, killing it at
    the timeout: (output, truncated, status, timed out)."""
    kept = bytearray()
    truncated = False
    poller = select.poll()
    poller.register(output, select.POLLIN)
    try:
        pidfd = os.pidfd_open(pid)
        poller.register(pidfd, select.POLLIN)
    except (AttributeError, OSError):  # no pidfd: the exit is checked between short polls instead
        pidfd = None
    status = None
    reading = True
    killed = False
    end = time.monotonic() + timeout
    while reading or status is None:
        left = end - time.monotonic()
        if left <= 0:
            if killed:
                break  # the output stays open (processes outside the program's group): give it up
            terminate(pid, own_group)
            killed = True
            end = time.monotonic() + AFTER_KILL
            continue
        for fd, _ in poller.poll(min(left, 0.01) * 1000 if pidfd is None else left * 1000):
            if fd == output:
                chunk = os.read(output, 65536)
                if not chunk:
                    poller.unregister(output)
                    reading = False
                else:
                    room = max_output - len(kept)
                    if room > 0:
                        kept += chunk[:room]
                    truncated = truncated or len(chunk) > room
        if status is None:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = raw
                if pidfd is not None:
                    poller.unregister(pidfd)
    if status is None:
        status = os.waitpid(pid, 0)[1]
    if pidfd is not None:
        os.close(pidfd)
    os.close(output)
    return bytes(kept), truncated, status, killed


def terminate(pid, own_group):
    for target in (pid, -pid) if own_group else (pid,):
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_leftovers(uid, pid):
    """Without a PID namespace: kill what the program left running (as root, every process of its uid)."""
    terminate(pid, True)
    if uid is not None:  # every process of the sandbox's own uid, also those that left the group
        killer = os.fork()
        if killer == 0:
            os.setuid(uid)
            try:
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(killer, 0)


if __name__ == "__main__":
    serve()
