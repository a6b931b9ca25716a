"""How the SQLite writer stores a batch: the operations queued while the last transaction ran,
in one `BEGIN IMMEDIATE` transaction (server/storage/sqlite.py runs it).

Events numbered on the event loop (`Append` with `bodies`) are stored together, with one
`UPDATE … FROM (VALUES …)` that advances each session's `last_seq` only where it still is
where the numbering began, and multi-row `INSERT`s: the writer thread releases and retakes
the GIL around every SQLite step, so a batch costs O(1) steps, not O(events). When a session
moved on (another process, a failed batch), `run_together` raises IntegrityError and the
caller redoes the batch with every unit of operations (one caller's) `isolated` and numbered
from the session row.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from agent.errors import StorageError
from server.storage.base import Scope
from server.storage.sqlite_connect import locked

__all__ = [
    "IN_ORDER_SCHEMA",
    "Append",
    "Op",
    "bump",
    "encode",
    "isolated",
    "run_alone",
    "run_together",
]

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]

_ROWS_PER_INSERT = 128  # 5 bound variables each: within SQLite's oldest limit of 999
_SESSIONS_PER_UPDATE = 128  # 6 bound variables each
_ROWS_ALONE = 64  # events `run_alone` stores in one statement (8 bound variables each)


@dataclass(slots=True)
class Append:
    """Events for one session. `first` > 0: numbered and encoded on the event loop from
    `first` (`bodies` holds them); 0, or after a stale number: numbered in the writer."""

    scope: Scope
    session_id: str
    frames: Sequence[dict[str, Any]]
    now: int
    first: int
    bodies: list[bytes] | None = None
    renumbered: bool = False  # stored with numbers read from the session row

    def store_numbered(self, conn: sqlite3.Connection) -> list[bytes]:
        """Number from the session row and store (the first append, or a stale number)."""
        frames = self.frames
        last = bump(conn, self.scope, self.session_id, "last_seq", len(frames), self.now)
        self.first, self.renumbered = last - len(frames) + 1, True
        self.bodies = [encode(frame, seq) for seq, frame in enumerate(frames, self.first)]
        _insert_events(conn, [self])
        return self.bodies

    @property
    def last(self) -> int:
        return self.first + len(self.frames) - 1


# Inserting into this view stores an event only if it is the next one of its session in the
# caller's scope, advancing `last_seq` with it: the checks and both writes of a batch of
# numbered events in one statement, which in autocommit mode is its own transaction.
IN_ORDER_SCHEMA = """
CREATE VIEW IF NOT EXISTS events_in_order AS
    SELECT e.session_id, e.seq, e.run_id, e.ts, e.body, s.tenant_id, s.user_id,
           s.updated_at AS now
    FROM events e JOIN sessions s ON s.session_id = e.session_id;
CREATE TRIGGER IF NOT EXISTS events_in_order_insert INSTEAD OF INSERT ON events_in_order
BEGIN
    SELECT RAISE(ABORT, 'a session''s last_seq moved since its events were numbered')
    WHERE NOT EXISTS (
        SELECT 1 FROM sessions WHERE session_id = NEW.session_id AND last_seq = NEW.seq - 1
        AND tenant_id = NEW.tenant_id AND user_id = NEW.user_id
    );
    UPDATE sessions SET last_seq = NEW.seq, updated_at = NEW.now
    WHERE session_id = NEW.session_id;
    INSERT INTO events (session_id, seq, run_id, ts, body)
    VALUES (NEW.session_id, NEW.seq, NEW.run_id, NEW.ts, NEW.body);
END;
"""


def run_alone(conn: sqlite3.Connection, ops: list[Op | Append]) -> list[Any] | None:
    """A batch of numbered events only (a model streaming at its own pace commits one delta
    at a time): store it with one statement and no explicit transaction, one GIL round trip
    instead of four. None when the batch is anything else, or the statement failed (rolled
    back whole: a stale number); the caller then runs the batch the usual way. A lock held
    past the busy timeout is raised (sqlite3.OperationalError)."""
    appends = [op for op in ops if isinstance(op, Append) and op.bodies is not None]
    if len(appends) != len(ops) or not 0 < sum(len(a.frames) for a in appends) <= _ROWS_ALONE:
        return None
    rows = [
        (*row, a.scope.tenant_id, a.scope.user_id, a.now)
        for a in appends
        for row in _event_rows([a])
    ]
    try:
        conn.execute(_insert_in_order_sql(len(rows)), _flat(rows))
    except sqlite3.Error as exc:
        if locked(exc):
            raise  # another process held the lock the whole busy timeout: a retry's matter
        return None
    return [a.bodies for a in appends]


def run_together(conn: sqlite3.Connection, ops: list[Op | Append]) -> list[Any]:
    """Run the batch's operations in order, then store all of its pre-numbered events at
    once: raise IntegrityError when a session's `last_seq` is not the one they follow."""
    results: list[Any] = []
    numbered: list[Append] = []
    for op in ops:
        if not isinstance(op, Append):
            results.append(op(conn))
        elif op.bodies is None:
            results.append(op.store_numbered(conn))
        else:
            numbered.append(op)
            results.append(op.bodies)
    if numbered:
        _store_prenumbered(conn, numbered)
    return results


