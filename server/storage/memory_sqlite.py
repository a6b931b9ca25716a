"""SQLiteMemoryStore: the MemoryStore of agent/tools/memory.py over a SQLite file.

It may share the conversation store's file: it owns only the `memories` table, and uses its
own connection in its own single worker thread, so the event loop never waits on SQLite and
statements never run concurrently on one connection. Every statement is scoped by tenant
and user. The connection opens on first use (or on `open()`); call `close()` at shutdown.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from agent.errors import StorageError
from agent.tools.memory_policy import CATEGORIES, TIERS, MemoryRecord
from server.storage.sqlite_connect import connect

__all__ = ["SQLiteMemoryStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    memory_id    TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    content      TEXT NOT NULL,
    category     TEXT NOT NULL,
    tier         TEXT NOT NULL,
    keywords     TEXT NOT NULL,
    use_count    INTEGER NOT NULL DEFAULT 0,
    last_used_at INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS memories_by_user ON memories (tenant_id, user_id);
"""
_COLUMNS = (
    "memory_id, content, category, tier, keywords, use_count, last_used_at, created_at, updated_at"
)


class SQLiteMemoryStore:
    """Per-user memories in the `memories` table of a SQLite file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="sqlite-memory")
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    async def open(self) -> None:
        """Open now, so a bad path fails at startup rather than at the first tool call."""
        await self._run(lambda conn: None, write=False)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=False)

    async def records(self, tenant_id: str, user_id: str) -> list[MemoryRecord]:
        def op(conn: sqlite3.Connection) -> list[MemoryRecord]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM memories WHERE tenant_id = ? AND user_id = ?",
                (tenant_id, user_id),
            ).fetchall()
            return [_record(row) for row in rows]

        return await self._run(op, write=False)

    async def save(self, tenant_id: str, user_id: str, record: MemoryRecord) -> None:
        def op(conn: sqlite3.Connection) -> None:
            # The WHERE keeps an id of another user from ever being overwritten.
            conn.execute(
                f"INSERT INTO memories (tenant_id, user_id, {_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (memory_id) DO UPDATE SET content = excluded.content, "
                "category = excluded.category, tier = excluded.tier, "
                "keywords = excluded.keywords, use_count = excluded.use_count, "
                "last_used_at = excluded.last_used_at, updated_at = excluded.updated_at "
                "WHERE memories.tenant_id = excluded.tenant_id "
                "AND memories.user_id = excluded.user_id",
                (
                    tenant_id,
                    user_id,
                    record.memory_id,
                    record.content,
                    record.category,
                    record.tier,
                    orjson.dumps(list(record.keywords)).decode(),
                    record.use_count,
                    record.last_used_at,
                    record.created_at,
                    record.updated_at,
                ),
            )

        await self._run(op)

    async def delete(self, tenant_id: str, user_id: str, memory_ids: Sequence[str]) -> None:
        def op(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "DELETE FROM memories WHERE memory_id = ? AND tenant_id = ? AND user_id = ?",
                [(memory_id, tenant_id, user_id) for memory_id in memory_ids],
            )

        await self._run(op)

    async def mark_used(
        self, tenant_id: str, user_id: str, memory_ids: Sequence[str], now_ms: int
    ) -> None:
        def op(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "UPDATE memories SET use_count = use_count + 1, last_used_at = ? "
                "WHERE memory_id = ? AND tenant_id = ? AND user_id = ?",
                [(now_ms, memory_id, tenant_id, user_id) for memory_id in memory_ids],
            )

        await self._run(op)

    # -- plumbing ----------------------------------------------------------------------------

    async def _run(self, op: Callable[[sqlite3.Connection], T], *, write: bool = True) -> T:
        """Run `op` in one transaction on the worker thread; map failures to StorageError."""
        if self._closed:
            raise StorageError("the memory store is closed")

        def run() -> T:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                result = op(conn)
                conn.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                raise StorageError(f"SQLite memory store failed: {exc}") from exc
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = connect(self._path, schema=_SCHEMA)
            except (OSError, sqlite3.Error) as exc:
                raise StorageError(f"cannot open the memory store {self._path}: {exc}") from exc
            self._conn = conn
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _record(row: tuple[Any, ...]) -> MemoryRecord:
    category, tier = row[2], row[3]
    if category not in CATEGORIES or tier not in TIERS:
        raise StorageError(f"memory {row[0]} has an unknown category or tier")
    return MemoryRecord(
        memory_id=row[0],
        content=row[1],
        category=category,
        tier=tier,
        keywords=tuple(orjson.loads(row[4])),
        use_count=row[5],
        last_used_at=row[6],
        created_at=row[7],
        updated_at=row[8],
    )
