"""The run directory: manifest, append-only JSONL event shards, batched writes and streaming readers.

Layout::

    RUN_DIR/manifest.json          config, seed, code version, shards, status, counts
    RUN_DIR/events/shard-000.jsonl one event per line, append-only, one writer per shard
    RUN_DIR/projections/<name>@v<k>/

A writer opening a shard whose last line is torn (a crash mid-write) truncates it and says so; readers
skip such a tail (the run may still be writing it). A corrupt line anywhere else is an error naming the
file and the line, unless the caller asks to skip and count such lines.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import time
from collections.abc import Container, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import chain
from pathlib import Path
from typing import Any, Literal

from .. import __version__
import msgspec

from .codec import CorruptEvent, decode, decode_lines
from .errors import UserError
from .events import EpisodeEnded, Event, OpaqueEvent, event_type
from .oplog import get_logger

FORMAT = "dialogsim-run"
FORMAT_VERSION = 1
Durability = Literal["none", "batch", "episode"]
DURABILITY_CHOICES = ("none", "batch", "episode")

_log = get_logger("log")
_encoder = msgspec.json.Encoder()
_encode_into, _encode_lines = _encoder.encode_into, _encoder.encode_lines
_FLUSH_BYTES = 1 << 20
_FSYNC_INTERVAL_S = 0.05  # group commit: episode ends within this window share one fsync


class CorruptLog(UserError):
    """A line in the middle of a shard is not an event."""


class RunDir:
    """A run directory on disk; ``manifest`` is its parsed manifest.json."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest

    @property
    def projections_dir(self) -> Path:
        return self.path / "projections"

    @classmethod
    def create(cls, path: str | Path, *, run_id: str, config: dict[str, Any], seed: int) -> RunDir:
        """Make a new run directory; refuses a path that exists and is not an empty directory."""
        path = Path(path)
        cls.refuse_existing(path)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "run_id": run_id,
            "code_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seed": seed,
            "config": config,
            "shards": ["events/shard-000.jsonl"],
            "status": "running",
            "counts": {},
        }
        (path / "events").mkdir(parents=True, exist_ok=True)
        (path / "projections").mkdir(exist_ok=True)
        for shard in manifest["shards"]:
            (path / shard).touch()  # a listed shard always exists, so a missing one means lost events
        run = cls(path, manifest)
        run.save_manifest()
        return run

    @staticmethod
    def refuse_existing(path: str | Path) -> None:
        """Refuse a path for a new run that exists and is not an empty directory."""
        path = Path(path)
        if path.exists():
            if not path.is_dir():
                raise UserError(f"{path}: exists and is not a directory")
            if any(path.iterdir()):
                raise UserError(f"{path}: output directory is not empty (use --resume to continue a run there)")

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """Open an existing run directory, checking that it is a dialogsim run this version can read."""
        path = Path(path)
        manifest_path = path / "manifest.json"
        if not path.is_dir():
            raise UserError(f"{path}: no such run directory")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{manifest_path}: missing; {path} is not a dialogsim run directory") from None
        except OSError as exc:
            raise UserError(f"{manifest_path}: cannot read ({exc.strerror})") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"{manifest_path}: unreadable, not JSON ({exc})") from None
        if not isinstance(manifest, dict):
            raise UserError(f"{manifest_path}: not a dialogsim run manifest (not a JSON object)")
        if manifest.get("format") != FORMAT:
            raise UserError(f"{manifest_path}: not a dialogsim run manifest (format is not {FORMAT!r})")
        version = manifest.get("format_version", FORMAT_VERSION)
        if type(version) is not int or version < 1:
            raise UserError(f"{manifest_path}: 'format_version' is {version!r}; expected a positive integer")
        if version > FORMAT_VERSION:
            raise UserError(f"{manifest_path}: run format v{version} is newer than this dialogsim reads "
                            f"(v{FORMAT_VERSION})")
        shards = manifest.get("shards", [])
        if not isinstance(shards, list) or not all(
                isinstance(s, str) and s and not Path(s).is_absolute() and ".." not in Path(s).parts
                for s in shards):
            raise UserError(f"{manifest_path}: 'shards' is {shards!r}; expected a list of file paths "
                            "relative to the run directory")
        return cls(path, manifest)

    def shards(self) -> list[Path]:
        """The event shard files listed in the manifest; a listed shard that is missing or not a file is an error."""
        out = []
        for name in self.manifest.get("shards", []):
            shard = self.path / name
            if not shard.exists():
                raise UserError(f"{shard}: event shard listed in {self.path / 'manifest.json'} is missing")
            if not shard.is_file():
                raise UserError(f"{shard}: event shard is not a regular file")
            out.append(shard)
        return out

    def imported_by(self) -> str | None:
        """The import command that made this run ("import sgd SRC"), or None for a simulated run."""
        config = self.manifest.get("config")
        command = config.get("command") if isinstance(config, dict) else None
        if isinstance(command, str) and command.startswith("import"):
            return f"{command} {config.get('source', '')}".strip()
        return None

    def save_manifest(self) -> None:
        """Write manifest.json atomically (temp file, fsync, rename)."""
        tmp = self.path / "manifest.json.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.manifest, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path / "manifest.json")