def _store_prenumbered(conn: sqlite3.Connection, appends: list[Append]) -> None:
    """Advance each session's `last_seq` to its batch's last number, only where it still is
    where the batch's numbering began, then insert every event row."""
    spans: dict[str, list[Any]] = {}  # session_id -> [expected last_seq, new last, now, scope]
    for append in appends:
        span = spans.get(append.session_id)
        last = append.last
        if span is None:
            spans[append.session_id] = [append.first - 1, last, append.now, append.scope]
        elif span[1] + 1 == append.first:  # the next numbers of the same session
            span[1], span[2] = last, max(span[2], append.now)
        else:
            raise sqlite3.IntegrityError("events of one session numbered out of order")
    rows = [
        (sid, expected, last, now, scope.tenant_id, scope.user_id)
        for sid, (expected, last, now, scope) in spans.items()
    ]
    updated = 0
    for chunk in _chunks(rows, _SESSIONS_PER_UPDATE):
        updated += conn.execute(_update_last_seq_sql(len(chunk)), _flat(chunk)).rowcount
    if updated != len(rows):  # another writer went on, or a session is not there
        raise sqlite3.IntegrityError("a session's last_seq moved since its events were numbered")
    _insert_events(conn, appends)


def _insert_events(conn: sqlite3.Connection, appends: list[Append]) -> None:
    """Insert the numbered events."""
    for chunk in _chunks(_event_rows(appends), _ROWS_PER_INSERT):
        conn.execute(_insert_events_sql(len(chunk)), _flat(chunk))


def _event_rows(appends: list[Append]) -> list[tuple[Any, ...]]:
    """The `events` rows of numbered appends (numbered from `first`: a caller may pass one
    dict twice)."""
    return [
        (a.session_id, seq, frame.get("run_id"), frame.get("ts", a.now), body)
        for a in appends
        for seq, (frame, body) in enumerate(zip(a.frames, a.bodies or (), strict=True), a.first)
    ]


def _chunks(rows: list[T], most: int) -> list[list[T]]:
    """Split into power-of-two sized chunks, so a few cached statements serve every size."""
    out = []
    start = 0
    while start < len(rows):
        size = min(most, 1 << ((len(rows) - start).bit_length() - 1))
        out.append(rows[start : start + size])
        start += size
    return out


def _flat(rows: list[tuple[Any, ...]]) -> list[Any]:
    return [value for row in rows for value in row]


def _values(rows: int, width: int) -> str:
    """`(?, ?, …), (?, ?, …)…`: `rows` rows of `width` bound variables."""
    return ", ".join([f"({', '.join('?' * width)})"] * rows)


@functools.cache
def _insert_events_sql(rows: int) -> str:
    return f"INSERT INTO events (session_id, seq, run_id, ts, body) VALUES {_values(rows, 5)}"


@functools.cache
def _insert_in_order_sql(rows: int) -> str:
    columns = "session_id, seq, run_id, ts, body, tenant_id, user_id, now"
    return f"INSERT INTO events_in_order ({columns}) VALUES {_values(rows, 8)}"


@functools.cache
def _update_last_seq_sql(rows: int) -> str:
    return (
        "UPDATE sessions SET last_seq = v.column3, updated_at = v.column4 "
        f"FROM (VALUES {_values(rows, 6)}) AS v WHERE sessions.session_id = v.column1 "
        "AND sessions.last_seq = v.column2 AND sessions.tenant_id = v.column5 "
        "AND sessions.user_id = v.column6"
    )


def isolated(conn: sqlite3.Connection, unit: list[Op | Append]) -> list[Any] | BaseException:
    """Run a unit of operations in a savepoint; its own failure (of any of them) becomes its
    result, and none of them is stored. Events are numbered from the session row here,
    whatever the event loop numbered."""
    conn.execute("SAVEPOINT op")
    try:
        results = [op.store_numbered(conn) if isinstance(op, Append) else op(conn) for op in unit]
    except sqlite3.Error as exc:
        if not isinstance(exc, sqlite3.IntegrityError):
            raise
        conn.execute("ROLLBACK TO op")
        conn.execute("RELEASE op")
        return StorageError(f"SQLite refused the write: {exc}")
    except Exception as exc:  # noqa: BLE001 - one bad operation fails only itself
        conn.execute("ROLLBACK TO op")
        conn.execute("RELEASE op")
        # A StorageError (a missing session, a frame that is not JSON) is the caller's to
        # handle; anything else is a bug, not a storage failure, and keeps its type so the
        # run reports it as an internal error.
        return exc
    conn.execute("RELEASE op")
    return results


class _Missing(StorageError):
    """The session row an operation needs does not exist in the caller's scope."""


def encode(frame: dict[str, Any], seq: int) -> bytes:
    frame["seq"] = seq
    try:
        return orjson.dumps(frame)
    except orjson.JSONEncodeError as exc:  # as MongoStore reports it
        raise StorageError(f"event frame is not JSON-serializable: {exc}") from exc


def bump(
    conn: sqlite3.Connection, scope: Scope, session_id: str, column: str, count: int, now: int
) -> int:
    """Advance a session counter by `count` inside the open transaction; return its new value."""
    row = conn.execute(
        f"UPDATE sessions SET {column} = {column} + ?, updated_at = ? "
        "WHERE session_id = ? AND tenant_id = ? AND user_id = ? RETURNING " + column,
        (count, now, session_id, scope.tenant_id, scope.user_id),
    ).fetchone()
    if row is None:
        raise _Missing(f"session {session_id} does not exist")
    return int(row[0])
