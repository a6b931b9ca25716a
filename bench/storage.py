"""6. Storage: events persisted per second, straight through the Store contract.

Many concurrent sessions each append one event at a time (as a streaming run does) through
`append_events`, for a fixed window per repetition: SQLiteStore (group commit, one writer
thread) in this process, and MongoStore against FerretDB when a FerretDB binary is cached
(tests/fakes/ferretdb.py; this benchmark never builds one: that takes minutes).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.context import Bench
from bench.stats import percentile, summarize
from server.settings import StorageSettings
from server.storage.base import Scope, Store

if TYPE_CHECKING:
    from tests.fakes.ferretdb import FerretDB

__all__ = ["run"]

SCOPE = Scope("bench", "bench")


def _frame(session_id: str, run_id: str) -> dict[str, Any]:
    return {
        "type": "agent_update",
        "update_type": "agent_reason_delta",
        "session_id": session_id,
        "run_id": run_id,
        "seq": 0,
        "ts": int(time.time() * 1000),
        "step": 1,
        "delta": "tok ",
    }


async def _rate(
    store: Store, sessions: int, window_s: float, reps: int
) -> list[tuple[float, float, float]]:
    now = int(time.time() * 1000)
    ids = [uuid.uuid4().hex for _ in range(sessions)]
    for session_id in ids:
        await store.create_session(SCOPE, session_id, now)
    run_id = uuid.uuid4().hex
    out = []
    for _ in range(reps):
        count = 0
        latencies: list[float] = []
        stop = asyncio.Event()

        async def writer(
            session_id: str, stop: asyncio.Event = stop, latencies: list[float] = latencies
        ) -> None:
            nonlocal count
            while not stop.is_set():
                frame = _frame(session_id, run_id)
                started = time.perf_counter()
                await store.append_events(SCOPE, session_id, [frame], frame["ts"])
                latencies.append((time.perf_counter() - started) * 1000)
                count += 1

        tasks = [asyncio.create_task(writer(s)) for s in ids]
        await asyncio.sleep(0.3)  # warm
        before, started = count, time.perf_counter()
        del latencies[:]
        await asyncio.sleep(window_s)
        elapsed = time.perf_counter() - started
        out.append(
            ((count - before) / elapsed, percentile(latencies, 50), percentile(latencies, 99))
        )
        stop.set()
        await asyncio.gather(*tasks)
    return out


def _summary(reps: list[tuple[float, float, float]]) -> dict[str, Any]:
    return {
        "events_per_s": summarize((r[0] for r in reps), 0),
        "append_p50_ms": summarize((r[1] for r in reps), 2),
        "append_p99_ms": summarize((r[2] for r in reps), 2),
    }


async def _sqlite(bench: Bench) -> dict[str, Any]:
    from server.storage.sqlite import SQLiteStore

    store = SQLiteStore(bench.workdir / "storage-bench.db")
    await store.open()
    try:
        sizes = bench.sizes
        rates = await _rate(store, sizes.storage_sessions, sizes.storage_window_s, sizes.reps)
    finally:
        await store.close()
    return _summary(rates)


NO_FERRETDB = {"skipped": "no FerretDB binary cached (`make test-deps` builds one)"}


@asynccontextmanager
async def running_ferretdb(bench: Bench) -> AsyncIterator[str | None]:
    """A FerretDB on a temporary folder for one benchmark: its URI, or None when no binary is
    cached (benchmarks never build one)."""
    async with ferretdb_process(bench) as server:
        yield None if server is None else server.uri


@asynccontextmanager
async def ferretdb_process(bench: Bench) -> AsyncIterator[FerretDB | None]:
    """As `running_ferretdb`, the process itself (to pause it, or kill it)."""
    from tests.fakes.ferretdb import FERRETDB_VERSION, FerretDB, cache_dir

    binary = cache_dir() / f"ferretdb-{FERRETDB_VERSION}"
    if not os.access(binary, os.X_OK):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="bench-ferret-", dir=bench.workdir) as tmp:
        server = FerretDB(binary, Path(tmp))
        await asyncio.to_thread(server.start)
        try:
            yield server
        finally:
            await asyncio.to_thread(server.stop)


async def _mongo(bench: Bench) -> dict[str, Any]:
    from server.storage.mongo import MongoStore

    async with running_ferretdb(bench) as uri:
        if uri is None:
            return NO_FERRETDB
        settings = StorageSettings(backend="mongodb", mongodb_uri=uri, mongodb_database="bench")
        store = MongoStore(settings)
        try:
            await store.open()
            sizes = bench.sizes
            rates = await _rate(store, sizes.storage_sessions, sizes.storage_window_s, sizes.reps)
        finally:
            await store.close()
    return {**_summary(rates), "server": "FerretDB (SQLite handler)"}


async def run(bench: Bench) -> dict[str, Any]:
    return {
        "sessions": bench.sizes.storage_sessions,
        "sqlite": await _sqlite(bench),
        "mongodb": await _mongo(bench),
    }