def repair_torn_tail(shard: Path) -> int:
    """Truncate a shard after its last complete line; returns the number of bytes cut (0 if none)."""
    size = shard.stat().st_size
    if size == 0:
        return 0
    with open(shard, "rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        keep = _last_newline_end(f, size)
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    cut = size - keep
    _log.warning("torn tail truncated", shard=str(shard), bytes=cut)
    return cut


def _last_newline_end(f: Any, size: int) -> int:
    pos = size
    while pos > 0:
        step = min(65536, pos)
        pos -= step
        f.seek(pos)
        chunk = f.read(step)
        idx = chunk.rfind(b"\n")
        if idx >= 0:
            return pos + idx + 1
    return 0


class LogWriter:
    """Appends events to one shard with batched writes; ``durability`` decides when it fsyncs.

    none: never fsync (the OS flushes); batch: write when the buffer fills, fsync on close;
    episode: an ended episode is written and fsynced within 50 ms (group commit: the episodes that end
    within one window share one write and one fsync). The fsync of a window runs on a helper thread
    (it releases the GIL), so the simulation goes on while the disk catches up. Whatever was not yet
    durable when the process dies is re-run by ``--resume``, so durability trades lost work for speed,
    never correctness.
    """

    def __init__(self, shard: Path, durability: Durability = "episode") -> None:
        if durability not in DURABILITY_CHOICES:
            raise UserError(f"unknown durability {durability!r}; choose one of {', '.join(DURABILITY_CHOICES)}")
        shard.parent.mkdir(parents=True, exist_ok=True)
        if shard.exists():
            repair_torn_tail(shard)
        self.shard = shard
        self.durability = durability
        self._file = open(shard, "ab", buffering=0)
        self._buffer = bytearray()
        self._last_commit = 0.0
        self._dirty = False
        self._ended_since_commit = False
        self._syncer: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None
        self.events_written = 0
        self._queued = 0  # events in the buffer (counting them here costs less than scanning it for newlines)

    def append(self, event: Event) -> None:
        """Queue one event; it reaches the file at the next flush."""
        buffer = self._buffer
        end = len(buffer)
        try:
            _encode_into(event, buffer, -1)
        except Exception:
            del buffer[end:]  # msgspec leaves a partial object behind: a corrupt line if kept
            raise
        buffer.append(10)  # b"\n"; JSON escapes newlines inside strings, so a line is one event
        self._queued += 1
        if end >= _FLUSH_BYTES:  # the size before this event: one len() less, the buffer ends one event later
            self.flush()

    def append_many(self, events: list[Event]) -> None:
        """Queue events, encoded together; all or none: if one cannot be encoded, none is queued."""
        if len(self._buffer) >= _FLUSH_BYTES:  # first, so that an error writing leaves these unqueued too
            self.flush()
        self._buffer += _encode_lines(events)
        self._queued += len(events)

    def episode_done(self) -> None:
        """An episode ended: with ``episode`` durability, commit if the group-commit window has passed."""
        if self.durability == "episode":
            if time.monotonic() - self._last_commit >= _FSYNC_INTERVAL_S:
                self._commit()
            else:
                self._ended_since_commit = True

    def commit(self) -> None:
        """With ``episode`` durability, commit episodes that ended inside the current window now.

        The engine calls this before it waits on a live call, so a slow agent never holds back
        episodes that have already ended.
        """
        if self._ended_since_commit:
            self._commit()

    def flush(self) -> None:
        """Hand buffered events to the OS."""
        if self._buffer:
            self.events_written += self._queued
            self._queued = 0
            self._file.write(self._buffer)
            self._buffer.clear()
            self._dirty = True

    def _commit(self) -> None:
        """Write what is buffered and have the helper thread fsync it."""
        self._last_commit = time.monotonic()
        self._ended_since_commit = False
        self.flush()
        if not self._dirty:
            return
        self._dirty = False
        pending = self._pending
        if pending is not None and not pending.running() and not pending.done():
            return  # an fsync still queued will cover what was just written
        if self._syncer is None:
            self._syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dialogsim-fsync")
        self._pending = self._syncer.submit(os.fsync, self._file.fileno())

    def sync(self) -> None:
        """Flush and fsync now, waiting for the disk."""
        self.flush()
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        if self._dirty and self.durability != "none":
            os.fsync(self._file.fileno())
        self._dirty = False
        self._last_commit = time.monotonic()

    def close(self) -> None:
        """Flush, fsync (unless durability is none) and close."""
        if self._file.closed:
            return
        self.sync()
        if self._syncer is not None:
            self._syncer.shutdown()
            self._syncer = None
        self._file.close()


def check_new_run_dir(path: str | Path) -> None:
    """Refuse a target for a new run that exists and is not an empty directory."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserError(f"{path}: exists and is not an empty directory; choose a new --out")


def write_events(path: str | Path, events: Iterable[Event], *, run_id: str, config: dict[str, Any],
                 seed: int = 0, durability: Durability = "batch") -> RunDir:
    """Create a run directory holding ``events`` (importers use this), status completed when done; ``path``
    must be absent or empty, and nothing is left in it if ``events`` raises."""
    path = Path(path)
    check_new_run_dir(path)
    existed = path.exists()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of acyclic objects: cycle collection only costs time here
    try:
        run = RunDir.create(path, run_id=run_id, config=config, seed=seed)
        writer = LogWriter(run.path / run.manifest["shards"][0], durability)
        counts: dict[str, int] = {}
        try:
            for event in events:
                writer.append(event)
                if isinstance(event, EpisodeEnded):
                    counts[event.outcome] = counts.get(event.outcome, 0) + 1
                    counts["episodes"] = counts.get("episodes", 0) + 1
        finally:
            writer.close()
        run.manifest.update(status="completed", counts=counts)
        run.save_manifest()
    except BaseException:
        # path was absent or empty before (checked above): whatever is in it now is this import's
        if path.exists():
            shutil.rmtree(path)
            if existed:
                path.mkdir()
        raise
    finally:
        if gc_was_enabled:
            gc.enable()
    return run


# -- reading ----------------------------------------------------------------------------------------

_READ_CHUNK = 8 << 20
_BLOCK = 8 << 10  # bytes decoded per call: the events of a block die young, the collector barely sees them


def _as_run(run: RunDir | str | Path) -> RunDir:
    return run if isinstance(run, RunDir) else RunDir.open(run)


class ShardPosition:
    """Where a ``read_shard`` is: the byte offset of the event it last yielded, and where it stopped."""

    __slots__ = ("event", "end")

    def __init__(self) -> None:
        self.event = 0
        self.end = 0  # once the read is done: the end of the last complete line (a torn tail is after it)


def read_shard(shard: Path, *, skip_corrupt: bool = False, stats: dict[str, int] | None = None, start: int = 0,
               position: ShardPosition | None = None) -> Iterator[Event | OpaqueEvent]:
    """Stream the events of one shard from byte ``start`` (a line start); a torn last line is skipped with a warning.

    Blocks of some kB of whole lines are decoded by one call each (no bytes object per line), each event's
    offset found, when ``position`` asks for it, by a scan for the block's line ends; once a block does not
    decode that way (a corrupt line, an old version, an unknown type, a line that is not one event), the
    line-by-line reader goes on from there.
    """
    try:
        f = open(shard, "rb")
    except OSError as exc:
        raise UserError(f"{shard}: cannot read event shard ({exc.strerror})") from None
    with f:
        numbered = start == 0  # a bad line is named by its number, or by its byte offset from ``start``
        origin = start
        f.seek(start)
        rest = b""  # start is the offset of rest[0] in the shard
        while chunk := _read_chunk(f, shard):
            data = rest + chunk
            view = memoryview(data)
            pos, cut = 0, data.rfind(b"\n") + 1
            while pos < cut:
                end = data.rfind(b"\n", pos, pos + _BLOCK) + 1 or data.find(b"\n", pos) + 1  # or a long line
                events = decode_lines(view[pos:end])
                if events is None:
                    break
                if position is None:
                    yield from events
                else:
                    starts = _line_starts(data, pos, end)
                    if len(starts) != len(events):  # a blank line, or two events on one: read line by line
                        break
                    for event, at in zip(events, starts):
                        position.event = start + at
                        yield event
                pos = end
            if pos < cut:  # the rest goes line by line
                start += pos
                break
            start += cut
            rest = data[cut:]
        yield from _read_lines(f, shard, start, numbered, skip_corrupt, stats, position, origin)


def _line_starts(data: bytes, pos: int, end: int) -> list[int]:
    """The offsets of the non-empty lines of ``data[pos:end]`` (which ends with a newline)."""
    starts = []
    find, add = data.find, starts.append
    while pos < end:
        nl = find(b"\n", pos, end)
        if nl != pos:
            add(pos)
        pos = nl + 1
    return starts


def _read_lines(f: Any, shard: Path, start: int, numbered: bool, skip_corrupt: bool, stats: dict[str, int] | None,
                position: ShardPosition | None, origin: int) -> Iterator[Event | OpaqueEvent]:
    """Stream the events of a shard line by line from byte ``start``; ``numbered``: name bad lines by number (else
    by offset), counted from the file's start, or the torn tail's from ``origin``, where the caller began."""
    lineno = 0  # lines read from ``start``
    first_line: int | None = 0 if start == 0 else None  # of ``start``, counted when a message needs it
    offset = start  # of the line being decoded
    track = position is not None or not numbered  # offsets cost time on every line: only counted when needed
    f.seek(start)
    rest = b""
    while True:
        chunk = _read_chunk(f, shard)
        if not chunk:
            break
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            lineno += 1
            if track:
                here = offset
                offset += len(line) + 1
            if not line:
                continue
            try:
                event = decode(line)
            except CorruptEvent as exc:
                if numbered:  # line numbers need the start of the file
                    if first_line is None:
                        first_line = _count_lines(shard, start)
                    where = f"line {first_line + lineno}"
                else:
                    where = f"byte {here}"
                if not skip_corrupt:
                    # the CLI adds advice that fits the command (only some can skip such lines)
                    raise CorruptLog(f"{shard}: {where}: corrupt event ({exc})") from None
                if stats is not None:
                    stats["corrupt"] = stats.get("corrupt", 0) + 1
                _log.warning("corrupt line skipped", shard=str(shard), at=where, error=str(exc))
                continue
            if position is not None:
                position.event = here
            yield event
    if position is not None:
        position.end = offset
    if rest.strip():
        if stats is not None:
            stats["torn"] = stats.get("torn", 0) + 1
        if first_line is None:
            first_line = _count_lines(shard, start, 0 if numbered else origin)
        # From a caller's start, the line number counts from there (counting from the file's start would
        # read the whole shard again on every incremental read of a run still writing it).
        _log.warning("torn last line ignored", shard=str(shard), line=(first_line or 0) + lineno + 1,
                     bytes=len(rest))


def _read_chunk(f: Any, shard: Path) -> bytes:
    try:
        return f.read(_READ_CHUNK)
    except OSError as exc:
        raise UserError(f"{shard}: cannot read event shard ({exc.strerror})") from None


def _count_lines(shard: Path, end: int, begin: int = 0) -> int:
    """The number of lines between bytes ``begin`` and ``end`` of ``shard`` (for messages: the fast reader does not
    count them)."""
    count = 0
    end -= begin
    with open(shard, "rb") as f:
        f.seek(begin)
        while end > 0:
            chunk = _read_chunk(f, shard)[:end]
            if not chunk:
                break
            count += chunk.count(b"\n")
            end -= len(chunk)
    return count


def read_events(run: RunDir | str | Path, *, episodes: set[str] | None = None, types: set[str] | None = None,
                skip_corrupt: bool = False, stats: dict[str, int] | None = None) -> Iterator[Event | OpaqueEvent]:
    """Stream every event of a run in log order, optionally only some episodes and event types."""
    # chain passes the shards' events on without a Python frame of its own per event
    events = chain.from_iterable(_shard_readers(run, skip_corrupt, stats))
    if episodes is None and types is None:
        return events
    return _only(events, episodes, types)


def _shard_readers(run: RunDir | str | Path, skip_corrupt: bool,
                   stats: dict[str, int] | None) -> Iterator[Iterator[Event | OpaqueEvent]]:
    for shard in _as_run(run).shards():  # the run is opened when the first event is asked for
        yield read_shard(shard, skip_corrupt=skip_corrupt, stats=stats)


def _only(events: Iterable[Event | OpaqueEvent], episodes: set[str] | None,
          types: set[str] | None) -> Iterator[Event | OpaqueEvent]:
    for event in events:
        if episodes is not None and event.ep not in episodes:
            continue
        if types is not None and event_type(event) not in types:
            continue
        yield event


def read_episodes(run: RunDir | str | Path, *, episodes: set[str] | None = None, include_unfinished: bool = False,
                  skip_corrupt: bool = False, stats: dict[str, int] | None = None) -> Iterator[list[Event | OpaqueEvent]]:
    """Yield each episode's events (seq order) as soon as its ``episode_ended`` is read.

    Memory holds only the episodes still open, so it is bounded by the run's concurrency, not its size.
    With ``include_unfinished``, episodes that never ended are yielded last, in the order they started.
    """
    open_episodes: dict[str, list[Event | OpaqueEvent]] = {}
    for event in read_events(run, episodes=episodes, skip_corrupt=skip_corrupt, stats=stats):
        if not event.ep:
            continue
        events = open_episodes.get(event.ep)
        if events is None:
            events = open_episodes[event.ep] = []
        events.append(event)
        if isinstance(event, EpisodeEnded):
            del open_episodes[event.ep]
            yield events
    if include_unfinished:
        yield from open_episodes.values()


def read_episodes_from(run: RunDir, start: dict[str, int], resume: dict[str, int], *,
                       done: Container[str] = frozenset(), skip_corrupt: bool = False,
                       stats: dict[str, int] | None = None) -> Iterator[list[Event | OpaqueEvent]]:
    """Like ``read_episodes``, reading each shard from byte ``start[shard name]`` on (0 for a shard not in it).

    Events of the episodes in ``done`` (already processed) are passed over, so one that ended before
    ``start`` but has events after it neither comes back incomplete nor holds ``resume`` back.

    When exhausted, ``resume`` holds per shard the offset a later read can start from without losing an
    episode: the end of what was read, or the first event of an episode that has not ended yet, whichever
    comes first, so that episode is read whole next time. Episodes that ended are yielded as they end.
    """
    open_episodes: dict[str, list[Event | OpaqueEvent]] = {}
    first_at: dict[str, dict[str, int]] = {}  # open episode -> shard name -> offset of its first event there
    for shard in run.shards():
        name = str(shard.relative_to(run.path))
        begin = start.get(name, 0)
        if type(begin) is not int or not 0 <= begin <= shard.stat().st_size:
            begin = 0  # not an offset into this shard (a damaged checkpoint, or a shard replaced by a shorter one)
        position = ShardPosition()
        for event in read_shard(shard, skip_corrupt=skip_corrupt, stats=stats, start=begin, position=position):
            ep = event.ep
            if not ep:
                continue
            events = open_episodes.get(ep)
            if events is None:
                if ep in done:
                    continue
                events = open_episodes[ep] = []
                first_at[ep] = {name: position.event}
            elif name not in first_at[ep]:
                first_at[ep][name] = position.event
            events.append(event)
            if isinstance(event, EpisodeEnded):
                del open_episodes[ep], first_at[ep]
                yield events
        resume[name] = position.end
        if stats is not None:
            stats["bytes"] = stats.get("bytes", 0) + position.end - begin
    for shards in first_at.values():
        for name, offset in shards.items():
            resume[name] = min(resume[name], offset)
