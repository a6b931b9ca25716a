"""SQLiteStore: the embedded default, one WAL-mode file.

Nothing here blocks the event loop: statements run in dedicated threads, one writer and one
reader, each with its own connection (and WAL checkpoints in a third: sqlite_checkpoint.py).
Writes are group-committed: every write waiting while a transaction runs goes into the next
one, which the writer picks up itself, so a hundred streaming sessions cost one commit per
batch, not one per event. Each batch is a `BEGIN IMMEDIATE` transaction, or
one statement when it holds only numbered events (a model streaming at its own pace).

Events are numbered on the event loop, from the last `seq` this store gave the session; how
the writer then stores a batch in a few multi-row statements, and redoes it numbered from the
session rows when another process (or a failed batch) moved a session on, is in
`sqlite_batch.py`. `(session_id, seq)` is the primary key, so allocation stays gap-free even
if a second process opens the same file.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import orjson

from agent.errors import StorageError
from agent.messages import Message
from server.storage import sqlite_runs, sqlite_search, sqlite_usage
from server.storage.base import (
    SLOT_GRACE_MS,
    Control,
    Cursor,
    DeleteOutcome,
    Lease,
    Scope,
    SessionRecord,
    SessionStatus,
    StatusChange,
    UnfinishedRun,
    message_from_api,
    message_to_api,
)
from server.storage.outage import Outage, StoreUnavailable
from server.storage.runs import RunNode
from server.storage.search import SearchHit, title_matches, words
from server.storage.sqlite_batch import (
    IN_ORDER_SCHEMA,
    Append,
    Op,
    bump,
    encode,
    isolated,
    run_alone,
    run_together,
)
from server.storage.sqlite_checkpoint import Checkpointer
from server.storage.sqlite_claim import FileClaim, check_writable
from server.storage.sqlite_connect import connect, locked

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS sessions (
    session_id    TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    status        TEXT NOT NULL,
    title         TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    last_seq      INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0,
    active_run_id TEXT,
    pending_input TEXT,
    lease_until   INTEGER
);
CREATE INDEX IF NOT EXISTS sessions_by_user
    ON sessions (tenant_id, user_id, updated_at DESC);
CREATE INDEX IF NOT EXISTS sessions_by_status ON sessions (tenant_id, status, created_at DESC);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    run_id     TEXT,
    ts         INTEGER NOT NULL,
    body       BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL,
    sequence   INTEGER NOT NULL,
    ts         INTEGER NOT NULL,
    body       BLOB NOT NULL,
    PRIMARY KEY (session_id, sequence)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS controls (
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS run_slots (
    key        TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    session_id TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_slots_by_run ON run_slots (run_id);
"""
    + IN_ORDER_SCHEMA
    + sqlite_search.SCHEMA
    + sqlite_runs.SCHEMA
)
_TAIL_CHUNK = 200  # sessions per tail query (four bound variables each)

_SESSION_COLUMNS = (
    "session_id, tenant_id, user_id, status, title, created_at, updated_at, last_seq, "
    "active_run_id, pending_input"
)


