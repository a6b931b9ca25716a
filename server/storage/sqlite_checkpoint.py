"""Checkpoints of a SQLiteStore's WAL, in a thread of their own instead of inside commits.

SQLite's default runs a checkpoint (copying the WAL back into the database file, with two
fsyncs under `synchronous=NORMAL`) in whichever commit takes the WAL past 1000 pages, so every
few seconds of a busy store one commit, and every write waiting for it, took tens of
milliseconds longer. The writer connection turns that off (`wal_autocheckpoint=0`), and this
runs a PASSIVE checkpoint on its own connection at most once per `interval_s` of writes:
PASSIVE never blocks the writer or the readers, and copies what no reader still needs.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from server.storage.sqlite_connect import connect

__all__ = ["Checkpointer"]

log = logging.getLogger(__name__)


class Checkpointer:
    """Run `PRAGMA wal_checkpoint(PASSIVE)` off the writer thread, after writes, at most once
    per `interval_s` and never two at once."""

    def __init__(self, path: Path, interval_s: float = 1.0) -> None:
        self._path = path
        self.interval_s = interval_s
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sqlite-checkpoint")
        self._conn: sqlite3.Connection | None = None
        self._last = time.monotonic()
        self.running: asyncio.Future[None] | None = None  # the checkpoint under way, if any
        self._failing = False  # the last one failed: said once, not every second

    async def open(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._open)

    def _open(self) -> None:
        self._conn = connect(self._path)

    def after_commit(self) -> None:
        """On the event loop, after a commit: start a checkpoint if one is due."""
        if self.running is not None or self._conn is None:
            return
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return
        self._last = now
        loop = asyncio.get_running_loop()
        self.running = loop.run_in_executor(self._thread, self._checkpoint)
        self.running.add_done_callback(self._done)

    def _checkpoint(self) -> None:
        if self._conn is not None:
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _done(self, future: asyncio.Future[None]) -> None:
        self.running = None
        failure = None if future.cancelled() else future.exception()
        if failure is not None and not self._failing:
            # The next commit tries again; SQLite's own checkpoint on close catches up.
            log.warning("SQLite WAL checkpoint failed (said once until one works): %s", failure)
        self._failing = failure is not None

    async def close(self) -> None:
        if self.running is not None:
            await asyncio.gather(self.running, return_exceptions=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(self._thread, conn.close)
        self._thread.shutdown(wait=False)
