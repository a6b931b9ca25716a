"""The real server as a separate process (`python -m server`), for kill and signal tests."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def _below_ephemeral() -> range:
    """Ports below the kernel's ephemeral range: no client socket is given one of them."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(max(1024, low - 12_000), low)


def free_port() -> int:
    """A loopback port nothing listens on now, for a server about to start. Not one the
    kernel hands out (`bind` to port 0, or a client's `connect`): in the second it takes a
    server to start, another test's connection could take that port, or a parallel worker
    its server's, and the health check would then reach somebody else's server."""
    ports, pick = _below_ephemeral(), random.SystemRandom()
    for _ in range(200):
        port = pick.choice(ports)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {ports}")


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
        # This checkout's packages, not those the venv was installed from (a worktree).
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
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
