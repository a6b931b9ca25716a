"""How many bytes each tenant's conversations take in a SQLite file (`Store.stored_bytes`).

Each session row counts the bytes of its stored events and messages (`sessions.bytes`),
kept by triggers in the transaction that inserts them, whichever way the writer stores a
batch; a deleted session takes its count with it. A tenant's figure is the sum over its
session rows (the `(tenant_id, …)` indexes find them), not over its events.
"""

from __future__ import annotations

import sqlite3

__all__ = ["add_counts", "stored_bytes"]

_TRIGGERS = """
CREATE TRIGGER IF NOT EXISTS events_count_bytes AFTER INSERT ON events
BEGIN
    UPDATE sessions SET bytes = bytes + length(NEW.body) WHERE session_id = NEW.session_id;
END;
CREATE TRIGGER IF NOT EXISTS messages_count_bytes AFTER INSERT ON messages
BEGIN
    UPDATE sessions SET bytes = bytes + length(NEW.body) WHERE session_id = NEW.session_id;
END;
"""


def add_counts(conn: sqlite3.Connection) -> None:
    """Give the sessions their byte counts and the triggers that keep them: a file written
    before they existed is counted once, in one transaction (another process opening the
    file meanwhile waits, then finds it done)."""
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
        if "bytes" not in columns:
            conn.execute("ALTER TABLE sessions ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0")
            conn.execute(
                "UPDATE sessions SET bytes = "
                "(SELECT COALESCE(SUM(length(body)), 0) FROM events e "
                "WHERE e.session_id = sessions.session_id) + "
                "(SELECT COALESCE(SUM(length(body)), 0) FROM messages m "
                "WHERE m.session_id = sessions.session_id)"
            )
        for statement in _TRIGGERS.split("END;")[:-1]:
            conn.execute(statement + "END;")


def stored_bytes(conn: sqlite3.Connection, tenant: str | None) -> dict[str, int]:
    """Bytes stored per tenant: one tenant's (None: every tenant's)."""
    where, args = ("WHERE tenant_id = ?", (tenant,)) if tenant is not None else ("", ())
    rows = conn.execute(
        f"SELECT tenant_id, SUM(bytes) FROM sessions {where} GROUP BY tenant_id", args
    ).fetchall()
    return {str(tenant_id): int(total) for tenant_id, total in rows}
