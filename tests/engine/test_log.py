"""The run directory and log: writing, torn tails, corrupt lines, grouped reading, foreign logs."""

from __future__ import annotations

import json

import pytest

from dialogsim.engine.codec import encode
from dialogsim.engine.errors import UserError
from dialogsim.engine.events import EpisodeEnded, EpisodeStarted, UserTurn
from dialogsim.engine import log as log_module
from dialogsim.engine.log import (CorruptLog, LogWriter, RunDir, ShardPosition, read_episodes, read_events, read_shard,
                                  write_events)


def _episode(ep: str, turns: int = 2, end: bool = True) -> list:
    env = dict(run="r", ep=ep, t=0.0, wall=0)
    events = [EpisodeStarted(**env, seq=0, scenario_id="s", seed=1)]
    events += [UserTurn(**env, seq=i + 1, turn=i, utterance=f"line {i}") for i in range(turns)]
    if end:
        events.append(EpisodeEnded(**env, seq=turns + 1, outcome="success", turns=turns))
    return events


def _interleave(*episodes):
    out = []
    for i in range(max(len(e) for e in episodes)):
        out += [e[i] for e in episodes if i < len(e)]
    return out


@pytest.fixture
def run(tmp_path):
    """A run directory with three interleaved episodes, the last unfinished."""
    return write_events(tmp_path / "run", _interleave(_episode("a"), _episode("b", 3), _episode("c", 1, end=False)),
                        run_id="r", config={})


def test_read_all_and_filters(run):
    """Readers stream every event and filter by episode and by type."""
    assert len(list(read_events(run.path))) == 4 + 5 + 2
    assert [e.seq for e in read_events(run.path, episodes={"b"})] == [0, 1, 2, 3, 4]
    assert {e.ep for e in read_events(run.path, types={"episode_ended"})} == {"a", "b"}


def test_read_episodes_groups_and_orders(run):
    """Episodes come grouped, in the order they ended; unfinished ones only when asked, last."""
    assert [[e.seq for e in ep] for ep in read_episodes(run.path)] == [[0, 1, 2, 3], [0, 1, 2, 3, 4]]
    assert [ep[0].ep for ep in read_episodes(run.path, include_unfinished=True)] == ["a", "b", "c"]


def test_manifest_counts(run):
    """write_events records status and outcome counts in the manifest."""
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["counts"] == {"success": 2, "episodes": 2}


def test_torn_tail_is_truncated_by_writer_and_skipped_by_reader(run):
    """A torn last line is ignored by readers and cut off when a writer opens the shard."""
    shard = run.shards()[0]
    whole = shard.read_bytes()
    shard.write_bytes(whole + b'{"type":"user_turn","run":"r","ep":"c","se')
    stats: dict[str, int] = {}
    assert len(list(read_events(run.path, stats=stats))) == 11 and stats == {"torn": 1}
    LogWriter(shard, "none").close()
    assert shard.read_bytes() == whole


def test_corrupt_line_names_file_and_line(run):
    """A corrupt line in the middle is an error naming the shard and the line number."""
    shard = run.shards()[0]
    lines = shard.read_bytes().split(b"\n")
    lines[4] = b'{"type": "user_turn", "oops'
    shard.write_bytes(b"\n".join(lines))
    with pytest.raises(CorruptLog, match=rf"{shard.name}: line 5: corrupt event"):
        list(read_events(run.path))
    stats: dict[str, int] = {}
    assert len(list(read_events(run.path, skip_corrupt=True, stats=stats))) == 10 and stats == {"corrupt": 1}


def test_blocks_then_lines_agree_with_reading_line_by_line(tmp_path, monkeypatch):
    """Deep into a long shard (read block by block), a bad line still gets its number, and an unknown
    type and a torn tail are handled as line by line."""
    events = [e for i in range(200) for e in _episode(f"e{i}")]  # 800 lines: many blocks
    run = write_events(tmp_path / "run", events, run_id="r", config={})
    shard = run.shards()[0]
    lines = shard.read_bytes().split(b"\n")
    lines[700] = b'{"type": "persona_mood", "run": "r", "ep": "x", "seq": 0, "t": 0.0, "wall": 0, "v": 1}'
    lines[750] = b'{"type": "user_turn", "oops'
    shard.write_bytes(b"\n".join(lines) + b'{"type":"user_turn","run":"r","ep":"c","se')
    with pytest.raises(CorruptLog, match=rf"{shard.name}: line 751: corrupt event"):
        list(read_events(run.path))
    stats: dict[str, int] = {}
    read = list(read_events(run.path, skip_corrupt=True, stats=stats))
    assert len(read) == 799 and stats == {"corrupt": 1, "torn": 1}
    assert read[:700] == events[:700] and read[700].type == "persona_mood" and read[701:] == events[701:750] + events[751:]


