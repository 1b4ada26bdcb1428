"""A run's log as raw JSON lines, for readers that decode only what they need.

Decoding an SGD log costs about a third of simulating it, so ``verify`` compares encodings (engine/tape.py's
``RawEpisode``) and replays read only the episodes' starts. Lines are grouped by episode without decoding
them: the writer puts the envelope first (``{"type":...,"run":...,"ep":...,"seq":N,"t":...,"wall":...``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .codec import CorruptEvent, decode
from .errors import UserError
from .events import EpisodeEnded, EpisodeStarted, Event, OpaqueEvent
from .log import RunDir

_EP = re.compile(rb'^\{"type":"([a-z_]+)","run":"(?:[^"\\]|\\.)*","ep":"((?:[^"\\]|\\.)*)"')
_ENDED = b'{"type":"episode_ended"'
_BOUNDARY = re.compile(rb'^\{"type":"episode_(started|ended)","run":"(?:[^"\\]|\\.)*","ep":"((?:[^"\\]|\\.)*)",'
                       rb'"seq":[0-9]+,"t":([^,]+),', re.MULTILINE)
_NL_BOUNDARY = b'\n{"type":"episode_'
_CHUNK = 8 << 20
_STARTED = b'{"type":"episode_started"'


def blocks(run: RunDir) -> Iterator[tuple[str, int, bytes]]:
    """The run's shards in blocks of whole lines (the last newline kept off), in log order, each with its shard
    and the number of lines before it; a torn last line is left out (the run may still be writing it)."""
    for shard in run.shards():
        try:
            f = open(shard, "rb")
        except OSError as exc:
            raise UserError(f"{shard}: cannot read event shard ({exc.strerror})") from None
        with f:
            rest, before = b"", 0
            while True:
                try:
                    chunk = f.read(_CHUNK)
                except OSError as exc:
                    raise UserError(f"{shard}: cannot read event shard ({exc.strerror})") from None
                if not chunk:
                    break
                data = rest + chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    rest = data
                    continue
                yield str(shard), before, data[:cut]
                before += data.count(b"\n", 0, cut + 1)
                rest = data[cut + 1:]


def lines(run: RunDir) -> Iterator[tuple[str, int, bytes]]:
    """Every complete line of the run's shards, in log order, with its shard and line number."""
    for shard, before, block in blocks(run):
        for number, line in enumerate(block.split(b"\n"), before + 1):
            yield shard, number, line


def episode_of(line: bytes, shard: str, number: int) -> tuple[str, str]:
    """The type and episode id of a line (the id unescaped only when it has escapes)."""
    found = _EP.match(line)
    if found is None:
        if not line.strip():
            return "", ""
        try:
            event = decode(line)  # an event in another layout (not written by the log writer), or not an event
        except CorruptEvent as exc:
            raise UserError(f"{shard}: line {number}: corrupt event ({exc})") from None
        return (event.type if isinstance(event, OpaqueEvent) else type(event).__struct_config__.tag), event.ep
    kind, ep = found.group(1).decode(), found.group(2)
    return kind, (ep.decode() if b"\\" not in ep else decode(line).ep)


def ends(run: RunDir) -> tuple[dict[str, float], set[str]]:
    """The end time of every ended episode, and the ids of every episode that started."""
    ended: dict[str, float] = {}
    started: set[str] = set()
    for shard, before, block in blocks(run):
        data = b"\n" + block  # a line of the block starts at i where data has "\n" at i
        if data.count(b'\n{"type":"') != data.count(b"\n") - data.count(b"\n\n"):
            found = ((line, before + n) for n, line in enumerate(block.split(b"\n"), 1) if line.strip())
            _boundaries_decoded(found, shard, ended, started)  # lines in another layout (edited by hand, say)
            continue
        at = data.find(_NL_BOUNDARY)
        while at >= 0:
            found = _BOUNDARY.match(block, at)
            if found is None or b"\\" in found.group(2):  # not the writer's envelope, or an escaped id
                line = block[at:data.find(b"\n", at + 1) - 1 if data.find(b"\n", at + 1) >= 0 else len(block)]
                _boundaries_decoded([(line, before + data.count(b"\n", 0, at + 1))], shard, ended, started)
            elif found.group(1) == b"ended":
                ended[_text(found.group(2))] = float(found.group(3))
            else:
                started.add(_text(found.group(2)))
            at = data.find(_NL_BOUNDARY, at + 1)
    return ended, started


def _boundaries_decoded(lines: Any, shard: str, ended: dict[str, float], started: set[str]) -> None:
    """``ends`` for lines that are decoded one by one."""
    for line, number in lines:
        event = _decoded(line, shard, number)
        if type(event) is EpisodeEnded:
            ended[event.ep] = event.t
        elif type(event) is EpisodeStarted:
            started.add(event.ep)


def episodes(run: RunDir, wanted: frozenset[str] | None = None) -> Iterator[tuple[str, list[bytes]]]:
    """Each ended episode's lines (seq order), as its ``episode_ended`` is read; only ``wanted`` ones if given."""
    want = None if wanted is None else {ep.encode() for ep in wanted}
    open_episodes: dict[bytes, list[bytes]] = {}
    for shard, before, block in blocks(run):
        for number, line in enumerate(block.split(b"\n"), before + 1):
            i = line.find(b'","ep":"', 0, 400)
            j = line.find(b'"', i + 8) if i >= 0 else -1
            ep = line[i + 8:j]
            if j < 0 or b"\\" in ep or not line.startswith(b'{"type":"'):
                kind, text = episode_of(line, shard, number)  # not the writer's layout: decoded
                ep = text.encode()
            if not ep or (want is not None and ep not in want):
                continue
            mine = open_episodes.get(ep)
            if mine is None:
                mine = open_episodes[ep] = []
            mine.append(line)
            if line.startswith(_ENDED):
                del open_episodes[ep]
                yield _text(ep), mine


def starts(run: RunDir, wanted: frozenset[str] | None = None) -> Iterator[Event]:
    """The ``episode_started`` of each episode that ended (as its end is read), decoded alone."""
    started: dict[str, tuple[bytes, str, int]] = {}
    for shard, number, line in lines(run):
        if line.startswith(_STARTED):
            ep = episode_of(line, shard, number)[1]
            if wanted is None or ep in wanted:
                started[ep] = (line, shard, number)
        elif line.startswith(_ENDED):
            found = started.pop(_decoded(line, shard, number).ep, None)
            if found is not None:
                yield _decoded(*found)


def _decoded(line: bytes, shard: str, number: int) -> Any:
    try:
        return decode(line)
    except CorruptEvent as exc:
        raise UserError(f"{shard}: line {number}: corrupt event ({exc})") from None


def _text(ep: bytes) -> str:
    return ep.decode("utf-8")
