"""Pages that make HTML extraction spin cannot freeze the server (issue 13, item 1)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agent.tools import ExtractorPool
from agent.tools.page_text import extract_text
from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, act, observe
from tests.fakes.servers import serve
from tests.security.harness import LoopLag, hostile_site, titles_page, wide_table_page


def worker_pids() -> list[int]:
    """Live (not zombie) extraction workers started by this process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == os.getpid() and b"agent.tools.extract_worker" in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_limits(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/limits").read_text().splitlines()


async def wait_for(condition: object, timeout: float) -> None:
    """Poll a cheap condition (process table) until it holds, bounded by `timeout`."""
    async with asyncio.timeout(timeout):
        while True:  # no event exists for another process's state: poll, bounded
            if condition():  # type: ignore[operator]
                return
            await asyncio.sleep(0.05)


@pytest.fixture
async def pool() -> AsyncIterator[ExtractorPool]:
    extractor = ExtractorPool(workers=2, memory_mb=768)
    try:
        yield extractor
    finally:
        await extractor.aclose()


def test_the_title_scan_is_linear_and_reads_only_the_head() -> None:
    started = time.monotonic()
    title, _ = extract_text(titles_page() + b"</title>", "text/plain", None, "http://x/")
    assert title is None  # plain text: no title scan at all
    from agent.tools.page_text import _title

    assert _title(titles_page(), None) is None  # was ~29 s with a lazy regex over 200 KB
    assert _title(b"<h1>" * 50_000, None) is None
    assert _title(b"<html><title>A &amp; B</title>" + b"x" * 100_000, None) == "A & B"
    assert _title(b"x" * 40_000 + b"<title>late</title>", None) is None  # past the head
    assert time.monotonic() - started < 1.0


async def test_a_timeout_kills_the_busy_worker_and_the_loop_never_stalls(
    pool: ExtractorPool,
) -> None:
    async with LoopLag() as lag:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(3):
                await pool.extract(wide_table_page(), "text/html", None, "http://x/")
        elapsed = time.monotonic() - started
    assert elapsed < 4.5
    assert lag.worst < 0.5, f"the event loop stalled {lag.worst:.2f} s"
    await wait_for(lambda: not worker_pids(), timeout=5)
    # The pool replaces the killed worker on the next call.
    title, text = await pool.extract(b"<title>ok</title><p>fine</p>", "text/html", None, "u")
    assert title == "ok"


async def test_a_stopped_run_kills_the_worker_it_was_waiting_for(pool: ExtractorPool) -> None:
    task = asyncio.create_task(pool.extract(wide_table_page(), "text/html", None, "http://x/"))
    await wait_for(lambda: worker_pids() and cpu_seconds(worker_pids()[0]) > 0.5, timeout=20)
    (pid,) = worker_pids()
    task.cancel()  # what a stop does to the tool call
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(lambda: pid not in worker_pids(), timeout=5)


async def test_a_worker_that_grew_large_is_replaced_not_kept() -> None:
    pool = ExtractorPool(workers=1, memory_mb=768, recycle_mb=1)  # every page is "large"
    try:
        pids = []
        for _ in range(2):
            title, _ = await pool.extract(b"<title>t</title>", "text/html", None, "http://x/")
            assert title == "t"
            await wait_for(lambda: not worker_pids(), timeout=5)  # it exited, memory returned
            pids.append(pool.last_pid)
        assert pids[0] != pids[1]
    finally:
        await pool.aclose()


async def test_workers_run_with_a_capped_address_space(pool: ExtractorPool) -> None:
    await pool.extract(b"<title>t</title>", "text/html", None, "http://x/")
    (pid,) = worker_pids()
    (line,) = [x for x in proc_limits(pid) if x.startswith("Max address space")]
    assert line.split()[3] == str(768 * 1024 * 1024)


async def test_hostile_pages_through_a_real_run_leave_other_clients_served(
    server_factory: object, fake_llm: FakeLLM
) -> None:
    async with serve(hostile_site()) as site:
        urls = [f"http://{site}/table", f"http://{site}/table", f"http://{site}/titles"]
        fake_llm.script("act", act(FakeToolCall("web_fetch", {"urls": urls})))
        fake_llm.script("observe", observe("Those pages were unreadable.", final="Sorry."))
        tools = {
            "enabled": ["web_fetch"],
            "web_fetch": {"allow_hosts": ["127.0.0.1"], "timeout_s": 3, "extract_workers": 2},
        }
        async with (
            server_factory(tools=tools) as running,  # type: ignore[operator]
            httpx.AsyncClient(base_url=f"http://{running.address}") as http,
        ):
            worst_health = 0.0
            async with LoopLag() as lag, await running.client() as client:
                await client.recv()
                await client.send({"type": "chat", "content": "read these", "agent_max_steps": 1})
                run = asyncio.create_task(client.until("response_complete", timeout=20))
                while not run.done():
                    started = time.monotonic()
                    assert (await http.get("/healthz", timeout=5)).status_code == 200
                    worst_health = max(worst_health, time.monotonic() - started)
                    await asyncio.wait({run}, timeout=0.1)
                frames = await run
            assert lag.worst < 0.5, f"the event loop stalled {lag.worst:.2f} s"
            assert worst_health < 0.5
            (outcome,) = [f for f in frames if kind(f) in ("tool_complete", "tool_error")]
            shown = str(outcome.get("result") or outcome.get("error"))
            assert shown.count("timed out after 3 s") >= 2  # both tables, each within its 3 s
        await wait_for(lambda: len(worker_pids()) == 0, timeout=10)  # closed at shutdown
