"""An episode's logged prefix (its tape): what an episode runs through before it goes on live.

One mechanism serves resume, verify, fork and replay (docs/prefix.md). A tape holds the events an episode
starts with, seq 0 to ``end``; ``copied`` of them, from seq 0, are taken as they are. While the tape lasts:

- *check*: a deterministic participant is re-run and every event it produces must equal the logged one,
  virtual time included (``check``), or the episode ends with a divergence fault (resume, verify);
- *read back*: a participant that cannot be re-run (a live model, a recorded user) is not asked: its steps
  are read from the tape (``user_step``, ``agent_step``), each with the model calls it made (``model_called``
  events, after their failed attempts), and the events of its steps are taken as logged;
- *copy*: in the ``copied`` part every step is read back, and deterministic participants are asked as well,
  their answers dropped, so that their state is what the log implies (a fork's prefix).

Past the tape's end the episode continues live. A new episode has an empty tape.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec

from msgspec import UNSET

from .calls import model_call
from .codec import decode
from .contracts import AgentReply, ExecutedCall, FaultReport, ModelCall, ToolCall, UserReply
from .events import AgentTurn, EpisodeEnded, EpisodeRef, EpisodeStarted, Event, Fault, ModelCalled, ToolCalled, \
    ToolReturned, UserTurn, event_type


class Divergence(Exception):
    """A re-run of a logged episode produced another event than the log holds: where, and both values."""

    def __init__(self, seq: int, kind: str, field: str, logged: Any, rerun: Any) -> None:
        # All in args: simpy re-raises a failed process's exception as type(exc)(*exc.args).
        super().__init__(seq, kind, field, logged, rerun)
        self.seq, self.kind, self.field, self.logged, self.rerun = seq, kind, field, logged, rerun

    def __str__(self) -> str:
        return (f"event {self.seq} ({self.kind}) differs at {self.field}: logged {_shown(self.logged)}, "
                f"re-run {_shown(self.rerun)}")


class TapedFailure(Exception):
    """A read-back participant failed here in the log: the faults it logged and the reason the episode ended."""

    def __init__(self, reason: str, faults: list[FaultReport], t: float) -> None:
        super().__init__(reason)
        self.reason, self.faults, self.t = reason, faults, t


class TapedUserReply(UserReply, kw_only=True):
    """A user's turn read back from the tape (with the model calls logged before it), the virtual time it was
    spoken at and the seq past it (0 for a live reply)."""

    t: float
    step_end: int = 0


MISSING = object()  # a step the tape ends inside: the participant is asked again


class TapedReply(AgentReply, kw_only=True):
    """One agent answer read back from the tape (its tool calls or its turn, with the faults it reported), with
    its virtual time and the seq past its faults and past its events."""

    t: float
    after_faults: int
    step_end: int


class RawEpisode:
    """One episode's logged lines, each decoded when it is first asked for: a tape of these checks a re-run event
    by its encoding (what the run paid to write it), not by decoding the log (which costs three times more)."""

    __slots__ = ("lines", "decoded")

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self.decoded: list[Event | None] = [None] * len(lines)

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, seq: int) -> Event:
        event = self.decoded[seq]
        if event is None:
            event = self.decoded[seq] = decode(self.lines[seq])
        return event

    def __iter__(self) -> Iterator[Event]:
        return (self[seq] for seq in range(len(self.lines)))


_encode = msgspec.json.Encoder().encode  # as the log writer encodes
_WALL = re.compile(rb',"wall":(-?[0-9]+)')


class Tape:
    """The events an episode starts with: ``events[seq]`` for seq < ``end``; the first ``copied`` are taken as
    they are; the first ``logged`` are in the log already (all of them by default), and those after are written
    when taken (a fork's prefix is new to its log: none of it is logged, or a part when a crash cut it)."""

    __slots__ = ("events", "lines", "end", "copied", "logged")

    def __init__(self, events: list[Event] | RawEpisode, copied: int = 0, logged: int | None = None) -> None:
        self.events = events
        self.lines = events.lines if type(events) is RawEpisode else None
        self.end = len(events)  # the first seq past the tape: from there on the episode is live
        self.copied = copied
        self.logged = self.end if logged is None else logged

    def check(self, event: Event) -> None:
        """Check a re-run event against the logged one at its seq, wall clock aside; Divergence if it differs."""
        seq = event.seq
        lines = self.lines
        if lines is not None:
            line = lines[seq]
            wall = _WALL.search(line)
            if wall is not None:
                event.wall = int(wall.group(1))
                if _encode(event) == line:
                    return
        logged = self.events[seq]  # decoded (and upcast, if the log is older)
        event.wall = logged.wall
        if event != logged:
            raise divergence(seq, logged, event)

    def user_step(self, seq: int) -> TapedUserReply | None | object:
        """The user's turn logged from ``seq`` on (after its model calls), or None when the user left there without
        a word; MISSING when the tape ends inside the step; TapedFailure when the logged user failed there."""
        event = self.events[seq]
        if type(event) is UserTurn:
            return TapedUserReply(utterance=event.utterance, frames=event.frames, end=event.end,
                                  reaction=event.reaction, persona=event.persona, final=self._final(seq), t=event.t,
                                  step_end=seq + 1)
        faults, calls, i = self._preamble(seq, "user")
        if i >= self.end:
            return MISSING
        turn = self.events[i]
        if type(turn) is UserTurn:
            return TapedUserReply(utterance=turn.utterance, frames=turn.frames, end=turn.end, reaction=turn.reaction,
                                  model_calls=calls, usage=None if turn.usage is UNSET else turn.usage,
                                  cost=None if turn.cost is UNSET else turn.cost, inferred=turn.inferred is True,
                                  persona=turn.persona, final=self._final(i), t=turn.t, step_end=i + 1)
        if type(turn) is EpisodeEnded and not calls:
            if faults:
                raise TapedFailure(turn.reason, faults, event.t)
            return None
        raise Divergence(i, event_type(turn), "type", event_type(turn), "user_turn")

    def _final(self, seq: int) -> bool:
        """Whether the user's turn at ``seq`` was its last word: it ends the episode, followed by the episode's end."""
        return self.events[seq].end and seq + 1 < self.end and type(self.events[seq + 1]) is EpisodeEnded

    def agent_step(self, seq: int) -> TapedReply | None:
        """The agent's answer logged from ``seq`` on: its faults and model calls, the tools it ran itself, then one
        round of tool calls (told apart from the next round by its virtual time) or its turn; None when the tape
        ends before the answer does (the agent is asked again); TapedFailure when the logged agent failed there."""
        events, end = self.events, self.end
        faults, model_calls, i = self._preamble(seq, "agent")
        executed, i = self._executed(i)
        first = events[i] if i < end else None
        if type(first) is ToolCalled and first.executed_by is UNSET:
            calls, j = [], i
            while j < end and events[j].t == first.t and (type(events[j]) is ToolReturned or (
                    type(events[j]) is ToolCalled and events[j].executed_by is UNSET) or (
                    type(events[j]) is Fault and events[j].who == "tool")):
                e = events[j]
                if type(e) is ToolCalled:
                    calls.append(ToolCall(service=e.service, method=e.method, parameters=e.parameters,
                                          call_id=e.call_id))
                j += 1
            reply = TapedReply(tool_calls=calls, faults=faults, model_calls=model_calls, t=first.t, after_faults=i,
                               step_end=j)
        elif type(first) is AgentTurn:
            reply = TapedReply(utterance=first.utterance, frames=first.frames, state=first.state,
                               tagged_slots=first.tagged_slots, end=first.end, usage=first.usage, cost=first.cost,
                               action=first.action, action_by=first.action_by, prompt=first.prompt,
                               latency=first.latency, faults=faults, model_calls=model_calls,
                               t=first.t, after_faults=i, step_end=i + 1)
        else:
            reply = None
        if reply is not None:
            if executed:  # set apart: msgspec takes more than 16 keywords a few times slower
                reply.executed = executed
            if type(first) is AgentTurn and first.agent_name is not UNSET:
                reply.agent_name = first.agent_name
            return reply
        if first is None:
            return None
        if type(first) is EpisodeEnded and faults and not model_calls:
            raise TapedFailure(first.reason, faults, events[seq].t)
        raise Divergence(i, event_type(first), "type", event_type(first), "an agent step")

    def _executed(self, i: int) -> tuple[list[ExecutedCall], int]:
        """The tools the agent ran itself logged from ``i`` on (each call with what it gave back), and the seq past
        them."""
        events, end, executed = self.events, self.end, []
        while i < end and type(events[i]) is ToolCalled and events[i].executed_by is not UNSET:
            call = events[i]
            if i + 1 == end:
                return executed, end  # the tape ends inside the pair: the agent answers again
            done = events[i + 1]
            if type(done) is not ToolReturned or done.call_id != call.call_id:
                break  # not a pair: a divergence, named by the step
            executed.append(ExecutedCall(service=call.service, method=call.method, parameters=call.parameters,
                                         call_id=call.call_id, results=done.results, error=done.error,
                                         latency=done.latency))
            i += 2
        return executed, i

    def _preamble(self, seq: int, who: str) -> tuple[list[FaultReport], list[ModelCall], int]:
        """What ``who`` logged from ``seq`` on before its step: its model calls (each with the faults logged just
        before it), the faults after the last call (the step's own), and the seq past them. Events of other types
        than a step is made of (a type this version does not know, say) are passed over, to be taken as logged."""
        events, i, faults, calls = self.events, seq, [], []
        while i < self.end:
            event = events[i]
            kind = type(event)
            if kind is Fault and event.who == who:
                faults.append(FaultReport(kind=event.kind, detail=event.detail, attempt=event.attempt))
            elif kind is ModelCalled and event.role == who:
                calls.append(model_call(event, faults))
                faults = []
            elif kind in _STEP_TYPES:
                break
            i += 1
        return faults, calls, i


EMPTY = Tape([])
_STEP_TYPES = (UserTurn, AgentTurn, ToolCalled, ToolReturned, Fault, EpisodeEnded, EpisodeStarted)


class Fork(msgspec.Struct, kw_only=True):
    """Where a new episode comes from: its parent's ``episode_started`` (scenario snapshot, trial, seed) and
    the parent's events it copies (seq 1 to ``seq`` - 1); a fork has a branch name, a replay none. ``calls``:
    model calls its user may answer a request from (a replay's: its parent's, see ``calls.reused``)."""

    started: EpisodeStarted
    prefix: list[Event] = []
    branch: str | None = None
    calls: dict[str, ModelCall] = {}

    @property
    def seq(self) -> int:
        """The parent's seq the episode branches off at: the first of its events that is not the parent's."""
        return len(self.prefix) + 1

    def ref(self, run: str) -> tuple[EpisodeRef, str | None]:
        """The parent as ``episode_started`` names it, and its run id when it is not ``run``."""
        parent = self.started
        return EpisodeRef(ep=parent.ep, seq=self.seq), (parent.run if parent.run != run else None)

    def copies(self, run: str, ep: str, t: float) -> list[Event]:
        """The copied prefix as the new episode ``ep`` of ``run`` logs it: re-stamped, starting at virtual time
        ``t`` instead of the parent's start (the fork runs when its slot frees); seq and wall kept."""
        shift = t - self.started.t
        return [msgspec.structs.replace(e, run=run, ep=ep, t=e.t + shift) for e in self.prefix]


def fork_at_turn(events: list[Event], turns: int, branch: str | None) -> Fork | None:
    """A fork of the logged episode ``events`` copying its first ``turns`` turns (user and agent turns both
    count; the agent's tool calls belong to its turn), or None when the episode has no turn after them (a
    fork copying the whole dialogue would have nothing left to run: its user would be asked to answer the
    end)."""
    started = events[0]
    if type(started) is not EpisodeStarted:
        return None
    end, seen = 1, 0
    while seen < turns:
        if end >= len(events):
            return None
        if type(events[end]) in (UserTurn, AgentTurn):
            seen += 1
        end += 1
    if not any(type(e) in (UserTurn, AgentTurn) for e in events[end:]):
        return None
    return Fork(started=started, prefix=events[1:end], branch=branch)


def divergence(seq: int, logged: Event, rerun: Event) -> Divergence:
    """The Divergence between a logged event and a re-run one: the first field that differs, and its values."""
    if type(logged) is not type(rerun):
        return Divergence(seq, event_type(logged), "type", event_type(logged), event_type(rerun))
    field, a, b = first_difference(logged, rerun)
    return Divergence(seq, event_type(logged), field, a, b)


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any]:
    """The path of the first place where ``a`` and ``b`` differ (fields, list indices, dict keys), and the
    two values there (the wall clock is not compared)."""
    if isinstance(a, msgspec.Struct) and type(a) is type(b):
        for name in a.__struct_fields__:
            if name == "wall":
                continue
            x, y = getattr(a, name), getattr(b, name)
            if x != y:
                return first_difference(x, y, f"{path}.{name}" if path else name)
    elif isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
        if len(a) != len(b):
            return f"{path} (length)", len(a), len(b)
    elif isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return f"{path}[{key!r}]", a.get(key, "(absent)"), b.get(key, "(absent)")
            if a[key] != b[key]:
                return first_difference(a[key], b[key], f"{path}[{key!r}]")
    return path or "(value)", a, b


def _shown(value: Any) -> str:
    text = repr(msgspec.to_builtins(value)) if isinstance(value, msgspec.Struct) else repr(value)
    return text if len(text) <= 200 else text[:197] + "..."
