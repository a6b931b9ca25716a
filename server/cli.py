"""`agent-server serve|chat`: run the server, or talk to one from the terminal."""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from client import DEFAULT_URL

if TYPE_CHECKING:
    import uvicorn

    from server.settings import Settings

__all__ = ["main", "startup_summary", "uvicorn_config"]

_log = logging.getLogger("server.cli")


def uvicorn_config(app: object, settings: Settings) -> uvicorn.Config:
    """The uvicorn settings the server is measured with: sans-I/O websockets, no deflate,
    and the connection guards of server/guard.py."""
    import uvicorn  # here and in _serve, not at the top: `agent-server chat` needs none of it

    from server.guard import (
        MAX_HEAD_BYTES,
        DenialLogFilter,
        LingeringWebSocketProtocol,
        RepeatedLogFilter,
        connection_cap,
        guarded_protocol,
    )
    from server.redact import install_log_redaction

    server = settings.server
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=server.host,
        port=server.port,
        http=guarded_protocol(
            connection_cap(server.max_connections),
            server.request_timeout_s,
            server.write_timeout_s,
            server.max_silent_per_source,
        ),
        h11_max_incomplete_event_size=2 * MAX_HEAD_BYTES,  # the guard answers 431 first
        timeout_keep_alive=max(1, round(server.keep_alive_timeout_s)),
        ws=LingeringWebSocketProtocol,  # uvicorn's websockets-sansio, closing gently
        ws_max_size=server.max_message_bytes,
        ws_ping_interval=server.ping_interval_s,
        ws_ping_timeout=server.ping_timeout_s,
        ws_per_message_deflate=False,
        loop="auto",  # uvloop (a dependency) where it is installed, else asyncio's own loop
        lifespan="on",
        log_level=server.log_level,
        timeout_graceful_shutdown=max(1, round(server.shutdown_timeout_s)),
    )
    install_log_redaction()  # after uvicorn.Config has set up its loggers
    error_log = logging.getLogger("uvicorn.error")
    for kind in (DenialLogFilter, RepeatedLogFilter):
        if not any(isinstance(f, kind) for f in error_log.filters):
            error_log.addFilter(kind())
    return config


