"""One process per SQLite file unless it is shared: a second owner would close the first
one's live runs as interrupted at its start while they still write
(server/storage/sqlite_claim.py)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from agent.errors import StorageError
from server.storage.sqlite import SQLiteStore
from tests.fakes.processes import REPO, free_port


async def test_a_second_owner_of_a_file_is_refused_and_shared_ones_are_not(tmp_path: Path):
    path = tmp_path / "agent.db"
    first = SQLiteStore(path)
    await first.open()
    try:
        for shared in (False, True):  # neither a second owner nor a sharer next to an owner
            with pytest.raises(StorageError) as refused:
                await SQLiteStore(path, shared=shared).open()
            said = str(refused.value)
            assert "another server process uses it" in said and "storage.shared = true" in said
            assert ("without storage.shared" in said) == shared
    finally:
        await first.close()
    sharers = [SQLiteStore(path, shared=True) for _ in range(2)]  # the file is free again
    for store in sharers:
        await store.open()
    with pytest.raises(StorageError, match="another server process uses it. Give"):
        await SQLiteStore(path).open()  # an owner next to sharers
    for store in sharers:
        await store.close()
    again = SQLiteStore(path)
    await again.open()  # a lock goes with its holder: nothing is left behind
    try:
        link = tmp_path / "link.db"
        link.symlink_to(path)
        with pytest.raises(StorageError, match="another server process uses it"):
            await SQLiteStore(link).open()  # the same file by another name
    finally:
        await again.close()


async def test_a_second_server_on_a_file_in_use_does_not_start(tmp_path: Path):
    """From outside: `agent-server serve` on a file another server owns exits at once with
    the reason, and never closes that server's runs."""
    path = tmp_path / "agent.db"
    owner = SQLiteStore(path)
    await owner.open()
    try:
        second = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "server",
            "serve",
            "--port",
            str(free_port()),
            cwd=tmp_path,
            env={"AGENT__STORAGE__SQLITE_PATH": str(path), "PYTHONPATH": str(REPO)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(60):
                out, err = await second.communicate()
        finally:
            if second.returncode is None:  # it started after all: never leave it serving
                second.kill()
                await second.wait()
    finally:
        await owner.close()
    said = (out + err).decode()
    assert second.returncode != 0
    assert "another server process uses it" in said and str(path) in said
    assert "cannot start: cannot open the SQLite database" in said
    assert "Traceback" not in said  # the reason alone, not the stack that carried it
