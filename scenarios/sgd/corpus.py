"""SGD dialogue files: strict reading, validation, and conversion of dialogues to events and back.

The structs below mirror the real files key for key (fields in the files' alphabetical key order), so a
dialogue decoded here and encoded again, indented by two spaces, gives the original bytes. Conversion is
pure: ``dialogue_to_events`` and ``events_to_dialogue`` do no I/O; the readers take a path and return
objects, one file at a time, so an import never holds more than one file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from ...engine.errors import UserError
from ...engine.events import (Act, AgentTurn, DialogueState, EpisodeEnded, EpisodeStarted, Event, Frame, SlotSpan,
                              ToolCalled, ToolReturned, UserTurn)
from .schema import names_intents

SCENARIO_KIND = "sgd_dialogue"


class SgdAct(msgspec.Struct, forbid_unknown_fields=True):
    """One SGD action as in the files."""

    act: str
    canonical_values: list[str]
    slot: str
    values: list[str]


class SgdSpan(msgspec.Struct, forbid_unknown_fields=True):
    """One slot span as in the files."""

    exclusive_end: int
    slot: str
    start: int


class SgdState(msgspec.Struct, forbid_unknown_fields=True):
    """A user frame's dialogue state as in the files."""

    active_intent: str
    requested_slots: list[str]
    slot_values: dict[str, list[str]]


class SgdCall(msgspec.Struct, forbid_unknown_fields=True):
    """A system frame's service call as in the files."""

    method: str
    parameters: dict[str, str]


