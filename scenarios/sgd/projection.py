"""The ``sgd`` projection: every episode as an SGD dialogue, written as an SGD split directory.

Output: ``dialogues_001.json``, ``dialogues_002.json``, ... with 128 dialogues each, in the order the
episodes were first projected (log order of episode ends), and ``schema.json`` with the schemas of the
services used (from the episodes' scenario snapshots), sorted by service name. Files are laid out as the
real ones (keys in alphabetical order, two-space indent), so an imported real split projects back to
byte-identical dialogues.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import msgspec

from ...engine.events import EpisodeStarted
from .corpus import encode_dialogues, events_to_dialogue, scenario_data, snapshot_schemas
from .sgdx import add_sgdx_arguments, sgdx_from_args

DIALOGUES_PER_FILE = 128


class SgdOutput(msgspec.Struct):
    """One episode's fold output: the dialogue and the schemas of its services."""

    dialogue: Any
    schemas: dict[str, Any]


class _RawOutput(msgspec.Struct):
    dialogue: msgspec.Raw
    schemas: dict[str, msgspec.Raw]


_raw_decoder = msgspec.json.Decoder(_RawOutput)
_encoder = msgspec.json.Encoder()


class SgdProjection:
    """Episodes -> SGD dialogues; with an SGD-X map, names are renamed to that variant."""

    name = "sgd"
    version = 1

    def __init__(self, options: dict[str, Any]) -> None:
        # options["sgdx"]: an sgdx.SgdxMap, or None for the original names.
        self.sgdx = options.get("sgdx")

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The SGD-X options, for ``dialogsim project --to sgd``."""
        add_sgdx_arguments(parser)

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> "SgdProjection":
        """The projection the command-line options ask for."""
        return cls({"sgdx": sgdx_from_args(args)})

    def fold_options(self) -> dict[str, Any]:
        return {"sgdx": self.sgdx.variant if self.sgdx is not None else None}

    def fold(self, events: list[Any]) -> SgdOutput | None:
        dialogue = events_to_dialogue(events)
        if dialogue is None:
            return None
        started = next((e for e in events if isinstance(e, EpisodeStarted)), None)
        known = snapshot_schemas(scenario_data(started))
        schemas: dict[str, Any] = {}
        if self.sgdx is not None:
            for service in dialogue.services:
                # a log imported with --sgdx already carries variant names and schemas
                schema = self.sgdx.schema(service) or known.get(service)
                if schema is not None:
                    schemas[schema["service_name"]] = schema
            dialogue = self.sgdx.dialogue(dialogue)
        else:
            schemas = {s: known[s] for s in dialogue.services if s in known}
        return SgdOutput(dialogue=dialogue, schemas=schemas)

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
        batch: list[msgspec.Raw] = []
        schemas: dict[str, msgspec.Raw] = {}
        index = 0
        for raw in outputs:
            out = _raw_decoder.decode(raw)
            batch.append(out.dialogue)
            for name, schema in out.schemas.items():
                schemas.setdefault(name, schema)
            if len(batch) == DIALOGUES_PER_FILE:
                index += 1
                yield f"dialogues_{index:03d}.json", encode_dialogues(batch)
                batch = []
        if batch:
            index += 1
            yield f"dialogues_{index:03d}.json", encode_dialogues(batch)
        yield "schema.json", encode_dialogues([schemas[name] for name in sorted(schemas)])