class SQLiteStore:
    """The Store contract over a SQLite file: one server process per file, or with
    `shared=True` several processes on one host (run leases, tail and controls by polling)."""

    NUMBERS_KEPT = 10_000  # sessions whose last `seq` is remembered (see `_note_last_seq`)

    def __init__(self, path: Path, *, shared: bool = False, outage: Outage | None = None) -> None:
        self.shared = shared
        self.outage = outage or Outage()  # another process holding the write lock: wait
        self._path = path
        self._claim = FileClaim(path, shared=shared)
        self._writer = _executor("sqlite-writer")
        self._reader = _executor("sqlite-reader")
        self._closed = False
        self._write_conn: sqlite3.Connection | None = None
        self._read_conn: sqlite3.Connection | None = None
        # Queued writes, shared with the writer thread (under `_lock`), and whether the writer
        # has been started for them.
        self._lock = threading.Lock()
        self._pending: list[tuple[list[Op | Append], asyncio.Future[list[Any]]]] = []
        self._writing = False
        self._committing: asyncio.Future[None] | None = None  # done when no batch is left
        self._checkpointer: Checkpointer | None = None
        self._last_seq: dict[str, int] = {}  # last seq handed out, per session written here

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self._write_conn is not None:
            return
        if self._closed:  # reopened after close()
            self._writer, self._reader = _executor("sqlite-writer"), _executor("sqlite-reader")
            self._closed = False
        try:
            await self._in_writer(self._open_writer)
            await self._in_reader(self._open_reader)
            self._checkpointer = Checkpointer(self._path)
            await self._checkpointer.open()
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"cannot open the SQLite database {self._path}: {exc}") from exc

    async def close(self) -> None:
        if self._committing is not None:
            await asyncio.shield(self._committing)
        await self._in_writer(_close_conn, self._write_conn)
        await self._in_writer(self._claim.release)
        await self._in_reader(_close_conn, self._read_conn)
        if self._checkpointer is not None:
            await self._checkpointer.close()
            self._checkpointer = None
        self._write_conn = self._read_conn = None
        self._last_seq.clear()
        self._closed = True
        self._writer.shutdown(wait=False)
        self._reader.shutdown(wait=False)

    def _open_writer(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._claim.take()  # one process per file, unless shared (server/storage/sqlite_claim.py)
        try:
            conn = connect(self._path, schema=_SCHEMA, synchronous_normal=True)
            check_writable(conn)
        except BaseException:
            self._claim.release()
            raise
        conn.execute("PRAGMA wal_autocheckpoint=0")  # the Checkpointer's thread does it
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
        if "lease_until" not in columns:  # files written before leases existed
            conn.execute("ALTER TABLE sessions ADD COLUMN lease_until INTEGER")
        sqlite_search.backfill(conn)  # files written before message search existed
        sqlite_usage.add_counts(conn)  # files written before byte counts existed
        self._write_conn = conn

    def _open_reader(self) -> None:
        self._read_conn = connect(self._path)

    # -- sessions ----------------------------------------------------------------------------

    async def create_session(
        self, scope: Scope, session_id: str, now: int, title: str = ""
    ) -> SessionRecord:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO sessions (session_id, tenant_id, user_id, status, title, "
                "created_at, updated_at) VALUES (?, ?, ?, 'idle', ?, ?, ?)",
                (session_id, scope.tenant_id, scope.user_id, title, now, now),
            )

        await self._write(op)
        return SessionRecord(
            session_id, scope.tenant_id, scope.user_id, SessionStatus.IDLE, title, now, now, 0
        )

    async def get_session(self, scope: Scope, session_id: str) -> SessionRecord | None:
        def op(conn: sqlite3.Connection) -> SessionRecord | None:
            row = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions "
                "WHERE session_id = ? AND tenant_id = ? AND user_id = ?",
                (session_id, scope.tenant_id, scope.user_id),
            ).fetchone()
            return _session(row) if row else None

        return await self._read(op)

    async def list_sessions(self, scope: Scope, limit: int) -> list[SessionRecord]:
        def op(conn: sqlite3.Connection) -> list[SessionRecord]:
            rows = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE tenant_id = ? AND user_id = ? "
                "ORDER BY updated_at DESC, rowid DESC LIMIT ?",
                (scope.tenant_id, scope.user_id, limit),
            ).fetchall()
            return [_session(r) for r in rows]

        return await self._read(op)

    async def search_sessions(self, scope: Scope, query: str, limit: int) -> list[SearchHit]:
        """`SessionSearch`: FTS5 over the searched messages, and the titles."""
        query_words = words(query)

        def op(conn: sqlite3.Connection) -> list[SearchHit]:
            found = sqlite_search.search(conn, scope, query_words, limit)
            rows = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE tenant_id = ? AND user_id = ? "
                "ORDER BY updated_at DESC, rowid DESC",
                (scope.tenant_id, scope.user_id),
            )
            hits = []
            for row in rows:
                session = _session(row)
                if session.session_id in found:
                    hits.append(SearchHit(session, *found[session.session_id]))
                elif query_words and title_matches(session.title, query_words):
                    hits.append(SearchHit(session))
                if len(hits) == limit:
                    break
            return hits

        return await self._read(op)

    async def update_session(
        self,
        scope: Scope,
        session_id: str,
        now: int,
        *,
        status: SessionStatus | None = None,
        title: str | None = None,
        active_run_id: str | None = None,
        pending_input: dict[str, Any] | None = None,
        lease_until: int | None = None,
    ) -> None:
        change = None
        if status is not None:
            change = StatusChange(status, active_run_id, pending_input, lease_until)
        await self._write(_session_update(scope, session_id, now, change, title))

    async def rename_session(self, scope: Scope, session_id: str, title: str) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE sessions SET title = ? WHERE session_id = ? AND tenant_id = ? "
                "AND user_id = ?",
                (title, session_id, scope.tenant_id, scope.user_id),
            )
            return cursor.rowcount > 0

        return bool(await self._write(op))

    async def delete_session(self, scope: Scope, session_id: str, now: int) -> DeleteOutcome:
        """One transaction: the status and the run slot are read under the write lock that
        `take_run_slot` takes too, so a run and a delete never overlap, across processes."""
        owner = (session_id, scope.tenant_id, scope.user_id)

        def op(conn: sqlite3.Connection) -> DeleteOutcome:
            row = conn.execute(
                "SELECT status FROM sessions WHERE session_id = ? AND tenant_id = ? "
                "AND user_id = ?",
                owner,
            ).fetchone()
            if row is None:
                return "not_found"  # events of a foreign session id must stay
            starting = conn.execute(
                "SELECT 1 FROM run_slots WHERE key = ? AND created_at >= ?",
                (f"session/{session_id}", now - SLOT_GRACE_MS),
            ).fetchone()
            if row[0] != SessionStatus.IDLE or starting is not None:
                return "run_in_progress"
            conn.execute(
                "DELETE FROM sessions WHERE session_id = ? AND tenant_id = ? AND user_id = ?",
                owner,
            )
            for table in ("events", "messages", "controls", "run_slots", "runs"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            return "deleted"

        outcome: DeleteOutcome = await self._write(op)
        if outcome == "deleted":
            self._last_seq.pop(session_id, None)
        return outcome

    # -- events ------------------------------------------------------------------------------

    async def append_events(
        self, scope: Scope, session_id: str, frames: Sequence[dict[str, Any]], now: int
    ) -> list[bytes]:
        # Numbered again at each try: a failed batch used none of its numbers.
        results = await self.outage.ride(
            lambda: self._queue([self._append(scope, session_id, frames, now)])
        )
        bodies: list[bytes] = results[0]
        return bodies

    def _append(
        self, scope: Scope, session_id: str, frames: Sequence[dict[str, Any]], now: int
    ) -> Append:
        """Number and encode the frames here, on the event loop, from the last `seq` this
        store gave the session; the first append of a session reads it in the writer."""
        last = self._last_seq.get(session_id)
        append = Append(scope, session_id, frames, now, 0 if last is None else last + 1)
        if last is not None:
            append.bodies = [encode(frame, seq) for seq, frame in enumerate(frames, last + 1)]
            self._note_last_seq(session_id, last + len(frames))
        return append

    def _note_last_seq(self, session_id: str, last: int) -> None:
        """Remember the session's last number, as the most recently written; past
        `NUMBERS_KEPT` sessions the least recently written one is forgotten (its next append
        is numbered from its row, as after a restart), so a long-lived process does not keep
        a number for every session it ever wrote."""
        numbers = self._last_seq
        numbers.pop(session_id, None)
        numbers[session_id] = last
        if len(numbers) > self.NUMBERS_KEPT:
            del numbers[next(iter(numbers))]

    async def store_batch(
        self,
        scope: Scope,
        session_id: str,
        now: int,
        *,
        frames: Sequence[dict[str, Any]] = (),
        messages: Sequence[Message] = (),
        status: StatusChange | None = None,
    ) -> list[bytes]:
        """One unit of the next group commit: stored together or not at all (so a try that
        failed on a lock can be made again whole)."""

        def unit() -> list[Op | Append]:
            ops: list[Op | Append] = []
            if frames:
                ops.append(self._append(scope, session_id, frames, now))
            if messages:
                ops.append(_messages_append(scope, session_id, messages, now))
            if status is not None:
                ops.append(_session_update(scope, session_id, now, status))
            return ops

        if not (frames or messages or status is not None):
            return []
        results = await self.outage.ride(lambda: self._queue(unit()))
        bodies: list[bytes] = results[0] if frames else []
        return bodies

    async def read_events(
        self,
        scope: Scope,
        session_id: str,
        after_seq: int,
        limit: int | None = None,
        *,
        max_bytes: int | None = None,
    ) -> list[bytes]:
        def op(conn: sqlite3.Connection) -> list[bytes]:
            rows = conn.execute(
                "SELECT e.body FROM events e JOIN sessions s ON s.session_id = e.session_id "
                "WHERE e.session_id = ? AND s.tenant_id = ? AND s.user_id = ? AND e.seq > ? "
                "ORDER BY e.seq LIMIT ?",
                (
                    session_id,
                    scope.tenant_id,
                    scope.user_id,
                    after_seq,
                    -1 if limit is None else limit,
                ),
            )
            return _within_bytes((bytes(r[0]) for r in rows), max_bytes)

        return await self._read(op)

    # -- messages ----------------------------------------------------------------------------

    async def append_messages(
        self, scope: Scope, session_id: str, messages: Sequence[Message], now: int
    ) -> None:
        await self._write(_messages_append(scope, session_id, messages, now))

    async def read_messages(
        self,
        scope: Scope,
        session_id: str,
        limit: int,
        since: int | None,
        *,
        max_bytes: int | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        def op(conn: sqlite3.Connection) -> tuple[list[dict[str, Any]], int]:
            row = conn.execute(
                "SELECT message_count FROM sessions "
                "WHERE session_id = ? AND tenant_id = ? AND user_id = ?",
                (session_id, scope.tenant_id, scope.user_id),
            ).fetchone()
            if row is None:
                return [], 0
            if since is not None:
                rows = conn.execute(
                    "SELECT body FROM messages WHERE session_id = ? AND ts > ? "
                    "ORDER BY sequence LIMIT ?",
                    (session_id, since, limit),
                )
            else:
                rows = conn.execute(
                    "SELECT body FROM messages WHERE session_id = ? ORDER BY sequence DESC LIMIT ?",
                    (session_id, limit),
                )
            bodies = _within_bytes((bytes(r[0]) for r in rows), max_bytes)  # the rest unread
            if since is None:
                bodies.reverse()
            return [orjson.loads(body) for body in bodies], int(row[0])

        return await self._read(op)

    async def load_history(self, scope: Scope, session_id: str) -> list[Message]:
        def op(conn: sqlite3.Connection) -> list[Message]:
            rows = conn.execute(
                "SELECT m.body FROM messages m JOIN sessions s ON s.session_id = m.session_id "
                "WHERE m.session_id = ? AND s.tenant_id = ? AND s.user_id = ? "
                "ORDER BY m.sequence",
                (session_id, scope.tenant_id, scope.user_id),
            ).fetchall()
            return [message_from_api(orjson.loads(r[0])) for r in rows]

        return await self._read(op)

    # -- run tree (server/storage/runs.py) ---------------------------------------------------

    async def add_run(
        self, scope: Scope, session_id: str, run_id: str, parent_run_id: str | None, now: int
    ) -> None:
        await self._write(
            lambda conn: sqlite_runs.add(conn, scope, session_id, run_id, parent_run_id, now)
        )

    async def show_run(self, scope: Scope, session_id: str, run_id: str, now: int) -> bool:
        return bool(
            await self._write(lambda conn: sqlite_runs.show(conn, scope, session_id, run_id, now))
        )

    async def run_nodes(self, scope: Scope, session_id: str) -> list[RunNode]:
        return await self._read(lambda conn: sqlite_runs.nodes(conn, scope, session_id))

    async def renew_leases(self, leases: Sequence[Lease], lease_until: int) -> set[str]:
        held = list(leases)

        def op(conn: sqlite3.Connection) -> set[str]:
            renewed = set()
            for lease in held:
                cursor = conn.execute(
                    "UPDATE sessions SET lease_until = ? WHERE session_id = ? "
                    "AND active_run_id = ? AND lease_until <= ? "
                    "AND status IN ('running', 'awaiting_input', 'awaiting_approval')",
                    (lease_until, lease.session_id, lease.run_id, lease.given),
                )
                if cursor.rowcount == 1:
                    renewed.add(lease.session_id)
            return renewed

        renewed: set[str] = await self._write(op) if held else set()
        return renewed

    async def claim_run(self, item: UnfinishedRun, now: int, lease_until: int) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE sessions SET lease_until = ? WHERE session_id = ? "
                "AND status IN ('running', 'awaiting_input', 'awaiting_approval') "
                "AND (lease_until IS NULL OR lease_until < ?)",
                (lease_until, item.session_id, now),
            )
            return cursor.rowcount == 1

        claimed: bool = await self._write(op)
        return claimed

    async def unfinished_runs(self, now: int | None = None) -> list[UnfinishedRun]:
        def op(conn: sqlite3.Connection) -> list[UnfinishedRun]:
            rows = conn.execute(
                "SELECT tenant_id, user_id, session_id, active_run_id FROM sessions "
                "WHERE status IN ('running', 'awaiting_input', 'awaiting_approval') "
                "AND (? IS NULL OR lease_until IS NULL OR lease_until < ?)",
                (now, now),
            ).fetchall()
            return [UnfinishedRun(Scope(r[0], r[1]), r[2], r[3] or "") for r in rows]

        return await self._read(op)

    # -- several processes -------------------------------------------------------------------

    async def tail_events(
        self, cursors: Mapping[str, Cursor], limit: int
    ) -> list[tuple[str, int, bytes]]:
        items = [
            (sid, c.after_seq, c.scope.tenant_id, c.scope.user_id) for sid, c in cursors.items()
        ]

        def op(conn: sqlite3.Connection) -> list[tuple[str, int, bytes]]:
            out: list[tuple[str, int, bytes]] = []
            for start in range(0, len(items), _TAIL_CHUNK):
                chunk = items[start : start + _TAIL_CHUNK]
                values = ", ".join("(?, ?, ?, ?)" for _ in chunk)
                rows = conn.execute(
                    f"WITH c(sid, after, tenant, usr) AS (VALUES {values}) "
                    "SELECT e.session_id, e.seq, e.body FROM c "
                    "JOIN sessions s ON s.session_id = c.sid "
                    "AND s.tenant_id = c.tenant AND s.user_id = c.usr "
                    "JOIN events e ON e.session_id = c.sid AND e.seq > c.after "
                    "ORDER BY e.session_id, e.seq LIMIT ?",
                    [*(v for row in chunk for v in row), limit - len(out)],
                ).fetchall()
                out += [(r[0], int(r[1]), bytes(r[2])) for r in rows]
                if len(out) >= limit:
                    break
            return out

        return await self._read(op) if items else []

    async def notices(self) -> AsyncIterator[None]:
        """SQLite pushes nothing across processes: followers poll by `seq`."""
        return
        yield

    async def send_control(self, scope: Scope, control: Control, now: int) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO controls "
                "(session_id, key, run_id, kind, payload, created_at) "
                "SELECT ?, ?, ?, ?, ?, ? FROM sessions "
                "WHERE session_id = ? AND tenant_id = ? AND user_id = ?",
                (
                    control.session_id,
                    control.key,
                    control.run_id,
                    control.kind,
                    orjson.dumps(control.payload).decode(),
                    now,
                    control.session_id,
                    scope.tenant_id,
                    scope.user_id,
                ),
            )
            return cursor.rowcount == 1

        sent: bool = await self._write(op)
        return sent

    async def pending_controls(self, session_ids: Sequence[str]) -> list[Control]:
        ids = list(session_ids)

        def op(conn: sqlite3.Connection) -> list[Control]:
            marks = ", ".join("?" for _ in ids)
            rows = conn.execute(
                "SELECT session_id, run_id, key, kind, payload FROM controls "
                f"WHERE session_id IN ({marks}) ORDER BY created_at",
                ids,
            ).fetchall()
            return [Control(r[0], r[1], r[2], r[3], orjson.loads(r[4])) for r in rows]

        return await self._read(op) if ids else []

    async def drop_controls(self, session_id: str, run_id: str) -> None:
        await self._write(
            lambda conn: conn.execute(
                "DELETE FROM controls WHERE session_id = ? AND run_id = ?", (session_id, run_id)
            )
        )

    async def take_run_slot(
        self, scope: Scope, session_id: str, run_id: str, limit: int, now: int
    ) -> Literal["run_in_progress", "too_many_runs"] | None:
        """One transaction (BEGIN IMMEDIATE), so it is atomic across processes on the file."""

        def op(conn: sqlite3.Connection) -> Literal["run_in_progress", "too_many_runs"] | None:
            conn.execute(
                "DELETE FROM run_slots WHERE tenant_id = ? AND created_at < ? AND NOT EXISTS "
                "(SELECT 1 FROM sessions s WHERE s.session_id = run_slots.session_id "
                "AND s.active_run_id = run_slots.run_id "
                "AND s.status IN ('running', 'awaiting_input', 'awaiting_approval'))",
                (scope.tenant_id, now - SLOT_GRACE_MS),
            )
            insert = (
                "INSERT OR IGNORE INTO run_slots (key, tenant_id, session_id, run_id, created_at)"
                " VALUES (?, ?, ?, ?, ?)"
            )
            row = (scope.tenant_id, session_id, run_id, now)
            if conn.execute(insert, (f"session/{session_id}", *row)).rowcount == 0:
                return "run_in_progress"
            for slot in range(limit):
                key = f"tenant/{scope.tenant_id}/{slot}"
                if conn.execute(insert, (key, *row)).rowcount == 1:
                    return None
            conn.execute("DELETE FROM run_slots WHERE run_id = ?", (run_id,))
            return "too_many_runs"

        refused: Literal["run_in_progress", "too_many_runs"] | None = await self._write(op)
        return refused

    async def release_run_slot(self, session_id: str, run_id: str) -> None:
        await self._write(
            lambda conn: conn.execute("DELETE FROM run_slots WHERE run_id = ?", (run_id,))
        )

    # -- plumbing ----------------------------------------------------------------------------

    async def _write(self, op: Op) -> Any:
        """Queue `op` for the next group commit and wait for its result; again while another
        process holds the write lock (a failed transaction stored none of it)."""
        return (await self.outage.ride(lambda: self._queue([op])))[0]

    def _queue(self, unit: list[Op | Append]) -> asyncio.Future[list[Any]]:
        """Queue operations for the next group commit, as a unit: if one of them fails on its
        own, none of them is stored. The future has their results."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        if self._committing is None:
            self._committing = loop.create_future()
        with self._lock:
            self._pending.append((unit, future))
            if self._writing:  # the writer takes it with the next batch it picks up
                return future
            self._writing = True
        loop.call_soon(self._start_writer, loop)  # once the callers running now have queued
        return future

    def _start_writer(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self._writer.submit(self._write_queued, loop)
        except RuntimeError:  # the executor was shut down by close()
            with self._lock:
                batch, self._pending, self._writing = self._pending, [], False
            closed = StorageError("the SQLite store is closed")
            self._committed(batch, [closed] * len(batch), True)

    def _write_queued(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the writer thread: commit what is queued, batch after batch, until nothing is.
        The writer picks up the next batch itself instead of waiting for the event loop to
        take the last one's results: on a busy loop that wait was as long as a commit."""
        with self._lock:
            batch, self._pending = self._pending, []
        while batch:
            units = [unit for unit, _ in batch]
            results: list[list[Any] | BaseException]
            try:
                results = self._commit(units)
            except Exception as exc:  # noqa: BLE001 - every caller of the batch gets it
                results = [exc] * len(batch)
            with self._lock:
                following, self._pending = self._pending, []
                if not following:
                    self._writing = False
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._committed, batch, results, not following)
            batch = following

    def _committed(
        self,
        batch: list[tuple[list[Op | Append], asyncio.Future[list[Any]]]],
        results: list[list[Any] | BaseException],
        last: bool,
    ) -> None:
        """On the event loop: give each caller its results; after the writer's last batch,
        wake `close()` if nothing was queued since."""
        self._remember_numbers([unit for unit, _ in batch], results)
        if self._checkpointer is not None:
            self._checkpointer.after_commit()
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
        if not last:
            return
        with self._lock:
            if self._writing:  # a write queued since has started the writer again
                return
        committing, self._committing = self._committing, None
        if committing is not None and not committing.done():
            committing.set_result(None)

    def _remember_numbers(
        self, units: list[list[Op | Append]], results: list[list[Any] | BaseException]
    ) -> None:
        """After a commit: keep numbering from the last `seq` stored, unless appends queued
        since already went further (they were numbered after these). A unit that failed
        used none of its numbers: the session's next append reads them from its row."""
        for unit, result in zip(units, results, strict=True):
            for op in unit:
                if not isinstance(op, Append):
                    continue
                if isinstance(result, BaseException):
                    self._last_seq.pop(op.session_id, None)
                    continue
                last = op.last
                known = self._last_seq.get(op.session_id)
                if known is None or op.renumbered or known < last:
                    self._note_last_seq(op.session_id, last)

    def _commit(self, units: list[list[Op | Append]]) -> list[list[Any] | BaseException]:
        """Run a batch in one transaction. The common case uses no savepoints and stores all
        of the batch's events in a few statements (every sqlite3 step releases and retakes
        the GIL, which a busy event loop makes slow); if one unit fails on its own, or
        events were numbered from a stale `seq`, the batch is redone with each unit isolated
        and numbered from the session row."""
        conn = self._write_conn
        if conn is None:
            raise StorageError("the SQLite store is not open")
        ops = [op for unit in units for op in unit]
        try:
            alone = run_alone(conn, ops)
        except sqlite3.Error as exc:  # locked: waiting again below would double the wait
            raise StoreUnavailable(f"SQLite write failed: {exc}") from exc
        if alone is not None:
            return _per_unit(alone, units)
        results: list[list[Any] | BaseException] | None
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                results = _per_unit(run_together(conn, ops), units)
            except sqlite3.Error as exc:
                if not isinstance(exc, sqlite3.IntegrityError):
                    raise  # disk full, I/O error: the whole batch fails
                results = None
            except Exception:  # noqa: BLE001 - one bad operation must fail only itself
                results = None
            if results is None:
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                results = [isolated(conn, unit) for unit in units]
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if locked(exc):  # another process holds the write lock past busy_timeout
                raise StoreUnavailable(f"SQLite write failed: {exc}") from exc
            raise StorageError(f"SQLite write failed: {exc}") from exc
        return results

    async def _read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            if self._read_conn is None:
                raise StorageError("the SQLite store is not open")
            try:
                return op(self._read_conn)
            except sqlite3.Error as exc:
                raise StorageError(f"SQLite read failed: {exc}") from exc

        return await self._in_reader(run)

    async def _in_writer(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._writer, fn, *args)

    async def _in_reader(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._reader, fn, *args)

    async def stored_bytes(self, tenant: str | None = None) -> dict[str, int]:
        return await self._read(lambda conn: sqlite_usage.stored_bytes(conn, tenant))

    async def session_owners(self, session_ids: Sequence[str]) -> dict[str, Scope]:
        ids = list(session_ids)

        def op(conn: sqlite3.Connection) -> dict[str, Scope]:
            found: dict[str, Scope] = {}
            for start in range(0, len(ids), _TAIL_CHUNK):
                chunk = ids[start : start + _TAIL_CHUNK]
                marks = ", ".join("?" for _ in chunk)
                rows = conn.execute(
                    "SELECT session_id, tenant_id, user_id FROM sessions "
                    f"WHERE session_id IN ({marks})",
                    chunk,
                ).fetchall()
                found.update((r[0], Scope(r[1], r[2])) for r in rows)
            return found

        return await self._read(op) if ids else {}


