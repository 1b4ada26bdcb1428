"""Operational logs (structlog) on stderr: console for people, JSON lines for machines."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    """Send structlog output to stderr as ``console`` or ``json``, at ``level`` and above."""
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=_StderrLogger,
        cache_logger_on_first_use=False,
    )


class _StderrLogger:
    """Writes each rendered line to whatever ``sys.stderr`` is now, not to the one seen at configuration.

    (A test harness or an embedding program may replace and close stderr between runs.)
    """

    def __init__(self, *args: object) -> None:
        pass

    def msg(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A structlog logger bound to a component name."""
    return structlog.get_logger(component=name)
