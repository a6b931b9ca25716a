"""9. A tenant's latency under attack (issue 42): another session's runs, and `/healthz`,
unloaded and while one of the attacks of tests/security runs against the same server:

- bombs: a session whose runs each fetch three gzip bombs (256 MiB of zeros, one of them
  gzipped twice) with web_fetch, one run after another;
- mcp_20mb: a session whose runs each call an MCP tool that answers 20 MB;
- flood: 120 idle sockets from 127.0.0.2, each reopened as soon as it is closed, against
  `max_connections` 40 (`max_silent_per_source` 16), from its own process.

The victim runs one-step runs (chat → `response_complete`) one after another and `/healthz`
is asked on the main port and on `server.health_port` between them. The goal: each figure
under attack within 2× its unloaded one.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from bench.context import Bench
from bench.procs import ROOT, Proc, free_port, start_agent_server
from bench.stats import percentile
from bench.wsclient import connect, kind_of
from tests.fakes.mcp_raw import mcp_raw_server
from tests.fakes.servers import serve
from tests.security.harness import bomb_site

__all__ = ["run"]

RUN = {"type": "chat", "content": "go", "agent_max_steps": 1}
VICTIM_RUNS = 30
VICTIM_QUICK_RUNS = 10


async def run(bench: Bench) -> dict[str, Any]:
    health_port = free_port()
    async with serve(bomb_site()) as site:
        assert bench.llm is not None
        server = await asyncio.to_thread(
            lambda: start_agent_server(
                bench.workdir, bench.llm, name="attacked", env=_settings(health_port)
            )
        )
        try:
            runs = VICTIM_QUICK_RUNS if bench.sizes.reps < 3 else VICTIM_RUNS
            bombs = [f"http://{site}/gzip2", f"http://{site}/gzip", f"http://{site}/gzip2"]
            attacks: dict[str, Callable[[], Any]] = {
                "unloaded": _nothing,
                "bombs": lambda: _looping_runs(bench, server, "web_fetch", {"urls": bombs}),
                "mcp_20mb": lambda: _looping_runs(bench, server, "raw__huge", {"text": "20"}),
                "flood": lambda: _flood(server.address),
            }
            results = {}
            for name, attack in attacks.items():
                async with attack():
                    results[name] = await _victim(bench, server, health_port, runs)
        finally:
            await asyncio.to_thread(server.stop)
    base = results["unloaded"]
    for figures in results.values():
        figures["ratio_to_unloaded"] = {
            key: round(value / base[key], 2) if base[key] else None
            for key, value in figures.items()
            if key.endswith("_ms")
        }
    return results


def _settings(health_port: int) -> dict[str, str]:
    raw = {**mcp_raw_server(), "approval": "never"}
    tools = {
        "enabled": ["get_current_time", "web_fetch"],
        "web_fetch": {"allow_hosts": ["127.0.0.1"]},
        "mcp": {"raw": raw},
    }
    return {
        "AGENT__TOOLS": json.dumps(tools),
        "AGENT__SERVER__MAX_CONNECTIONS": "40",
        "AGENT__SERVER__MAX_SILENT_PER_SOURCE": "16",
        "AGENT__SERVER__REQUEST_TIMEOUT_S": "2",
        "AGENT__SERVER__HEALTH_PORT": str(health_port),
    }


async def _victim(bench: Bench, server: Proc, health_port: int, runs: int) -> dict[str, Any]:
    """Median and p95 of the victim's run latency and of both health checks, in ms."""
    conn = await connect(server.address)
    run_ms, main_ms, probe_ms = [], [], []
    try:
        session = str((await conn.recv_json())["session_id"])
        await bench.llm_session(session, {"kind": "call", "tool": "get_current_time"})
        async with httpx.AsyncClient(timeout=30) as http:
            for _ in range(runs):
                started = time.perf_counter()
                conn.send_json(RUN)
                await _until_complete(conn)
                run_ms.append((time.perf_counter() - started) * 1000)
                main_ms.append(await _timed(http.get(f"http://{server.address}/healthz")))
                probe_ms.append(await _timed(http.get(f"http://127.0.0.1:{health_port}/healthz")))
    finally:
        conn.close()
    figures: dict[str, Any] = {"runs": len(run_ms)}
    for name, values in (("run", run_ms), ("healthz", main_ms), ("health_port", probe_ms)):
        figures[f"{name}_median_ms"] = round(percentile(values, 50), 1)
        figures[f"{name}_p95_ms"] = round(percentile(values, 95), 1)
    return figures


async def _timed(request: Awaitable[httpx.Response]) -> float:
    started = time.perf_counter()
    (await request).raise_for_status()
    return (time.perf_counter() - started) * 1000


async def _until_complete(conn: Any) -> None:
    while True:
        payload, _ = await conn.recv(120)
        kind = kind_of(payload)
        if kind == "error":
            raise RuntimeError(f"the victim's run failed: {payload[:300]!r}")
        if kind == "response_complete":
            return


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


@asynccontextmanager
async def _looping_runs(
    bench: Bench, server: Proc, tool: str, arguments: dict[str, Any]
) -> AsyncIterator[None]:
    """A session that runs `tool` with `arguments`, one run after another, until the end."""
    conn = await connect(server.address)
    session = str((await conn.recv_json())["session_id"])
    await bench.llm_session(session, {"kind": "call", "tool": tool, "arguments": arguments})

    async def attack() -> None:
        while True:
            conn.send_json(RUN)
            while kind_of((await conn.recv(120))[0]) != "response_complete":
                pass

    task = asyncio.create_task(attack())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        conn.close()


@asynccontextmanager
async def _flood(address: str) -> AsyncIterator[None]:
    flood = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "tests.security.flood", address, "120", "2000000", "300", "127.0.0.2"),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    assert flood.stdout is not None
    try:
        if await asyncio.wait_for(flood.stdout.readline(), 30) != b"filled\n":
            raise RuntimeError("the flood did not start")
        yield
    finally:
        if flood.returncode is None:
            flood.terminate()
        await flood.wait()
