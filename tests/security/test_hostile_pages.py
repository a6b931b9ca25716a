"""Pages that make HTML extraction spin cannot freeze the server (issue 13, item 1)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agent.tools import ExtractorPool
from agent.tools.page_text import extract_text
from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM
from tests.fakes.servers import serve
from tests.security.harness import (
    hostile_site,
    script_hostile_run,
    titles_page,
    wide_table_page,
)


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


def busy_workers() -> list[int]:
    """Extraction workers that have begun to spend CPU (on a page, after their start-up)."""
    busy = []
    for pid in worker_pids():
        with contextlib.suppress(OSError):  # it may exit meanwhile
            if cpu_seconds(pid) > 0:
                busy.append(pid)
    return busy


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


class Watched(bytes):
    """A page that records how far into it each read reached."""

    reach: list[int]

    def __getitem__(self, key):  # type: ignore[no-untyped-def, override]
        stop = key.stop if isinstance(key, slice) else key + 1
        self.reach.append(len(self) if stop is None else stop)
        return bytes(self)[key]


def test_the_title_scan_is_linear_and_reads_only_the_head() -> None:
    """A lazy `<title>(.*?)</title>` regex took ~29 s on 200 KB of `<title>` tags: now plain
    `find`s run over the page's first 32 KB, whatever its size."""
    title, _ = extract_text(titles_page() + b"</title>", "text/plain", None, "http://x/")
    assert title is None  # plain text: no title scan at all
    from agent.tools.page_text import _HEAD_BYTES, _title

    for page, expected in [
        (titles_page(), None),
        (b"<h1>" * 50_000, None),
        (b"<html><title>A &amp; B</title>" + b"x" * 100_000, "A & B"),
        (b"x" * 40_000 + b"<title>late</title>", None),  # past the head
    ]:
        watched = Watched(page)
        watched.reach = []
        assert _title(watched, None) == expected
        assert watched.reach and max(watched.reach) <= _HEAD_BYTES


async def test_a_timeout_kills_the_busy_worker_and_the_loop_never_stalls(
    pool: ExtractorPool,
) -> None:
    """The page (minutes of CPU) is parsed in a worker process: the event loop runs on
    meanwhile, and the timeout ends the call at once and kills the worker."""
    busy: list[int] = []

    async def watch() -> None:  # runs on the event loop while the worker parses
        await wait_for(busy_workers, timeout=20)
        busy.extend(busy_workers())

    watcher = asyncio.create_task(watch())
    async with asyncio.timeout(60):  # a timeout that waited for the page would end here
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(3):
                await pool.extract(wide_table_page(), "text/html", None, "http://x/")
    await watcher
    (pid,) = busy
    await wait_for(lambda: pid not in worker_pids(), timeout=5)
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
        tools = script_hostile_run(fake_llm, site)
        async with (
            server_factory(tools=tools) as running,  # type: ignore[operator]
            httpx.AsyncClient(base_url=f"http://{running.address}") as http,
        ):
            async with await running.client() as client:
                await client.recv()
                await client.send({"type": "chat", "content": "read these", "agent_max_steps": 1})
                run = asyncio.create_task(client.until("response_complete", timeout=20))
                # While workers parse the pages, the server answers others: the parsing is
                # not on its event loop (the health check comes back before the run ends).
                await wait_for(busy_workers, timeout=10)
                assert (await http.get("/healthz", timeout=5)).status_code == 200
                assert not run.done()
                frames = await run
            (outcome,) = [f for f in frames if kind(f) in ("tool_complete", "tool_error")]
            shown = str(outcome.get("result") or outcome.get("error"))
            assert shown.count("timed out after 3 s") >= 2  # both tables, each within its 3 s
        await wait_for(lambda: len(worker_pids()) == 0, timeout=10)  # closed at shutdown
