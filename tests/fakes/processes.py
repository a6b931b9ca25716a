"""The real server as a separate process (`python -m server`), for kill and signal tests."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_server_process(
    cwd: Path,
    port: int,
    env: dict[str, str],
    *,
    capture: bool = False,
    extra: list[str] | None = None,
) -> asyncio.subprocess.Process:
    """Start the shipped config with `env` overrides (and `extra` CLI flags); return once
    /healthz answers.

    With `capture`, stdout and stderr go to `proc.stdout` for the test to read.
    """
    output = asyncio.subprocess.PIPE if capture else asyncio.subprocess.DEVNULL
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "server",
        "--config",
        str(REPO / "config.toml"),
        "--port",
        str(port),
        *(extra or []),
        cwd=cwd,
        env={**os.environ, **env},
        stdout=output,
        stderr=asyncio.subprocess.STDOUT if capture else output,
    )
    async with httpx.AsyncClient() as http, asyncio.timeout(30):
        while True:  # poll the real endpoint until it answers (bounded by the timeout)
            try:
                await http.get(f"http://127.0.0.1:{port}/healthz")
                return proc
            except httpx.TransportError:
                assert proc.returncode is None, "server exited during startup"
                await asyncio.sleep(0.05)
