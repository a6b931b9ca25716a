"""SQLiteStore's WAL is copied back into the database file by a thread of its own, never by a
commit: a checkpoint inside a commit held every write waiting for it (tens of ms under load).

Judged by the database file alone (copied without its `-wal`): it holds what was checkpointed
and nothing else.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest

from server.storage.base import Scope
from server.storage.sqlite import SQLiteStore

ALICE = Scope("acme", "alice")
BODY = "x" * 4000  # 1500 events of this are well past SQLite's 1000-page autocheckpoint


def _events_in_file_alone(db: Path, tmp_path: Path) -> int:
    copy = tmp_path / "alone.sqlite"
    shutil.copyfile(db, copy)
    conn = sqlite3.connect(copy)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if "events" not in tables:
            return 0
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()


async def test_commits_never_checkpoint_and_the_checkpointer_does(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    store = SQLiteStore(db)
    await store.open()
    try:
        checkpointer = store._checkpointer
        assert checkpointer is not None
        checkpointer.interval_s = 3600.0  # not due: only a commit could checkpoint now
        await store.create_session(ALICE, "s", 100)
        for start in range(0, 1500, 50):
            frames = [{"type": "x", "n": n, "text": BODY} for n in range(start, start + 50)]
            await store.append_events(ALICE, "s", frames, 200)
        assert checkpointer.running is None
        assert _events_in_file_alone(db, tmp_path) == 0

        checkpointer.interval_s = 0.0  # due: the next commit starts one, in its own thread
        await store.append_events(ALICE, "s", [{"type": "last"}], 300)
        assert checkpointer.running is not None
        await checkpointer.running
        assert _events_in_file_alone(db, tmp_path) == 1501
    finally:
        await store.close()
    assert _events_in_file_alone(db, tmp_path) == 1501


async def test_a_failing_checkpoint_is_logged_once_and_writes_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(tmp_path / "db.sqlite")
    await store.open()
    try:
        checkpointer = store._checkpointer
        assert checkpointer is not None and checkpointer._conn is not None
        await asyncio.get_running_loop().run_in_executor(
            checkpointer._thread,
            checkpointer._conn.close,  # every checkpoint now fails
        )
        checkpointer.interval_s = 0.0
        await store.create_session(ALICE, "s", 100)
        # That commit started a checkpoint: let it end, or the next commit finds it running
        # and starts none (it may end before the assertion below looks).
        if checkpointer.running is not None:
            await asyncio.gather(checkpointer.running, return_exceptions=True)
        for n in range(3):
            bodies = await store.append_events(ALICE, "s", [{"type": "x"}], 200 + n)
            assert checkpointer.running is not None
            await asyncio.gather(checkpointer.running, return_exceptions=True)
            assert len(bodies) == 1
    finally:
        await store.close()
    failures = [r for r in caplog.records if "checkpoint failed" in r.getMessage()]
    assert len(failures) == 1
