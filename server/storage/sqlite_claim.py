"""Claiming a SQLite file at open: one process per file unless it is shared, and writable.

A server that is not told the file is shared (`storage.shared`) closes every run the file
shows active when it starts: those of a process that died. A second such process on the
same file would close the first one's live runs while they still write, so the file is
claimed with an advisory lock on a file beside it (`<name>.lock`; SQLite's own locks on the
database are left alone): exclusive for a process that owns the file, shared by the
processes that share it. The lock goes with the process, however it ends.

A file the process may read but not write opens without complaint, and every write then
fails: it is found out here, by a write that is rolled back.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

__all__ = ["FileClaim", "check_writable"]


class FileClaim:
    """The advisory lock on `<database>.lock`, held from `take` until `release`."""

    def __init__(self, database: Path, *, shared: bool) -> None:
        self._database = database
        self._shared = shared
        self._fd: int | None = None

    def take(self) -> None:
        """Lock the file, or raise OSError saying which process kind holds it (blocking I/O:
        call it off the event loop). The lock is named after the file itself, not the path
        given: a server reaching it through a symbolic link meets the same lock."""
        real = self._database.resolve()
        fd = os.open(real.with_name(real.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self._shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if self._shared:
                why = "another server process uses it without storage.shared"
            else:
                why = "another server process uses it"
            raise OSError(
                f"{why}. Give each process its own file, or set storage.shared = true in "
                f"every process that uses {self._database}"
            ) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


def check_writable(conn: sqlite3.Connection) -> None:
    """Raise sqlite3.Error when the database cannot be written (a read-only file or
    filesystem), by a change that is rolled back."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA user_version = {int(version) ^ 1}")
    finally:
        conn.execute("ROLLBACK")