class SgdFrame(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One frame: user frames carry ``state``; system frames may carry a call and its results."""

    actions: list[SgdAct]
    service: str
    service_call: SgdCall | UnsetType = UNSET
    service_results: list[dict[str, str]] | UnsetType = UNSET
    slots: list[SgdSpan]
    state: SgdState | UnsetType = UNSET


class SgdTurn(msgspec.Struct, forbid_unknown_fields=True):
    """One turn of a dialogue."""

    frames: list[SgdFrame]
    speaker: Literal["USER", "SYSTEM"]
    utterance: str


class SgdDialogue(msgspec.Struct, forbid_unknown_fields=True):
    """One SGD dialogue."""

    dialogue_id: str
    services: list[str]
    turns: list[SgdTurn]


_file_decoder = msgspec.json.Decoder(list[SgdDialogue])
_raw_list_decoder = msgspec.json.Decoder(list[Any])
_encoder = msgspec.json.Encoder()


# -- reading and validating ---------------------------------------------------------------------------


PER_FRAME_FILE = "dialogues_and_metrics.json"  # written by the official evaluation beside predictions


def dialogue_files(directory: Path) -> list[Path]:
    """The ``dialogues_*.json`` files of a split directory, sorted by name (not the evaluation's output)."""
    return sorted(p for p in directory.glob("dialogues_*.json") if p.name != PER_FRAME_FILE)


def read_dialogue_file(path: Path) -> list[SgdDialogue]:
    """All dialogues of one file, decoded strictly; a UserError names the file, dialogue and turn at fault."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return _file_decoder.decode(raw)
    except msgspec.ValidationError:  # a subclass of DecodeError: the JSON is fine, the shape is not
        pass
    except msgspec.DecodeError as exc:
        detail = str(exc)
        if "truncated" in detail:
            detail = f"the JSON stops unfinished at byte {len(raw)} (a truncated file?)"
        raise UserError(f"{path}: not JSON: {detail}") from None
    raise UserError(_locate_error(path, raw))


def read_corpus(path: str | Path) -> Iterator[list[Event]]:
    """The ``corpus`` plug-in: every dialogue of an SGD split directory as one episode's events, read strictly."""
    directory = Path(path)
    if not directory.is_dir():
        raise UserError(f"{directory}: no such SGD dialogue directory")
    files = dialogue_files(directory)
    if not files:
        raise UserError(f"{directory}: no dialogues_*.json files in it")
    for file in files:
        for dialogue in read_dialogue_file(file):
            yield dialogue_to_events(dialogue, "corpus", {})


def read_dialogue_file_lenient(path: Path) -> tuple[list[SgdDialogue], list[str]]:
    """The valid dialogues of one file and one error line per dialogue that is not SGD.

    A file that is not a JSON list at all is a UserError, as in ``read_dialogue_file``.
    """
    try:
        return read_dialogue_file(path), []
    except UserError:
        pass
    try:
        items = _raw_list_decoder.decode(path.read_bytes())
    except msgspec.ValidationError:
        raise UserError(f"{path}: not an SGD dialogue file (the top level is not a JSON list)") from None
    except msgspec.DecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    good: list[SgdDialogue] = []
    errors: list[str] = []
    for index, item in enumerate(items):
        try:
            good.append(msgspec.convert(item, SgdDialogue))
        except msgspec.ValidationError as exc:
            errors.append(describe_invalid(path, index, item, exc))
    return good, errors


def _locate_error(path: Path, raw: bytes) -> str:
    try:
        items = _raw_list_decoder.decode(raw)
    except msgspec.ValidationError:
        return f"{path}: not an SGD dialogue file (the top level is not a JSON list)"
    for index, item in enumerate(items):
        try:
            msgspec.convert(item, SgdDialogue)
        except msgspec.ValidationError as exc:
            return describe_invalid(path, index, item, exc)
    return f"{path}: not an SGD dialogue file"


def describe_invalid(path: Path, index: int, item: Any, exc: msgspec.ValidationError) -> str:
    """One line naming the file, the dialogue (id or position), the turn and msgspec's account of what is wrong."""
    dialogue_id = item.get("dialogue_id", f"#{index}") if isinstance(item, dict) else f"#{index}"
    message = str(exc)
    where = ""
    # msgspec says e.g. "Expected `str`, got `int` - at `$.turns[3].frames[0].actions`"
    if "$.turns[" in message:
        turn = message.split("$.turns[", 1)[1].split("]", 1)[0]
        where = f", turn {turn}"
    return f"{path}: dialogue {dialogue_id}{where}: not SGD ({message})"


def validate_dialogue(dialogue: SgdDialogue, known_services: set[str] | dict[str, Any] | None) -> str | None:
    """Semantic checks beyond the shape: None when fine, else a message naming the dialogue and turn.

    With the schemas (``known_services`` a dict of raw service schemas) every slot and intent name is
    checked too; this is the one check of both ``import sgd`` and ``pack build``.
    """
    if known_services is not None:
        for service in dialogue.services:
            if service not in known_services:
                return f"dialogue {dialogue.dialogue_id}: unknown service {service!r} (not in the schema)"
    listed = set(dialogue.services)
    names: dict[str, tuple[set[str], set[str]]] = {}  # service -> its schema's slot and intent names
    for index, turn in enumerate(dialogue.turns):
        problem = _turn_problem(turn, listed, known_services, names)
        if problem is not None:
            return f"dialogue {dialogue.dialogue_id}, turn {index}: {problem}"
    return None


def _turn_problem(turn: SgdTurn, listed: set[str], known_services: set[str] | dict[str, Any] | None,
                  names: dict[str, tuple[set[str], set[str]]]) -> str | None:
    """The first semantic problem of one turn, described, or None."""
    user = turn.speaker == "USER"
    size = len(turn.utterance)
    for frame in turn.frames:
        service = frame.service
        if known_services is not None and service not in known_services:
            return f"unknown service {service!r} (not in the schema)"
        if service not in listed:
            return f"frame service {service!r} is not in the dialogue's services"
        if user and frame.state is UNSET:
            return f"user frame for {service} has no state"
        if not user and frame.state is not UNSET:
            return f"system frame for {service} has a state"
        if user and (frame.service_call is not UNSET or frame.service_results is not UNSET):
            return f"user frame for {service} has a service call"
        if (frame.service_call is UNSET) != (frame.service_results is UNSET):
            return f"frame for {service} has service_call and service_results unpaired"
        for span in frame.slots:
            if not 0 <= span.start <= span.exclusive_end <= size:
                return (f"span of slot {span.slot!r} [{span.start}:{span.exclusive_end}] is out of "
                        f"range (utterance has {size} characters)")
        if isinstance(known_services, dict):
            known = names.get(service)
            if known is None:
                known = names[service] = _schema_names(known_services[service])
            problem = _unknown_name(frame, *known)
            if problem is not None:
                return f"frame for {service}: {problem} (not in the schema)"
    return None


# action slots that name nothing in the schema: "" (GOODBYE, SELECT, ...) and "count" (INFORM_COUNT); whether
# "intent" names intents or a slot is for names_intents to say
_ACTION_SLOTS = ("", "count")


def _schema_names(schema: dict[str, Any]) -> tuple[set[str], set[str]]:
    """A service schema's slot names and intent names."""
    return {slot["name"] for slot in schema.get("slots", ())}, {intent["name"] for intent in schema.get("intents", ())}


def _unknown_name(frame: SgdFrame, slots: set[str], intents: set[str]) -> str | None:
    """The first slot or intent name in a frame that its service's schema (its ``slots`` and ``intents``)
    does not define, described."""
    for index, act in enumerate(frame.actions):
        if names_intents(act.act, act.slot, slots):
            for value in act.values:
                if value not in intents:
                    return f"actions[{index}] ({act.act}): unknown intent {value!r}"
        elif act.slot not in slots and act.slot not in _ACTION_SLOTS:
            return f"actions[{index}] ({act.act}): unknown slot {act.slot!r}"
    for span in frame.slots:
        if span.slot not in slots:
            return f"slots: span of unknown slot {span.slot!r}"
    state = frame.state
    if state is not UNSET:
        if state.active_intent != "NONE" and state.active_intent not in intents:
            return f"state.active_intent: unknown intent {state.active_intent!r}"
        for name in state.requested_slots:
            if name not in slots:
                return f"state.requested_slots: unknown slot {name!r}"
        for name in state.slot_values:
            if name not in slots:
                return f"state.slot_values: unknown slot {name!r}"
    call = frame.service_call
    if call is not UNSET:
        if call.method not in intents:
            return f"service_call.method: unknown intent {call.method!r}"
        for name in call.parameters:
            if name not in slots:
                return f"service_call.parameters: unknown slot {name!r}"
    if frame.service_results is not UNSET:
        for row_index, row in enumerate(frame.service_results):
            if not slots.issuperset(row):  # one test per row, in C: result rows hold most of a file's names
                name = next(name for name in row if name not in slots)
                return f"service_results[{row_index}]: unknown slot {name!r}"
    return None


# -- dialogue -> events ---------------------------------------------------------------------------------


def dialogue_to_events(dialogue: SgdDialogue, run_id: str, schemas: dict[str, Any]) -> list[Event]:
    """The events of one imported dialogue: episode id = dialogue id, virtual time = turn index seconds.

    Every annotation is kept: user frames become UserTurn frames; a system frame's service call becomes a
    ToolCalled + ToolReturned pair before the AgentTurn (call ids "<turn>.<frame>"), and the frame itself
    stays in the AgentTurn (empty actions included) so that frame order survives the round trip.
    """
    ep = dialogue.dialogue_id
    scenario = {
        "id": ep,
        "kind": SCENARIO_KIND,
        "data": {
            "dialogue_id": ep,
            "services": list(dialogue.services),
            "schemas": {s: schemas[s] for s in dialogue.services if s in schemas},
        },
    }
    out: list[Event] = [EpisodeStarted(run=run_id, ep=ep, seq=0, t=0.0, wall=0, scenario_id=ep, seed=0,
                                       scenario=scenario, user="sgd_corpus", agent="sgd_corpus")]
    seq = 1
    for index, turn in enumerate(dialogue.turns):
        t = float(index)
        frames = []
        for frame_index, f in enumerate(turn.frames):
            state = f.state
            frames.append(Frame(
                service=f.service,
                actions=[Act(act=a.act, slot=a.slot, values=a.values, canonical_values=a.canonical_values)
                         for a in f.actions],
                slots=[SlotSpan(slot=s.slot, start=s.start, exclusive_end=s.exclusive_end) for s in f.slots],
                state=None if state is UNSET else DialogueState(
                    active_intent=state.active_intent, requested_slots=state.requested_slots,
                    slot_values=state.slot_values),
            ))
            call = f.service_call
            if call is not UNSET:
                call_id = f"{index}.{frame_index}"
                out.append(ToolCalled(run=run_id, ep=ep, seq=seq, t=t, wall=0, call_id=call_id,
                                      service=f.service, method=call.method, parameters=call.parameters))
                out.append(ToolReturned(run=run_id, ep=ep, seq=seq + 1, t=t, wall=0, call_id=call_id,
                                        results=f.service_results))
                seq += 2
        if turn.speaker == "USER":
            out.append(UserTurn(run=run_id, ep=ep, seq=seq, t=t, wall=0, turn=index, utterance=turn.utterance,
                                frames=frames))
        else:
            out.append(AgentTurn(run=run_id, ep=ep, seq=seq, t=t, wall=0, turn=index, utterance=turn.utterance,
                                 frames=frames))
        seq += 1
    out.append(EpisodeEnded(run=run_id, ep=ep, seq=seq, t=float(len(dialogue.turns)), wall=0, outcome="success",
                            reason="imported", turns=len(dialogue.turns)))
    return out


# -- events -> dialogue ---------------------------------------------------------------------------------


def scenario_data(started: EpisodeStarted | None) -> dict[str, Any]:
    """The data part of an episode's scenario snapshot ({"id","kind","data"} or the data itself)."""
    if started is None:
        return {}
    snapshot = started.scenario
    data = snapshot.get("data")
    return data if isinstance(data, dict) else snapshot


def snapshot_schemas(data: dict[str, Any]) -> dict[str, Any]:
    """The service schemas a scenario snapshot carries, by service name (a dict or a list of schemas)."""
    schemas = data.get("schemas")
    if isinstance(schemas, dict):
        return schemas
    if isinstance(schemas, list):
        return {s["service_name"]: s for s in schemas if isinstance(s, dict) and "service_name" in s}
    return {}


def _text(value: Any) -> str:
    # SGD keeps every call parameter and result value as a string; live tools may return numbers.
    return value if isinstance(value, str) else _encoder.encode(value).decode()


_str_rows = list[dict[str, str]]


def _rows(results: list[dict[str, Any]]) -> list[dict[str, str]]:
    try:
        # the common case (every value already a string) is checked in C without building anything new
        msgspec.convert(results, _str_rows)
        return results
    except msgspec.ValidationError:
        return [{k: _text(v) for k, v in row.items()} for row in results]


def _frame_out(frame: Frame, user: bool) -> SgdFrame:
    # positional construction: this runs for every frame, act and span of a projection
    state = frame.state
    if user:
        state = state or DialogueState()
        state_out: SgdState | UnsetType = SgdState(state.active_intent, state.requested_slots, state.slot_values)
    else:
        state_out = UNSET
    return SgdFrame(
        actions=[SgdAct(a.act, a.canonical_values, a.slot, a.values) for a in frame.actions],
        service=frame.service,
        slots=[SgdSpan(s.exclusive_end, s.slot, s.start) for s in frame.slots],
        state=state_out,
    )


def events_to_dialogue(events: list[Any]) -> SgdDialogue | None:
    """One episode's events as an SGD dialogue (None for an episode without turns).

    Tool calls since the previous turn attach to the agent turn's frame of the same service (created,
    with no actions, when the agent produced none for it); with several calls to one service the last
    one is kept, since an SGD frame holds one call. Turns without frames get a frame of the scenario's
    first service, so every turn stays loadable by SGD tools.
    """
    started: EpisodeStarted | None = None
    turns: list[SgdTurn] = []
    calls: dict[str, ToolCalled] = {}
    pending: list[tuple[ToolCalled, ToolReturned | None]] = []
    seen_services: list[str] = []
    for event in events:
        if isinstance(event, UserTurn) or isinstance(event, AgentTurn):
            user = isinstance(event, UserTurn)
            frames = [_frame_out(f, user) for f in event.frames]
            if not user:
                for call, returned in pending:
                    target = next((f for f in frames if f.service == call.service and f.service_call is UNSET),
                                  None)
                    if target is None:
                        target = next((f for f in frames if f.service == call.service), None)
                    if target is None:
                        target = SgdFrame(actions=[], service=call.service, slots=[])
                        frames.append(target)
                    target.service_call = SgdCall(method=call.method,
                                                  parameters={k: _text(v) for k, v in call.parameters.items()})
                    results = returned.results if returned is not None and returned.results is not None else []
                    target.service_results = _rows(results)
                pending = []
            for f in frames:
                if f.service not in seen_services:
                    seen_services.append(f.service)
            turns.append(SgdTurn(frames=frames, speaker="USER" if user else "SYSTEM", utterance=event.utterance))
        elif isinstance(event, ToolCalled):
            calls[event.call_id] = event
            pending.append((event, None))
        elif isinstance(event, ToolReturned):
            call = calls.get(event.call_id)
            if call is not None:
                pending = [(c, event if c is call else r) for c, r in pending]
        elif isinstance(event, EpisodeStarted):
            started = event
    if not turns or started is None:
        return None
    data = scenario_data(started)
    services = data.get("services")
    if not isinstance(services, list) or not services:
        goal = data.get("goal")  # simulated SGD scenarios keep the services in their goal
        services = goal.get("services") if isinstance(goal, dict) else None
    if not isinstance(services, list) or not services:
        services = seen_services or list(snapshot_schemas(data))
    # every frame's service must be listed (a live agent may call a service outside the scenario's)
    services = list(services) + [s for s in seen_services if s not in services]
    dialogue_id = data.get("dialogue_id") or started.ep
    default_service = services[0] if services else ""
    for turn in turns:
        if not turn.frames and default_service:
            user = turn.speaker == "USER"
            turn.frames.append(SgdFrame(actions=[], service=default_service, slots=[],
                                        state=SgdState(active_intent="NONE", requested_slots=[], slot_values={})
                                        if user else UNSET))
    return SgdDialogue(dialogue_id=str(dialogue_id), services=[str(s) for s in services], turns=turns)


def encode_dialogues(dialogues: list[Any]) -> bytes:
    """A dialogues_NNN.json body exactly as the real files are laid out (two-space indent, final newline)."""
    return msgspec.json.format(_encoder.encode(dialogues), indent=2) + b"\n"

