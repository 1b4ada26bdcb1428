"""Sending OTLP/JSON trace files to a collector over OTLP/HTTP (``POST /v1/traces``, application/json)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from ...engine.errors import UserError

TIMEOUT_S = 30.0


def traces_url(endpoint: str) -> str:
    """The traces URL of an endpoint: a base URL gets OTLP's default path ``/v1/traces``; a path is kept."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"--otlp-endpoint {endpoint!r}: expected http://HOST:PORT[/path]")
    if "@" in parts.netloc:
        raise UserError("--otlp-endpoint: the URL carries a credential (user:password@); it would be echoed in "
                        "messages, so it is refused")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urllib.parse.urlunsplit(parts)


def post(url: str, body: bytes) -> dict:
    """POST one OTLP/JSON request; the collector's JSON answer ({} when it sends none)."""
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            answer = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode("utf-8", "replace").strip()
        raise UserError(f"--otlp-endpoint {url}: the collector answered HTTP {exc.code}"
                        + (f": {detail}" if detail else "")) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(f"--otlp-endpoint {url}: cannot send ({reason})") from None
    try:
        parsed = json.loads(answer) if answer.strip() else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def send_files(endpoint: str, out_dir: str, files: list[str]) -> str:
    """Post every trace file to the collector, one request each; a summary line, or a UserError naming the file."""
    url = traces_url(endpoint)
    spans = rejected = 0
    for name in files:
        body = (Path(out_dir) / name).read_bytes()
        answer = post(url, body)
        partial = answer.get("partialSuccess") or {}
        rejected += int(partial.get("rejectedSpans") or 0)
        spans += sum(len(s.get("spans", [])) for r in json.loads(body)["resourceSpans"] for s in r["scopeSpans"])
    if rejected:
        raise UserError(f"--otlp-endpoint {url}: the collector rejected {rejected} of {spans} spans")
    return f"sent {spans} spans in {len(files)} request(s) to {url}"
