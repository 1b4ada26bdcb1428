"""The ``otel`` projection: a run's spans as OTLP/JSON ``ExportTraceServiceRequest`` files.

Files ``traces_001.json``, ``traces_002.json``, ... hold the spans of 128 episodes each (in projection
order), as one request each: ``{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans"}]}]}`` with
OTLP/JSON's encoding (hex trace and span ids, integer enums, 64-bit integers as decimal strings).
``dialogsim project RUN --to otel --otlp-endpoint URL`` also posts each file to a collector (otlp_http.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import msgspec

from ... import __version__
from .episode import EpisodeProjection, EpisodeRecord
from .spans import CALL_LLM, ERROR_TYPE, Span, episode_spans, span_kind

EPISODES_PER_FILE = 128
SCOPE = "dialogsim.scenarios.evals"

# OTLP's SpanKind and StatusCode numbers
KIND_INTERNAL, KIND_CLIENT = 1, 3
STATUS_ERROR = 2


class OtelOutput(msgspec.Struct):
    """One episode's fold output: its run id and spans."""

    run: str
    spans: list[Span]


_decoder = msgspec.json.Decoder(OtelOutput)


def any_value(value: Any) -> dict[str, Any]:
    """A Python value as an OTLP/JSON AnyValue (a list of scalars an array, anything else but a scalar its JSON
    text)."""
    if isinstance(value, list) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"stringValue": msgspec.json.encode(value).decode()}


def otlp_attributes(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    """Attributes as OTLP/JSON KeyValues; None values are left out (OTLP has no null)."""
    return [{"key": k, "value": any_value(v)} for k, v in attributes.items() if v is not None]


def otlp_span(span: Span) -> dict[str, Any]:
    """One span in OTLP/JSON."""
    out: dict[str, Any] = {"traceId": span.trace_id, "spanId": span.span_id}
    if span.parent_span_id:
        out["parentSpanId"] = span.parent_span_id
    out.update(name=span.name, kind=KIND_CLIENT if span_kind(span.name) == CALL_LLM else KIND_INTERNAL,
               startTimeUnixNano=str(span.start_time), endTimeUnixNano=str(span.end_time),
               attributes=otlp_attributes(span.attributes))
    if ERROR_TYPE in span.attributes:
        out["status"] = {"code": STATUS_ERROR, "message": str(span.attributes[ERROR_TYPE])}
    return out


def otlp_request(run: str, spans: list[Span]) -> dict[str, Any]:
    """An ExportTraceServiceRequest of one run's spans."""
    resource = {"attributes": otlp_attributes({"service.name": "dialogsim", "dialogsim.run.id": run})}
    scope = {"name": SCOPE, "version": __version__}
    return {"resourceSpans": [{"resource": resource,
                               "scopeSpans": [{"scope": scope, "spans": [otlp_span(s) for s in spans]}]}]}


class OtelProjection(EpisodeProjection):
    """Episodes -> OTLP/JSON trace files."""

    name = "otel"
    version = 1

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        endpoint = options.get("otlp_endpoint") or None
        if endpoint is not None:
            from .otlp_http import traces_url

            endpoint = traces_url(endpoint)  # a bad URL is refused before anything is written
        self.endpoint = endpoint

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """``--otlp-endpoint``, for ``dialogsim project --to otel``."""
        parser.add_argument("--otlp-endpoint", metavar="URL",
                            help="also send the traces to this OTLP/HTTP collector (default path /v1/traces)")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> "OtelProjection":
        """The projection the command-line options ask for."""
        return cls({"otlp_endpoint": args.otlp_endpoint})

    def fold_record(self, record: EpisodeRecord) -> OtelOutput:
        return OtelOutput(run=record.run, spans=episode_spans(record, self.facts))

    def render(self, outputs: Iterator[bytes]) -> Iterator[tuple[str, bytes]]:
        batch: list[OtelOutput] = []
        index = 0
        for raw in outputs:
            batch.append(_decoder.decode(raw))
            if len(batch) == EPISODES_PER_FILE:
                index += 1
                yield _file(index, batch)
                batch = []
        if batch:
            index += 1
            yield _file(index, batch)

    def publish(self, out_dir: str, files: list[str]) -> str | None:
        """Send the written files to the OTLP/HTTP collector named by ``--otlp-endpoint``, if any."""
        if self.endpoint is None:
            return None
        from .otlp_http import send_files

        return send_files(self.endpoint, out_dir, files)


def _file(index: int, batch: list[OtelOutput]) -> tuple[str, bytes]:
    spans = [s for out in batch for s in out.spans]
    return f"traces_{index:03d}.json", msgspec.json.encode(otlp_request(batch[0].run, spans)) + b"\n"

