"""A first run without any model configured: `agent-server serve` starts the bundled local
model (llama.cpp with Qwen2.5-Coder-0.5B, cached by scripts/test-deps.sh), says so in its log,
and the page learns it from /api/me. Nothing is mocked: the real CLI, the real model server."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest

from tests.fakes.processes import REPO, free_port

pytestmark = pytest.mark.slow


async def test_serve_without_a_model_serves_the_bundled_one(tmp_path: Path):
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "AGENT__")) and k != "OPENAI_API_KEY"
    }
    env.update(PYTHONPATH=str(REPO), AGENT__STORAGE__SQLITE_PATH=str(tmp_path / "agent.db"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "server",
        "--config",
        str(REPO / "config.toml"),
        "--port",
        str(port),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            async with asyncio.timeout(240):  # loading the model; building it is test-deps' job
                while True:
                    try:
                        me = (await http.get("/api/me")).json()
                        break
                    except httpx.TransportError:
                        assert proc.returncode is None, "the server exited at start"
                        await asyncio.sleep(0.2)
        assert me["model"] == {"name": "bundled-qwen2.5-coder-0.5b", "bundled": True}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout is not None
        log = (await asyncio.wait_for(proc.stdout.read(), 60)).decode()
        await proc.wait()
    assert "no model is configured: starting the bundled local model" in log
    assert "OPENAI_API_KEY" in log  # and how to point the server at a real one
    served = re.search(r"bundled model serving at (http://127\.0\.0\.1:\d+)/v1", log)
    assert served is not None, log
    async with httpx.AsyncClient() as http:
        with pytest.raises(httpx.TransportError):  # the model server stopped with the server
            await http.get(served.group(1) + "/health", timeout=5)
    # ...and its process ended: llama-server had closed its port on SIGTERM and then hung
    port_arg = f"--port\0{served.group(1).rsplit(':', 1)[1]}\0".encode()
    async with asyncio.timeout(20):
        while True:
            if not _processes_with(port_arg):
                break
            await asyncio.sleep(0.1)  # polling for a process's end, with a bound


def _processes_with(argument: bytes) -> list[int]:
    """The processes whose command line holds `argument` (as /proc writes it, NUL-separated)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and argument in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # it ended while we looked
            continue
    return found
