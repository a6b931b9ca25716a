"""The run tree (server/storage/runs.py) for SQLiteStore: one table of its own, `runs`."""

from __future__ import annotations

import sqlite3

from server.storage.base import Scope
from server.storage.runs import RunNode

__all__ = ["SCHEMA", "add", "nodes", "show"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    session_id    TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    tenant_id     TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    parent_run_id TEXT,
    position      INTEGER NOT NULL,
    shown_at      INTEGER NOT NULL,
    PRIMARY KEY (session_id, run_id)
) WITHOUT ROWID;
"""

_OWNED = "session_id = ? AND tenant_id = ? AND user_id = ?"
# Later than every other run of the session, even within one millisecond.
_LATEST = "MAX(?, (SELECT COALESCE(MAX(shown_at), 0) + 1 FROM runs WHERE session_id = ?))"


def add(
    conn: sqlite3.Connection,
    scope: Scope,
    session_id: str,
    run_id: str,
    parent: str | None,
    now: int,
) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO runs (session_id, run_id, tenant_id, user_id, parent_run_id, "
        "position, shown_at) VALUES (?, ?, ?, ?, ?, "
        "(SELECT COUNT(*) FROM runs WHERE session_id = ?), " + _LATEST + ")",
        (session_id, run_id, scope.tenant_id, scope.user_id, parent, session_id, now, session_id),
    )


def show(conn: sqlite3.Connection, scope: Scope, session_id: str, run_id: str, now: int) -> bool:
    cursor = conn.execute(
        f"UPDATE runs SET shown_at = {_LATEST} WHERE {_OWNED} AND run_id = ?",
        (now, session_id, session_id, scope.tenant_id, scope.user_id, run_id),
    )
    return cursor.rowcount > 0


def nodes(conn: sqlite3.Connection, scope: Scope, session_id: str) -> list[RunNode]:
    rows = conn.execute(
        f"SELECT run_id, parent_run_id, position, shown_at FROM runs WHERE {_OWNED} "
        "ORDER BY position",
        (session_id, scope.tenant_id, scope.user_id),
    ).fetchall()
    return [RunNode(r[0], r[1], int(r[2]), int(r[3])) for r in rows]
