"""`agent-server serve|chat`: run the server, or talk to one from the terminal."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import uvicorn

from server.guard import (
    MAX_HEAD_BYTES,
    RepeatedLogFilter,
    connection_cap,
    guarded_protocol,
    raise_open_file_limit,
)
from server.redact import install_log_redaction
from server.runner import AgentServer
from server.settings import ConfigError, Settings, load_settings

__all__ = ["main", "uvicorn_config"]


def uvicorn_config(app: object, settings: Settings) -> uvicorn.Config:
    """The uvicorn settings the server is measured with: sans-I/O websockets, no deflate,
    and the connection guards of server/guard.py."""
    server = settings.server
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=server.host,
        port=server.port,
        http=guarded_protocol(connection_cap(server.max_connections), server.request_timeout_s),
        h11_max_incomplete_event_size=2 * MAX_HEAD_BYTES,  # the guard answers 431 first
        timeout_keep_alive=max(1, round(server.keep_alive_timeout_s)),
        ws="websockets-sansio",
        ws_max_size=server.max_message_bytes,
        ws_ping_interval=server.ping_interval_s,
        ws_ping_timeout=server.ping_timeout_s,
        ws_per_message_deflate=False,
        lifespan="on",
        log_level=server.log_level,
        timeout_graceful_shutdown=max(1, round(server.shutdown_timeout_s)),
    )
    install_log_redaction()  # after uvicorn.Config has set up its loggers
    error_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, RepeatedLogFilter) for f in error_log.filters):
        error_log.addFilter(RepeatedLogFilter())
    return config


def _serve(args: argparse.Namespace) -> int:
    from server.app import create_app
    from server.telemetry import configure_tracing

    config_path: Path | None = args.config
    if config_path is None and Path("config.toml").is_file():
        config_path = Path("config.toml")
    try:
        settings = load_settings(config_path, {"server": {"host": args.host, "port": args.port}})
        app = create_app(settings)
        stop_tracing = configure_tracing(settings.telemetry)
    except ConfigError as exc:
        print(f"agent-server: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.server.log_level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    raise_open_file_limit()
    try:
        AgentServer(uvicorn_config(app, settings)).run()
    finally:
        if stop_tracing is not None:
            stop_tracing()  # send the spans still batched
    return 0


def _chat(args: argparse.Namespace) -> int:
    from client.terminal import run_terminal_chat

    return run_terminal_chat(args.url, args.session, args.token)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent-server", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the server")
    serve.add_argument(
        "--config", type=Path, default=None, help="config file (default: ./config.toml if present)"
    )
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.set_defaults(func=_serve)
    chat = commands.add_parser("chat", help="chat with a running server from the terminal")
    chat.add_argument("--url", default="ws://127.0.0.1:8765/ws")
    chat.add_argument("--session", default=None, help="resume this session id")
    chat.add_argument("--token", default=None, help="bearer token, when the server needs one")
    chat.set_defaults(func=_chat)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