def _per_unit(
    results: list[Any], units: list[list[Op | Append]]
) -> list[list[Any] | BaseException]:
    """Split a batch's results into its units'."""
    out: list[list[Any] | BaseException] = []
    start = 0
    for unit in units:
        out.append(results[start : start + len(unit)])
        start += len(unit)
    return out


def _messages_append(scope: Scope, session_id: str, messages: Sequence[Message], now: int) -> Op:
    """Number messages from the session row and store them."""

    def op(conn: sqlite3.Connection) -> None:
        last = bump(conn, scope, session_id, "message_count", len(messages), now)
        first = last - len(messages)
        rows = []
        for sequence, message in enumerate(messages, start=first):
            body = message_to_api(message, uuid.uuid4().hex, sequence, now)
            rows.append((session_id, sequence, now, orjson.dumps(body)))
        conn.executemany(
            "INSERT INTO messages (session_id, sequence, ts, body) VALUES (?, ?, ?, ?)", rows
        )

    return op


def _session_update(
    scope: Scope, session_id: str, now: int, change: StatusChange | None, title: str | None = None
) -> Op:
    """`update_session`: `updated_at`, and the status with its fields and the title if given.
    A run that ended frees its session's run slot: a next one may start anywhere as soon as
    a watcher learns it (response_complete)."""
    sets = ["updated_at = ?"]
    args: list[Any] = [now]
    if change is not None:
        sets += ["status = ?", "active_run_id = ?", "pending_input = ?", "lease_until = ?"]
        pending = orjson.dumps(change.pending_input).decode() if change.pending_input else None
        args += [change.status, change.active_run_id, pending, change.lease_until]
    if title is not None:
        sets.append("title = ?")
        args.append(title)
    sql = (
        f"UPDATE sessions SET {', '.join(sets)} "
        "WHERE session_id = ? AND tenant_id = ? AND user_id = ?"
    )
    args += [session_id, scope.tenant_id, scope.user_id]
    free_slots = change is not None and change.status == SessionStatus.IDLE

    def op(conn: sqlite3.Connection) -> None:
        if conn.execute(sql, args).rowcount and free_slots:
            conn.execute("DELETE FROM run_slots WHERE session_id = ?", (session_id,))

    return op


def _session(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(
        session_id=row[0],
        tenant_id=row[1],
        user_id=row[2],
        status=SessionStatus(row[3]),
        title=row[4],
        created_at=row[5],
        updated_at=row[6],
        last_seq=row[7],
        active_run_id=row[8],
        pending_input=orjson.loads(row[9]) if row[9] else None,
    )


def _executor(name: str) -> ThreadPoolExecutor:
    """One thread per connection: sqlite3 connections are not shared between threads."""
    return ThreadPoolExecutor(1, thread_name_prefix=name)


def _close_conn(conn: sqlite3.Connection | None) -> None:
    if conn is not None:
        conn.close()


def _within_bytes(frames: Iterable[bytes], max_bytes: int | None) -> list[bytes]:
    """The frames up to the one that brings them past `max_bytes` (all without a bound); the
    rows after it are never fetched."""
    out: list[bytes] = []
    size = 0
    for frame in frames:
        out.append(frame)
        size += len(frame)
        if max_bytes is not None and size > max_bytes:
            break
    return out
