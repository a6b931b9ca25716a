"""Watch what a SQLiteStore's writer connection runs: batching is judged by its statements."""

from __future__ import annotations

from server.storage.sqlite import SQLiteStore


async def traced(store: SQLiteStore) -> list[str]:
    """Record every statement the writer connection runs from now on."""
    statements: list[str] = []

    def install() -> None:
        assert store._write_conn is not None
        store._write_conn.set_trace_callback(statements.append)

    await store._in_writer(install)
    return statements
