"""Projections: named, versioned pure folds over one episode's events, plus a pure render of all outputs.

A projection has a ``name`` and a ``version``; ``fold(events)`` turns one finished episode's events into a
JSON-ready output (or None), and ``render(outputs)`` turns the raw JSON of every output, in order, into
``(relative file name, bytes)`` pairs (or an iterator of byte chunks in place of the bytes, written in
order, so that a large file need not be held whole). Neither does I/O: ``run_projection`` reads the log, keeps the
per-episode outputs in a checkpoint beside the files, and writes the files. Layout of an output dir
(default ``RUN_DIR/projections/<name>@v<k>/``)::

    <files the render produced>
    .checkpoint/meta.json      projection, version, run id, fold options, shard sizes read, files written,
                               and per shard the byte offset the next run reads on from
    .checkpoint/outputs.jsonl  one {"ep": ..., "out": ...} line per processed episode, in processing order
    .checkpoint/lock           held (flock) while a run writes, so a second concurrent run is refused

A second run on a grown log reads each shard from the recorded offset (the end of what was read, or the
first event of an episode that had not ended then), folds only the episodes not in outputs.jsonl and
re-renders from the stored outputs, so neither the read nor the merge needs the old episodes' events
again. Outputs are ordered by the order in which their episodes were first processed (the log order of
episode ends), so files stay stable as a log grows. Changing the fold options (e.g. ``--sgdx``) or ``--rebuild`` starts the checkpoint afresh.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Callable, Protocol

import msgspec

try:
    import fcntl
except ImportError:  # not POSIX: no lock, concurrent runs on one output dir are the caller's business
    fcntl = None  # type: ignore[assignment]

from .errors import UserError
from .log import RunDir, read_episodes_from, repair_torn_tail
from .oplog import get_logger

_log = get_logger("projections")

CHECKPOINT_DIR = ".checkpoint"


class Projection(Protocol):
    """What ``run_projection`` needs from a projection.

    A projection plug-in (registry kind ``projection``) is a factory ``factory(options) -> Projection``; for
    ``dialogsim project RUN --to NAME OPTIONS...`` it may also define ``add_arguments(parser)`` and
    ``from_arguments(args) -> Projection``, which read its own command-line options (files, say) so that the
    projection itself stays pure. Optional hooks: ``bind_run(run)``, called with the RunDir before any fold,
    for run-level facts (the run's wall start, its recorded config); ``summary() -> str``, printed after a
    run; ``publish(out_dir, files) -> str``, called after the files are written (sending them somewhere).
    """

    name: str
    version: int

    def fold_options(self) -> dict[str, Any]:
        """The options that change fold outputs; a checkpoint made with other options is refolded."""
        ...

    def fold(self, events: list[Any]) -> Any:
        """One finished episode's events -> a msgspec-encodable output, or None to contribute nothing."""
        ...

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, bytes | Iterable[bytes]]]:
        """The raw JSON of every non-None output, in order -> the files to write (bytes, or chunks in order)."""
        ...


class _Line(msgspec.Struct):
    ep: str
    out: msgspec.Raw


class _OutLine(msgspec.Struct):
    ep: str
    out: Any


_line_decoder = msgspec.json.Decoder(_Line)
_encoder = msgspec.json.Encoder()


class ProjectionReport(msgspec.Struct, kw_only=True):
    """What one projection run did."""

    out_dir: str
    episodes_total: int
    episodes_new: int
    files: list[str]
    rebuilt: bool
    corrupt: int = 0  # corrupt event lines skipped (with skip_corrupt)
    bytes_read: int = 0  # of the event log


def default_out_dir(run: RunDir, projection: Projection) -> Path:
    """``RUN_DIR/projections/<name>@v<version>``."""
    return run.projections_dir / f"{projection.name}@v{projection.version}"


def _read_lines(path: Path) -> Iterator[_Line]:
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield _line_decoder.decode(line)
            except msgspec.MsgspecError:
                raise UserError(f"{path}: line {lineno}: corrupt checkpoint line; rerun with --rebuild") from None