def _serve(args: argparse.Namespace) -> int:
    from server.settings import ConfigError, load_settings

    config_path: Path | None = args.config
    if config_path is None and Path("config.toml").is_file():
        config_path = Path("config.toml")
    try:
        settings = load_settings(config_path, {"server": {"host": args.host, "port": args.port}})
    except ConfigError as exc:
        print(f"agent-server: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.server.log_level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    with ExitStack() as stack:
        if settings.llm.unconfigured and settings.llm.bundled_model and not args.worker:
            try:
                settings = _with_bundled_model(settings, config_path, args, stack)
            except (OSError, RuntimeError, subprocess.SubprocessError, TimeoutError) as exc:
                print(f"agent-server: cannot start the bundled model: {exc}", file=sys.stderr)
                return 2
        return _serve_with(args, settings, config_path)


def _with_bundled_model(
    settings: Settings, config_path: Path | None, args: argparse.Namespace, stack: ExitStack
) -> Settings:
    """No model is configured: start the bundled small local model (built and cached on
    first use, minutes once) and serve with it. Workers find it through the environment."""
    from server.local_model import BUNDLED_NAME, start_bundled_model
    from server.settings import load_settings

    _log.warning(
        "no model is configured: starting the bundled local model (%s on llama.cpp). It is a "
        "small model, for trying the server out: it gets simple tasks wrong. To use a real "
        "one, set OPENAI_API_KEY, or OPENAI_BASE_URL and AGENT__LLM__MODEL (docs/models.md)",
        BUNDLED_NAME,
    )
    server = start_bundled_model()
    stack.callback(server.close)
    _log.info("bundled model serving at %s", server.base_url)
    os.environ["OPENAI_BASE_URL"] = server.base_url
    os.environ["AGENT__LLM__MODEL"] = BUNDLED_NAME
    os.environ.setdefault(settings.llm.api_key_env, "unused")
    os.environ.setdefault("AGENT__LLM__TIMEOUT_S", "300")  # a CPU model: the README's advice
    return load_settings(config_path, {"server": {"host": args.host, "port": args.port}})


def _serve_with(args: argparse.Namespace, settings: Settings, config_path: Path | None) -> int:
    if args.workers > 1:
        return _supervise(args, settings, config_path)
    from server.app import create_app
    from server.guard import raise_open_file_limit
    from server.runner import AgentServer
    from server.settings import ConfigError
    from server.telemetry import configure_tracing

    try:
        app = create_app(settings)
        stop_tracing = configure_tracing(settings.telemetry)
    except ConfigError as exc:
        print(f"agent-server: {exc}", file=sys.stderr)
        return 2
    if args.worker:
        _end_with_the_supervisor()
    else:  # under --workers the supervisor says it, once
        _log.info("%s", startup_summary(settings, config_path))
    raise_open_file_limit()
    sockets = (
        [_reuse_port_socket(settings.server.host, settings.server.port)] if args.worker else None
    )
    try:
        AgentServer(uvicorn_config(app, settings), owns_process=True).run(sockets=sockets)
    finally:
        if stop_tracing is not None:
            stop_tracing()  # send the spans still batched
    return 0


SUPERVISOR_PID = "AGENT_SERVER_SUPERVISOR_PID"  # set by `--workers` for its workers


def _end_with_the_supervisor() -> None:
    """A worker is told to stop (SIGTERM: it shuts down as usual) when its supervisor dies,
    however it dies: after a `kill -9` of the supervisor its workers served on as orphans,
    holding the port and the store, unseen by what restarts the supervisor. Linux only."""
    supervisor = os.environ.get(SUPERVISOR_PID)
    if sys.platform != "linux" or supervisor is None:
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if str(os.getppid()) != supervisor:  # it died before the request took hold
        os.kill(os.getpid(), signal.SIGTERM)


def _reuse_port_socket(host: str, port: int) -> socket.socket:
    """A listening socket that other workers bind too: the kernel spreads connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def startup_summary(settings: Settings, config_path: Path | None) -> str:
    """One line saying what the server runs with: the config file (or none), the model and
    where it is served, the store. Nothing secret: URLs lose their user, password and query."""
    from agent.adapters.openai_chat import DEFAULT_BASE_URL
    from server.settings import safe_url

    llm, storage = settings.llm, settings.storage
    config = f"config {config_path.resolve()}" if config_path else "no config file: defaults"
    if storage.backend == "sqlite":
        store = f"sqlite {storage.sqlite_path}"
    else:
        store = f"mongodb {safe_url(storage.mongodb_uri)} database {storage.mongodb_database}"
    model = f"model {llm.model} at {safe_url(llm.base_url or DEFAULT_BASE_URL)}"
    return f"{config}; {model}; storage {store}"


def _supervise(args: argparse.Namespace, settings: Settings, config_path: Path | None) -> int:
    """Run `args.workers` server processes on one port (SO_REUSEPORT) and one store.

    Each worker is a whole server (its own event loop, runs and connections); they meet in
    the store (`storage.shared`, set here for every backend), so any of them serves any
    session. SIGTERM/SIGINT are passed on, and each worker shuts down as a lone server would.
    A worker that exits on its own (it crashed, or could not start) stops the others and the
    server exits with an error, so that its supervisor (systemd, Kubernetes) restarts all of
    it instead of it serving on with fewer workers; its runs are closed by the next start.
    """
    host, port = settings.server.host, settings.server.port
    if port == 0:  # from the flag, the file or the environment alike
        print(
            "agent-server: --workers needs a fixed port: server.port is 0 (any free port), "
            "which would give each worker its own",
            file=sys.stderr,
        )
        return 2
    _log.info("%s", startup_summary(settings, config_path))
    command = [sys.executable, "-m", "server", "--worker"]  # __main__ adds "serve"
    for flag, value in (("--config", config_path), ("--host", args.host), ("--port", args.port)):
        if value is not None:
            command += [flag, str(value)]
    env = {**os.environ, "AGENT__STORAGE__SHARED": "true", SUPERVISOR_PID: str(os.getpid())}
    workers = [subprocess.Popen(command, env=env) for _ in range(args.workers)]
    address = f"[{host}]" if ":" in host else host
    _log.info(
        "%d workers (pids %s) serving on http://%s:%d",
        len(workers),
        ", ".join(str(w.pid) for w in workers),
        address,
        port,
    )
    told_to_stop = threading.Event()

    def forward(signum: int, frame: FrameType | None) -> None:
        told_to_stop.set()
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    exits: queue.Queue[int] = queue.Queue()
    for worker in workers:  # one waiter each: the first exit wakes the loop below
        threading.Thread(target=lambda w=worker: exits.put(w.wait()), daemon=True).start()
    first = exits.get()
    crashed = not told_to_stop.is_set()
    if crashed:
        print(
            f"agent-server: a worker exited on its own (code {first}); stopping the others",
            file=sys.stderr,
        )
        forward(signal.SIGTERM, None)
    codes = [worker.wait() for worker in workers]
    clean = (0, -signal.SIGTERM, -signal.SIGINT)  # uvicorn re-raises the signal it handled
    code = max((0 if code in clean else abs(code) or 1 for code in codes), default=0)
    return code or int(crashed)


def _chat(args: argparse.Namespace) -> int:
    from client.terminal import run_terminal_chat

    return run_terminal_chat(args.url, args.session, args.token)


def _workers(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {count})")
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent-server", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the server")
    serve.add_argument(
        "--config", type=Path, default=None, help="config file (default: ./config.toml if present)"
    )
    serve.add_argument("--host", default=None, help="address to listen on (server.host)")
    serve.add_argument("--port", type=int, default=None, help="port to listen on (server.port)")
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="server processes on this port and store (SO_REUSEPORT); docs/deploy.md",
    )
    serve.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    serve.set_defaults(func=_serve)
    chat = commands.add_parser("chat", help="chat with a running server from the terminal")
    chat.add_argument(
        "--url",
        default=DEFAULT_URL,
        help="the server's WebSocket, or its http:// address (default: %(default)s)",
    )
    chat.add_argument("--session", default=None, help="resume this session id")
    chat.add_argument("--token", default=None, help="bearer token, when the server needs one")
    chat.set_defaults(func=_chat)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
