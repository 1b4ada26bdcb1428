"""TC-Bot / seed-style simulated-dialogue files: strict reading, and conversion of each episode to events.

A file is one JSON object ``{episode_id: [act, ...]}``; an act is an object with ``diaact`` (a string),
``inform_slots`` and ``request_slots`` (objects) and ``speaker`` ("user" or "agent"); other keys are
allowed and kept. Each episode becomes one dialogsim episode (episode id = its key, in file order) whose
turns carry the act verbatim in ``raw_act`` (so that the rl_compat projection gives back exactly what the
seed converter writes) and no SGD frames; its ``episode_ended`` is outcome "success", reason "imported":
an imported dialogue is a record, not judged (judge it with the rl projection's ``success_slot``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from ..engine.errors import UserError
from ..engine.events import AgentTurn, EpisodeEnded, EpisodeStarted, Event, UserTurn
from ..engine.log import check_new_run_dir, write_events

SCENARIO_KIND = "tcbot_dialogue"
CORPUS = "tcbot_corpus"
SPEAKERS = ("user", "agent")
_SLOT_KEYS = ("inform_slots", "request_slots")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def act_problem(act: Any) -> str | None:
    """What is wrong with one act, or None."""
    if not isinstance(act, dict):
        return f"expected an act object, got {_kind(act)}"
    for key in ("diaact", *_SLOT_KEYS, "speaker"):
        if key not in act:
            return f"missing {key!r}"
    if not isinstance(act["diaact"], str):
        return f"'diaact' must be a string, got {_kind(act['diaact'])}"
    for key in _SLOT_KEYS:
        if not isinstance(act[key], dict):
            return f"{key!r} must be an object, got {_kind(act[key])}"
    if act["speaker"] not in SPEAKERS:
        return f"'speaker' must be 'user' or 'agent', got {json_text(act['speaker'])}"
    return None


def json_text(value: Any) -> str:
    """A value as short JSON, for messages."""
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= 40 else text[:37] + "..."


def read_tcbot_file(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Every episode of a file, checked; a UserError names the file, episode and act at fault."""
    path = Path(path)
    try:
        data = msgspec.json.decode(path.read_bytes())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a TC-Bot dialogue file") from None
    except msgspec.DecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object {{episode_id: [act, ...]}}, got {_kind(data)}")
    for episode, acts in data.items():
        if not episode:
            raise UserError(f'{path}: episode "": an episode id must not be empty')
        if not isinstance(acts, list):
            raise UserError(f"{path}: episode {episode!r}: expected a list of acts, got {_kind(acts)}")
        for index, act in enumerate(acts):
            problem = act_problem(act)
            if problem is not None:
                raise UserError(f"{path}: episode {episode!r}, act {index}: {problem}")
    return data


def episode_events(episode: str, acts: list[dict[str, Any]], run_id: str) -> list[Event]:
    """The events of one imported episode: act i is turn i at virtual time i seconds."""
    scenario = {"id": episode, "kind": SCENARIO_KIND, "data": {"episode_id": episode}}
    out: list[Event] = [EpisodeStarted(run=run_id, ep=episode, seq=0, t=0.0, wall=0, scenario_id=episode, seed=0,
                                       scenario=scenario, user=CORPUS, agent=CORPUS)]
    for index, act in enumerate(acts):
        turn_type = UserTurn if act["speaker"] == "user" else AgentTurn
        text = act.get("nl")  # TC-Bot acts may carry their natural-language rendering
        out.append(turn_type(run=run_id, ep=episode, seq=index + 1, t=float(index), wall=0, turn=index,
                             utterance=text if isinstance(text, str) else "", raw_act=act))
    out.append(EpisodeEnded(run=run_id, ep=episode, seq=len(acts) + 1, t=float(len(acts)), wall=0,
                            outcome="success", reason="imported", turns=len(acts)))
    return out


def import_tcbot(src: str | Path, out: str | Path, *, run_id: str | None = None) -> tuple[int, int]:
    """Import a TC-Bot-style file into a new run directory; returns (episodes, acts)."""
    src, out = Path(src), Path(out)
    check_new_run_dir(out)
    episodes = read_tcbot_file(src)
    run_id = run_id or f"tcbot-{src.stem}"
    config = {"command": "import tcbot", "source": str(src.resolve())}

    def events() -> Any:
        for episode, acts in episodes.items():
            yield from episode_events(episode, acts, run_id)

    write_events(out, events(), run_id=run_id, config=config)
    return len(episodes), sum(len(acts) for acts in episodes.values())