def run_projection(run_dir: str | Path | RunDir, projection: Projection, out_dir: str | Path | None = None, *,
                   rebuild: bool = False, skip_corrupt: bool = False,
                   progress: Callable[[int], None] | None = None) -> ProjectionReport:
    """Fold the episodes not yet in the checkpoint, then render every stored output into ``out_dir``."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir.open(run_dir)
    bind_run = getattr(projection, "bind_run", None)
    if bind_run is not None:
        bind_run(run)
    out = Path(out_dir) if out_dir is not None else default_out_dir(run, projection)
    ckpt = out / CHECKPOINT_DIR
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory; choose another --out")
    if out.exists() and not (ckpt / "meta.json").exists() and not rebuild and \
            any(p.name != CHECKPOINT_DIR for p in out.iterdir()):
        raise UserError(f"{out}: exists, is not empty and is not a projection output; choose another --out")
    ckpt.mkdir(parents=True, exist_ok=True)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # folds build many acyclic objects: cycle collection only costs time here
    try:
        with _exclusive(ckpt / "lock", out):
            return _run(run, projection, out, rebuild=rebuild, skip_corrupt=skip_corrupt, progress=progress)
    finally:
        if gc_was_enabled:
            gc.enable()


@contextlib.contextmanager
def _exclusive(path: Path, out: Path) -> Iterator[None]:
    # two projection runs on one output dir would interleave checkpoint lines: the second one is refused
    with open(path, "a+b") as handle:
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UserError(f"{out}: another projection run is writing there; wait for it to finish") from None
        yield


def _run(run: RunDir, projection: Projection, out: Path, *, rebuild: bool, skip_corrupt: bool,
         progress: Callable[[int], None] | None) -> ProjectionReport:
    ckpt = out / CHECKPOINT_DIR
    meta_path, outputs_path = ckpt / "meta.json", ckpt / "outputs.jsonl"
    meta = {"projection": projection.name, "version": projection.version, "run_id": run.manifest.get("run_id"),
            "fold_options": projection.fold_options(), "files": []}
    old = _read_meta(meta_path, tolerant=rebuild)
    if old is not None and old.get("run_id") != meta["run_id"] and not rebuild:
        raise UserError(f"{out}: holds a projection of run {old.get('run_id')!r}, not {meta['run_id']!r}; "
                        "choose another --out or pass --rebuild")
    fresh = (rebuild or old is None or old.get("projection") != projection.name
             or old.get("version") != projection.version or old.get("fold_options") != meta["fold_options"])
    if fresh and old is not None:
        _log.info("checkpoint reset", out=str(out), reason="rebuild" if rebuild else "projection or options changed")
    if fresh:
        if outputs_path.exists():
            outputs_path.unlink()
        # record the new options before folding, so a crash mid-run cannot leave outputs of these options
        # under a meta of other ones (the old file list is kept for stale-file cleanup)
        _write_atomic(meta_path, _meta_bytes({**meta, "files": [] if old is None else old.get("files", [])}))
    done: set[str] = set()
    if outputs_path.exists():
        repair_torn_tail(outputs_path)
        done = {line.ep for line in _read_lines(outputs_path)}
    before = len(done)
    new = 0
    buffer = bytearray()
    # shard sizes before reading: when a later run sees the same sizes, the log has not grown
    meta["log"] = {str(p.relative_to(run.path)): p.stat().st_size for p in run.shards()}
    read_stats: dict[str, int] = {}
    # the checkpoint matches the outputs when it counts as many episodes (a crash between writing outputs
    # and meta leaves it behind): then the log is read on from where the last run could stop
    consistent = not fresh and old is not None and old.get("episodes") == len(done)
    unchanged = consistent and old.get("log") == meta["log"]
    start = old.get("offsets") if consistent and isinstance(old.get("offsets"), dict) else {}
    meta["offsets"] = dict(start) if unchanged else {}
    with open(outputs_path, "ab") as sink:
        for events in () if unchanged else read_episodes_from(run, start, meta["offsets"], done=done,
                                                               skip_corrupt=skip_corrupt, stats=read_stats):
            ep = events[0].ep
            if ep in done:
                continue
            done.add(ep)
            output = projection.fold(events)
            _encoder.encode_into(_OutLine(ep, output), buffer, -1)
            buffer += b"\n"
            new += 1
            if len(buffer) >= 1 << 20:
                sink.write(buffer)
                buffer.clear()
            if progress is not None:
                progress(1)
        sink.write(buffer)
    files = _write_files(out, projection.render(_stored_outputs(outputs_path)),
                         stale=[] if old is None else old.get("files", []))
    meta["files"] = files
    meta["episodes"] = before + new
    _write_atomic(meta_path, _meta_bytes(meta))
    _log.info("projection written", projection=f"{projection.name}@v{projection.version}", out=str(out),
              episodes=before + new, new=new)
    return ProjectionReport(out_dir=str(out), episodes_total=before + new, episodes_new=new, files=files,
                            rebuilt=fresh and old is not None, corrupt=read_stats.get("corrupt", 0),
                            bytes_read=read_stats.get("bytes", 0))


def _meta_bytes(meta: dict[str, Any]) -> bytes:
    return json.dumps(meta, indent=2, sort_keys=True).encode() + b"\n"


def _read_meta(path: Path, tolerant: bool) -> dict[str, Any] | None:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        if tolerant:
            return None
        raise UserError(f"{path}: unreadable checkpoint ({exc}); rerun with --rebuild") from None
    return meta if isinstance(meta, dict) else None


def _stored_outputs(path: Path) -> Iterator[bytes]:
    null = b"null"
    for line in _read_lines(path):
        raw = bytes(line.out)
        if raw != null:
            yield raw


def _write_files(out: Path, files: Iterable[tuple[str, bytes | Iterable[bytes]]], stale: list[str]) -> list[str]:
    # every file goes to a temporary name first and all are renamed at the end, so an error or Ctrl-C
    # while rendering leaves the previous output whole instead of a mix of old and new files
    written: list[str] = []
    try:
        for name, data in files:
            if "/" in name or name.startswith("."):
                raise ValueError(f"projection produced a bad file name {name!r}")
            _write_tmp(out / name, data)
            written.append(name)
    except BaseException:
        for name in written:
            _tmp_path(out / name).unlink(missing_ok=True)
        raise
    for name in written:
        os.replace(_tmp_path(out / name), out / name)
    for name in stale:
        if name not in written and (out / name).exists():
            (out / name).unlink()
    return written


def _tmp_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def _write_tmp(path: Path, data: bytes | Iterable[bytes]) -> None:
    tmp = _tmp_path(path)
    try:
        with open(tmp, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                for chunk in data:
                    f.write(chunk)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_atomic(path: Path, data: bytes) -> None:
    _write_tmp(path, data)
    os.replace(_tmp_path(path), path)