def _positions(shard, start: int = 0, skip_corrupt: bool = False) -> list[tuple[int, str, int]]:
    position = ShardPosition()
    out = [(position.event, e.ep, e.seq) for e in read_shard(shard, start=start, position=position,
                                                               skip_corrupt=skip_corrupt)]
    return out + [(position.end, "", -1)]


def test_block_reading_gives_each_event_its_offset_as_line_by_line_reading_does(tmp_path, monkeypatch):
    """From the start or from a line in the middle, through a blank line, a corrupt line skipped and a torn
    tail: the offsets blocks report (for resuming) are the ones reading line by line reports."""
    events = [e for i in range(300) for e in _episode(f"e{i}")]  # 1,200 lines: many blocks
    run = write_events(tmp_path / "run", events, run_id="r", config={})
    shard = run.shards()[0]
    lines = shard.read_bytes().split(b"\n")
    lines[500] = b""  # a blank line: blocks are read line by line from there on
    lines[900] = b'{"type": "user_turn", "oops'
    shard.write_bytes(b"\n".join(lines) + b'{"type":"user_turn","run":"r","ep":"c","se')
    middle = len(b"\n".join(lines[:123])) + 1
    corrupt_at = len(b"\n".join(lines[:900])) + 1
    with pytest.raises(CorruptLog, match=f"{shard.name}: byte {corrupt_at}: corrupt event"):
        list(read_shard(shard, start=middle))
    by_blocks = [_positions(shard, 0, True), _positions(shard, middle, True)]
    monkeypatch.setattr(log_module, "decode_lines", lambda data: None)  # every block: line by line
    assert by_blocks == [_positions(shard, 0, True), _positions(shard, middle, True)]
    first, from_middle = by_blocks
    assert first[0] == (0, "e0", 0) and from_middle[0][0] == middle and len(first) == 1200 - 2 + 1
    assert first[-1][0] == len(b"\n".join(lines))  # the end: before the torn tail


def test_writer_appends_after_existing_events(tmp_path):
    """A writer reopening a shard appends; batched events reach the file on close."""
    shard = tmp_path / "events" / "shard-000.jsonl"
    first, second = _episode("a"), _episode("b")
    for events in (first, second):
        writer = LogWriter(shard, "episode")
        for e in events:
            writer.append(e)
        writer.episode_done()
        writer.close()
    assert shard.read_bytes() == b"".join(encode(e) + b"\n" for e in first + second)


def test_create_refuses_non_empty_directory(tmp_path):
    """A new run never writes into a directory that holds anything."""
    (tmp_path / "keep.txt").write_text("precious")
    with pytest.raises(UserError, match="not empty"):
        RunDir.create(tmp_path, run_id="r", config={}, seed=0)
    assert (tmp_path / "keep.txt").read_text() == "precious"


@pytest.mark.parametrize("content, message", [
    (None, "missing"),
    ("{broken", "unreadable"),
    ('{"format": "something-else"}', "not a dialogsim run manifest"),
    ('{"format": "dialogsim-run", "format_version": 99}', "newer"),
])
def test_open_rejects_foreign_or_broken_runs(tmp_path, content, message):
    """Opening something that is not a readable dialogsim run says what is wrong."""
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(UserError, match=message):
        RunDir.open(tmp_path)


def test_episode_durability_writes_an_ended_episode_at_once_and_syncs_it(tmp_path):
    """With durability episode, the first ended episode of a window is in the file before episode_done returns."""
    shard = tmp_path / "shard.jsonl"
    writer = LogWriter(shard, "episode")
    for event in _episode("a"):
        writer.append(event)
    assert shard.read_bytes() == b""
    writer.episode_done()
    assert shard.read_bytes().count(b"\n") == 4
    writer.append(_episode("b")[0])
    writer.episode_done()  # inside the 50 ms window: stays buffered until the next commit or close
    writer.close()
    assert shard.read_bytes().count(b"\n") == 5 and writer.events_written == 5
