"""How every SQLite file of the server is opened: one place for the connection settings."""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["connect", "locked"]


def connect(
    path: Path, *, schema: str | None = None, synchronous_normal: bool = False
) -> sqlite3.Connection:
    """Open `path` in autocommit mode (transactions are explicit), usable from whichever one
    thread its owner runs it on, waiting up to 5 s for another process's lock.

    With `schema` (the writer): create the folder, switch the file to WAL and apply the schema.
    `synchronous_normal` trades the last commits before a power cut for speed (WAL stays
    consistent either way)."""
    if schema is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=5000")
    if schema is not None:
        conn.execute("PRAGMA journal_mode=WAL")
        if synchronous_normal:
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(schema)
    return conn


def locked(exc: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (any extended code): another connection held the lock
    for longer than the busy timeout. It passes: the write may be tried again."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
