"""CLI subcommands: each module here defines ``register(subparsers)`` and is listed in COMMANDS."""

COMMANDS = [
    "run",
    "events",
    "pack",
    "serve_agent",
    "project", "import_", "eval_dst",
    "stats",
    "evaluate",
]
