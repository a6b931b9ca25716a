"""Stalls: how long CPU-heavy input holds up the event loop, and how late deadlines fire.

    .venv/bin/python -m bench.stalls

The tests assert what happens (the token tables load in a thread, pages are parsed in worker
processes, a timeout kills the busy worker); these are the times, each against the target
the tests used to assert. Exits 1 when one is missed. Not part of `python -m bench`.

- tables: the worst loop stall while LazyExactCounter loads its tables under an event loop;
- megabyte chat: the worst loop stall while a real server (in this process, a fake model)
  runs a 1 MB chat;
- title scan: `_title` over three hostile pages, all together;
- extract timeout: how long after its 3 s timeout a call on a hopeless page returns, and the
  worst loop stall meanwhile;
- hostile run: the slowest `/healthz` and the worst loop stall while a run's `web_fetch`
  parses three hostile pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agent.tokens import LazyExactCounter
from agent.tools import ExtractorPool
from agent.tools.page_text import _title
from server.app import create_app
from server.runner import AgentServer
from server.settings import load_settings
from tests.fakes.client import Client
from tests.fakes.openai_server import FakeLLM, observe, reason
from tests.fakes.servers import run_server, serve
from tests.security.harness import (
    hostile_site,
    script_hostile_run,
    titles_page,
    wide_table_page,
)

__all__ = ["LoopLag", "main"]


@dataclass
class LoopLag:
    """The event loop's worst stall while the block runs (it ticks every `tick_s`)."""

    tick_s: float = 0.005
    worst: float = 0.0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    async def _watch(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.tick_s)
            now = time.monotonic()
            self.worst = max(self.worst, now - last - self.tick_s)
            last = now

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def tables() -> float:
    counter = LazyExactCounter("o200k_base")
    async with LoopLag() as lag:
        counter.count("{}")  # starts the load in its thread
        (loading,) = [t for t in threading.enumerate() if t.name == "token-tables"]
        await asyncio.to_thread(loading.join, 60)
    return lag.worst


@contextlib.asynccontextmanager
async def agent_server(fake: FakeLLM, tools: dict[str, object]) -> AsyncIterator[str]:
    """A real server in this process, on a fake model; yields its address."""
    with tempfile.TemporaryDirectory() as tmp:
        async with serve(fake.app) as llm:
            settings = load_settings(
                None,
                {
                    "llm": {"base_url": f"http://{llm}/v1", "max_retries": 0},
                    "storage": {"sqlite_path": str(Path(tmp) / "stalls.db")},
                    "tools": tools,
                },
            )
            async with run_server(create_app(settings), AgentServer) as handle:
                yield handle.address


async def megabyte_chat() -> float:
    fake = FakeLLM()
    fake.script("reason", reason("Reading it.", finish=True))
    fake.script("observe", observe("Read.", final="It is long."))
    content = "lorem ipsum dolor get_current_time " * 29_000  # ~1 MB of words
    async with agent_server(fake, {}) as address, await Client.connect(address) as client:
        await client.recv()
        async with LoopLag() as lag:
            await client.run(content, timeout=60)
    return lag.worst


def title_scan() -> float:
    started = time.perf_counter()
    for page in (titles_page(), b"<h1>" * 50_000, b"x" * 40_000 + b"<title>late</title>"):
        _title(page, None)
    return time.perf_counter() - started


async def extract_timeout() -> tuple[float, float]:
    pool = ExtractorPool(workers=2, memory_mb=768)
    try:
        async with LoopLag(tick_s=0.02) as lag:
            started = time.monotonic()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(3):
                    await pool.extract(wide_table_page(), "text/html", None, "http://x/")
            overrun = time.monotonic() - started - 3
    finally:
        await pool.aclose()
    return overrun, lag.worst


async def hostile_run() -> tuple[float, float]:
    fake = FakeLLM()
    async with serve(hostile_site()) as site:
        tools = script_hostile_run(fake, site)
        async with (
            agent_server(fake, tools) as address,
            httpx.AsyncClient(base_url=f"http://{address}") as http,
            await Client.connect(address) as client,
        ):
            await client.recv()
            worst_health = 0.0
            async with LoopLag(tick_s=0.02) as lag:
                await client.send({"type": "chat", "content": "read these", "agent_max_steps": 1})
                run = asyncio.create_task(client.until("response_complete", timeout=30))
                while not run.done():
                    started = time.monotonic()
                    (await http.get("/healthz", timeout=5)).raise_for_status()
                    worst_health = max(worst_health, time.monotonic() - started)
                    await asyncio.wait({run}, timeout=0.1)
                await run
    return worst_health, lag.worst


async def measure() -> list[tuple[str, float, float]]:
    """(what, seconds, target seconds)."""
    overrun, extract_lag = await extract_timeout()
    health, hostile_lag = await hostile_run()
    return [
        ("tables: worst loop stall", await tables(), 0.2),
        ("megabyte chat: worst loop stall", await megabyte_chat(), 0.25),
        ("title scan of hostile pages", title_scan(), 1.0),
        ("extract timeout: return after the 3 s", overrun, 1.5),
        ("extract timeout: worst loop stall", extract_lag, 0.5),
        ("hostile run: slowest /healthz", health, 0.5),
        ("hostile run: worst loop stall", hostile_lag, 0.5),
    ]


def main() -> int:
    rows = asyncio.run(measure())
    print("| what | ms | target ms |\n| --- | ---: | ---: |")
    for what, seconds, target in rows:
        print(f"| {what} | {seconds * 1000:.0f} | {target * 1000:.0f} |")
    missed = [what for what, seconds, target in rows if seconds >= target]
    if missed:
        print(f"missed: {', '.join(missed)}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
