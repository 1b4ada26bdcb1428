"""``dialogsim serve-agent``: serve a built-in agent over HTTP (dialogsim/1 or OpenAI chat completions)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from ...engine.errors import UserError


def configure(p: argparse.ArgumentParser) -> None:
    """The ``serve-agent`` command's arguments."""
    p.description = ("Serve a built-in agent over HTTP, as a reference server and as the counterpart of --agent "
                     "http:URL / openai:URL. Binds 127.0.0.1 by default; with --port 0 it prints 'listening on "
                     "http://HOST:PORT' once bound.")
    p.add_argument("--agent", required=True, help="built-in agent spec, e.g. schema or scripted")
    p.add_argument("--protocol", choices=["native", "openai"], default="native",
                   help="native: dialogsim/1 at POST /; openai: POST /v1/chat/completions (streaming too) and "
                        "GET /v1/models")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8080, help="port (0 picks a free one; default 8080)")
    p.add_argument("--scenarios", help="scenario set the agent's factory is built with (default: builtin)")
    p.add_argument("--agent-opt", action="append", default=[], metavar="KEY=VALUE", help="agent option")
    p.add_argument("--max-body", type=int, default=4 * 1024 * 1024, help="request body limit in bytes")
    p.add_argument("--model", help="the model name GET /v1/models lists (default: the agent spec)")
    p.add_argument("--max-sessions", type=int, default=1024,
                   help="per-episode agents kept in memory; others are rebuilt by replay (default 1024)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from ...engine.registry import agent_factory, load_scenarios, parse_options, parse_spec
    from .server import make_app, serve_forever

    if parse_spec(args.agent)[0] in ("http", "openai"):
        raise UserError(f"--agent {args.agent}: serve-agent serves built-in agents, not remote ones")
    if not 0 <= args.port < 65536:
        raise UserError(f"--port {args.port}: expected 0..65535")
    if args.max_body < 1024 or args.max_sessions < 1:
        raise UserError("--max-body must be >= 1024 and --max-sessions >= 1")
    scenarios = load_scenarios(args.scenarios)
    make_agent = agent_factory(args.agent, scenarios, parse_options(args.agent_opt, "--agent-opt"))
    app = make_app(make_agent, args.protocol, max_body=args.max_body, max_sessions=args.max_sessions,
                   model=args.model or args.agent)

    def announce(line: str) -> None:
        print(line, flush=True)

    async def main() -> None:
        task = asyncio.ensure_future(serve_forever(app, args.host, args.port, announce))
        loop = asyncio.get_running_loop()
        for s in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(s, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    try:
        asyncio.run(main())
    except OSError as exc:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    print("stopped", file=sys.stderr)
    return 0
