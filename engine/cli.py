"""The ``dialogsim`` command line: every subcommand is a ``command`` plug-in (engine/plugins.py).

Only the chosen command's module is imported: ``dialogsim --help`` lists the commands from the registry's
table without importing any of them, so start-up stays cheap whatever the built-ins need.
"""

from __future__ import annotations

import argparse
import sys

from .. import __version__
from . import registry
from .errors import UserError
from .log import CorruptLog
from .oplog import configure_logging


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the problem and where to get help), not a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser: every command listed, the one named in ``argv`` (if any) configured in full."""
    parser = _Parser(prog="dialogsim", description="Event-sourced dialogue simulation.")
    parser.add_argument("--version", action="version", version=f"dialogsim {__version__}")
    _add_global_options(parser, default=True)
    chosen = _chosen(argv if argv is not None else sys.argv[1:])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for name in registry.names("command"):
        words = name.split(" ")
        if len(words) == 1:
            command = sub.add_parser(name, help=registry.help_of("command", name),
                                     description=_sentence(registry.help_of("command", name)))
            if registry.is_group(name):
                groups[name] = command.add_subparsers(dest=f"{name}_kind", required=True, metavar="KIND")
            else:
                _configure(command, name, chosen)
    for name in registry.names("command"):
        words = name.split(" ")
        if len(words) == 2:
            command = groups[words[0]].add_parser(words[1], help=registry.help_of("command", name),
                                                  description=_sentence(registry.help_of("command", name)))
            _configure(command, name, chosen)
    _accept_global_options_everywhere(parser)
    return parser


def _chosen(argv: list[str]) -> set[str]:
    """The command named in ``argv`` (its first two plain words, past the global options' values): only
    that command's module is imported."""
    words: list[str] = []
    values_follow = False
    for arg in argv:
        if values_follow:
            values_follow = False
        elif arg in ("--log-format", "--log-level"):
            values_follow = True
        elif not arg.startswith("-"):
            words.append(arg)
            if len(words) == 2:
                break
    return {words[0], " ".join(words)} if words else set()


def _configure(parser: argparse.ArgumentParser, name: str, chosen: set[str]) -> None:
    if name in chosen:
        registry.lookup("command", name).configure(parser)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "." if text else text


def _add_global_options(parser: argparse.ArgumentParser, default: bool) -> None:
    # below the top level the default is SUPPRESS, so an option left out there keeps the top level's value
    parser.add_argument("--log-format", choices=["console", "json"],
                        default="console" if default else argparse.SUPPRESS,
                        help="format of operational logs on stderr (default: console)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        default="info" if default else argparse.SUPPRESS, help="(default: info)")


def _accept_global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    """Let the global options also follow a subcommand (``dialogsim run --log-format json ...``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in set(action.choices.values()):
                _add_global_options(subparser, default=False)
                _accept_global_options_everywhere(subparser)


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse, run the subcommand, turn a UserError into one line and exit status 2."""
    args = None
    try:
        parser = build_parser(argv)
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "takes_extra", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.extra = extra
        configure_logging(args.log_format, args.log_level)
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        # every command writes its outputs atomically or removes them on the way out, so stopping is safe
        print("dialogsim: interrupted", file=sys.stderr)
        return 130
    except UserError as exc:
        advice = _corrupt_advice(args) if isinstance(exc, CorruptLog) else ""
        print(f"dialogsim: error: {exc}{advice}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `dialogsim events ... | head`
        sys.stderr.close()
        return 0
    except OSError as exc:
        # a file the user pointed at cannot be used (permissions, a directory where a file belongs, disk
        # full): that is about their files, not a bug, so one line rather than a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"dialogsim: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


def _corrupt_advice(args: argparse.Namespace | None) -> str:
    """What the user can do about a corrupt event line, given the command that met it."""
    if args is not None and hasattr(args, "skip_corrupt"):
        return "; rerun with --skip-corrupt to skip such lines and count them"
    command = getattr(args, "command", None) or "this command"
    return f"; dialogsim {command} cannot skip corrupt lines (events, stats and project read on with --skip-corrupt)"


if __name__ == "__main__":
    sys.exit(main())
