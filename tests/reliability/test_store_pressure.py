"""Fault injection on the store under pressure, with real processes: fifty runs at once on
FerretDB, and a SQLite file whose write lock another process holds (a `sqlite3` connection in
`BEGIN IMMEDIATE`, as a backup or a shell would). Each run must finish, its live stream
gap-free and its replay exactly what was sent (helpers: test_store_outages.py)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.conftest import ServerFactory
from tests.fakes.openai_server import FakeLLM
from tests.reliability.test_store_outages import (
    RUNS,
    STALL_S,
    assert_each_finished,
    health,
    on_ferretdb,
    start_runs,
    streaming,
    until_health,
)

pytestmark = pytest.mark.slow


async def test_fifty_concurrent_runs_on_ferretdb_lose_nothing(
    server_factory: ServerFactory, fake_llm: FakeLLM, ferretdb_bin: Path, tmp_path: Path
) -> None:
    """Load alone made a write pass its timeout, and that run died with a gap (seq 1, 2, 3,
    5). A 1 s operation timeout makes such timeouts likely here; repeated rounds are
    `bench/`'s (each costs ~25 s on a loaded 2-core machine)."""
    fake_llm.default = streaming(words=10, delay_s=0.0)
    room = {"max_concurrent_runs_per_tenant": 50}
    async with on_ferretdb(server_factory, ferretdb_bin, tmp_path, agent=room) as (_, running):
        clients = [await running.client() for _ in range(50)]
        sessions = [str((await c.recv())["session_id"]) for c in clients]
        await asyncio.gather(*(c.send({"type": "chat", "content": "go"}) for c in clients))
        await assert_each_finished(running, list(zip(clients, sessions, strict=True)))


_LOCK_HOLDER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
print("released", flush=True)
"""


async def test_runs_ride_through_another_process_holding_the_sqlite_write_lock(
    server_factory: ServerFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """A backup or an `sqlite3` shell in `BEGIN IMMEDIATE`: SQLite's busy timeout (5 s) ends
    with "database is locked", which is retried like a stalled database."""
    fake_llm.default = streaming(words=40, delay_s=0.05)
    async with server_factory() as running:
        clients = await start_runs(running, RUNS)
        holder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _LOCK_HOLDER,
            str(tmp_path / "agent.db"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert await asyncio.wait_for(holder.stdout.readline(), 10) == b"locked\n"
            await until_health(running, "degraded")  # a write waited out the busy timeout
            await asyncio.sleep(STALL_S - 5)  # the lock's length (8 s in all), not a wait
            holder.stdin.write(b"\n")
            assert await asyncio.wait_for(holder.stdout.readline(), 10) == b"released\n"
        finally:
            if holder.returncode is None:
                holder.kill()
            await holder.wait()
        await assert_each_finished(running, clients)
        assert await health(running) == {"status": "ok"}
