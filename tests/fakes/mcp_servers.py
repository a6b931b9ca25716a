"""Real MCP servers for the tests: `mcp-server-time` (PyPI, in .venv) and the npm reference
servers that scripts/test-deps.sh installs into ~/.cache/agent-server/npm."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

NPM_BIN = (
    Path(os.environ.get("AGENT_SERVER_NPM_CACHE", Path.home() / ".cache/agent-server/npm"))
    / "node_modules/.bin"
)


def time_server(**extra: Any) -> dict[str, Any]:
    """`[tools.mcp.<name>]` for mcp-server-time over stdio."""
    return {"command": sys.executable, "args": ["-m", "mcp_server_time"], **extra}


def npm_server(
    package: str, *args: str, wire_log: Path | None = None, **extra: Any
) -> dict[str, Any]:
    """`[tools.mcp.<name>]` for an npm reference server over stdio; skip when not installed.

    With `wire_log`, what the client writes to the server's stdin is also appended to that
    file (through `tee`), so a test can see the messages the server received.
    """
    binary = NPM_BIN / f"mcp-server-{package}"
    if not binary.exists():
        pytest.skip(f"{binary} is missing: run scripts/test-deps.sh")
    if wire_log is None:
        return {"command": str(binary), "args": list(args), **extra}
    script = 'tee -a "$0" | "$@"'
    return {"command": "sh", "args": ["-c", script, str(wire_log), str(binary), *args], **extra}


def descendants(marker: str) -> list[int]:
    """This test process's live (not zombie) descendants whose command line contains `marker`."""
    me = os.getpid()
    children: dict[int, list[int]] = {}
    commands: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            commands[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            children.setdefault(int(parent), []).append(int(entry))
    found, todo = [], list(children.get(me, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        if marker.encode() in commands.get(pid, b""):
            found.append(pid)
    return found


def kill_processes(marker: str) -> list[int]:
    """SIGKILL this test process's descendants whose command line contains `marker`."""
    killed = []
    for pid in descendants(marker):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


@asynccontextmanager
async def everything_over_http() -> AsyncIterator[str]:
    """server-everything's streamable HTTP transport on a free loopback port; yield its URL."""
    binary = NPM_BIN / "mcp-server-everything"
    if not binary.exists():
        pytest.skip(f"{binary} is missing: run scripts/test-deps.sh")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    process = await asyncio.create_subprocess_exec(
        str(binary),
        "streamableHttp",
        env={**os.environ, "PORT": str(port)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        async with asyncio.timeout(15):
            while b"listening on port" not in await process.stderr.readline():
                pass
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        await process.wait()
