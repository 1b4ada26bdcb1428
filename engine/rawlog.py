"""A run's log as raw JSON lines, for readers that decode only what they need.

Decoding an SGD log costs about a third of simulating it, so ``verify`` compares encodings (engine/tape.py's
``RawEpisode``) and replays read only the episodes' starts. Lines are grouped by episode without decoding
them: the writer puts the envelope first (``{"type":...,"run":...,"ep":...,"seq":N,"t":...,"wall":...``).
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .codec import CorruptEvent, decode
from .errors import UserError
from .events import EpisodeEnded, EpisodeStarted, Event, OpaqueEvent
from .log import RunDir

_EP = re.compile(rb'^\{"type":"([a-z_]+)","run":"(?:[^"\\]|\\.)*","ep":"((?:[^"\\]|\\.)*)"')
_ENDED = b'{"type":"episode_ended"'
_BOUNDARY = re.compile(rb'\{"type":"episode_(started|ended)","run":"(?:[^"\\]|\\.)*","ep":"((?:[^"\\]|\\.)*)",'
                       rb'"seq":[0-9]+,"t":([^,]+),')
_BOUNDARY_START = b'{"type":"episode_'
_NL_BOUNDARY = b'\n{"type":"episode_'
_CHUNK = 32 << 20
_STARTED = b'{"type":"episode_started"'


def blocks(run: RunDir) -> Iterator[tuple[str, int, bytes]]:
    """The run's shards in blocks of whole lines (the last newline kept off), in log order, each with its shard
    and its byte offset there; a torn last line is left out (the run may still be writing it)."""
    for shard in run.shards():
        try:
            f = open(shard, "rb")
        except OSError as exc:
            raise UserError(f"{shard}: cannot read event shard ({exc.strerror})") from None
        with f:
            rest, offset = b"", 0
            while True:
                try:
                    chunk = f.read(_CHUNK)
                except OSError as exc:
                    raise UserError(f"{shard}: cannot read event shard ({exc.strerror})") from None
                if not chunk:
                    break
                data = rest + chunk if rest else chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    rest = data
                    continue
                yield str(shard), offset, data[:cut]
                offset += cut + 1
                rest = data[cut + 1:]


def line_number(shard: str, offset: int, lines_before: int = 0) -> int:
    """The number of the line that starts at byte ``offset`` of ``shard``, plus ``lines_before`` (for messages)."""
    with open(shard, "rb") as f:
        return f.read(offset).count(b"\n") + 1 + lines_before


def lines(run: RunDir) -> Iterator[tuple[str, int, int, bytes]]:
    """Every complete line of the run's shards, in log order, with its shard, its block's offset and its index
    in the block (``line_number`` turns the two into a line number)."""
    for shard, offset, block in blocks(run):
        for index, line in enumerate(block.split(b"\n")):
            yield shard, offset, index, line


def episode_of(line: bytes, shard: str, offset: int, index: int) -> tuple[str, str]:
    """The type and episode id of a line (the id unescaped only when it has escapes)."""
    found = _EP.match(line)
    if found is None:
        if not line.strip():
            return "", ""
        event = _decoded(line, shard, offset, index)  # an event in another layout (not the log writer's)
        return (event.type if isinstance(event, OpaqueEvent) else type(event).__struct_config__.tag), event.ep
    kind, ep = found.group(1).decode(), found.group(2)
    return kind, (ep.decode() if b"\\" not in ep else decode(line).ep)


def ends(run: RunDir, *, any_layout: bool = False) -> tuple[dict[str, float], set[str]]:
    """The end time of every ended episode, and the ids of every episode that started. Fast, this finds the
    lines the log writer wrote, in the shards mapped to memory (nothing copied); ``any_layout`` decodes every
    line instead (a log edited by hand, say)."""
    ended: dict[str, float] = {}
    started: set[str] = set()
    if any_layout:
        for shard, offset, index, line in lines(run):
            if line.strip():
                _boundary_decoded(_decoded(line, shard, offset, index), ended, started)
        return ended, started
    for shard in run.shards():
        with open(shard, "rb") as f, _mapped(f) as data:
            complete = data.rfind(b"\n")  # a line starting after the last newline is torn
            at = 0 if data[:len(_BOUNDARY_START)] == _BOUNDARY_START else _next_boundary(data, 0)
            while 0 <= at < complete:
                found = _BOUNDARY.match(data, at)
                if found is None or b"\\" in found.group(2):  # not the writer's envelope, or an escaped id
                    line = data[at:data.find(b"\n", at)]
                    _boundary_decoded(_decoded(line, str(shard), 0, data[:at].count(b"\n")), ended, started)
                elif found.group(1) == b"ended":
                    ended[_text(found.group(2))] = float(found.group(3))
                else:
                    started.add(_text(found.group(2)))
                at = _next_boundary(data, at)
    return ended, started


@contextmanager
def _mapped(f: Any) -> Iterator[Any]:
    """A shard mapped to memory, read only (an empty one as empty bytes: it cannot be mapped)."""
    try:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except ValueError:  # empty
        yield b""
        return
    except OSError as exc:
        raise UserError(f"{f.name}: cannot read event shard ({exc.strerror})") from None
    try:
        yield data
    finally:
        data.close()


def _next_boundary(block: Any, at: int) -> int:
    """Where the next line after ``at`` that starts an episode or ends one starts, or -1."""
    found = block.find(_NL_BOUNDARY, at)
    return found + 1 if found >= 0 else -1


def _boundary_decoded(event: Any, ended: dict[str, float], started: set[str]) -> None:
    if type(event) is EpisodeEnded:
        ended[event.ep] = event.t
    elif type(event) is EpisodeStarted:
        started.add(event.ep)


def episodes(run: RunDir, wanted: frozenset[str] | None = None) -> Iterator[tuple[str, list[bytes]]]:
    """Each ended episode's lines (seq order), as its ``episode_ended`` is read; only ``wanted`` ones if given."""
    want = None if wanted is None else {ep.encode() for ep in wanted}
    open_episodes: dict[bytes, list[bytes]] = {}
    for shard, offset, block in blocks(run):
        for index, line in enumerate(block.split(b"\n")):
            i = line.find(b'","ep":"', 0, 400)
            j = line.find(b'"', i + 8) if i >= 0 else -1
            ep = line[i + 8:j]
            last = line.startswith(_ENDED)
            if j < 0 or b"\\" in ep or not line.startswith(b'{"type":"'):
                kind, text = episode_of(line, shard, offset, index)  # not the writer's layout: decoded
                ep, last = text.encode(), kind == "episode_ended"
            if not ep or (want is not None and ep not in want):
                continue
            mine = open_episodes.get(ep)
            if mine is None:
                mine = open_episodes[ep] = []
            mine.append(line)
            if last:
                del open_episodes[ep]
                yield _text(ep), mine


def starts(run: RunDir, wanted: frozenset[str] | None = None) -> Iterator[Event]:
    """The ``episode_started`` of each episode that ended (as its end is read), decoded alone."""
    started: dict[str, tuple[bytes, str, int, int]] = {}
    for shard, offset, index, line in lines(run):
        if line.startswith(_STARTED):
            ep = episode_of(line, shard, offset, index)[1]
            if wanted is None or ep in wanted:
                started[ep] = (line, shard, offset, index)
        elif line.startswith(_ENDED):
            found = started.pop(_decoded(line, shard, offset, index).ep, None)
            if found is not None:
                yield _decoded(*found)


def _decoded(line: bytes, shard: str, offset: int, index: int) -> Any:
    try:
        return decode(line)
    except CorruptEvent as exc:
        raise UserError(f"{shard}: line {line_number(shard, offset, index)}: corrupt event ({exc})") from None


def _text(ep: bytes) -> str:
    return ep.decode("utf-8")
