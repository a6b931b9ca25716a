"""Storage fixtures: every contract test runs once per backend, each time on fresh data.

The "mongodb" backend talks to a FerretDB process started once per test session, or to the
server in `MONGODB_URI` when that is set; each test gets, and then drops, its own database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pymongo
import pytest

from server.app import create_store
from server.settings import Settings, StorageSettings
from server.storage.base import Store
from server.storage.memory_mongo import MongoMemoryStore
from server.storage.memory_sqlite import SQLiteMemoryStore
from server.storage.sqlite import SQLiteStore
from tests.fakes.ferretdb import FerretDB, ferretdb_binary

BACKENDS = ("sqlite", "mongodb")

AnyMemoryStore = SQLiteMemoryStore | MongoMemoryStore


@dataclass(frozen=True)
class Backend:
    """How to open (again) the store a test runs against."""

    name: str
    settings: StorageSettings

    def new_store(self) -> Store:
        """A new, unopened instance over the same file or database (as after a restart)."""
        return create_store(Settings(storage=self.settings))


@pytest.fixture(scope="session")
def ferretdb_bin() -> Path:
    """The FerretDB binary, built with Go on the first run of a fresh machine."""
    try:
        return ferretdb_binary()
    except RuntimeError as exc:
        if os.environ.get("MONGODB_URI"):
            pytest.skip(f"MONGODB_URI is set and FerretDB is unavailable: {exc}")
        raise


@pytest.fixture(scope="session")
def mongodb_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """MONGODB_URI when set, else a FerretDB process shared by the whole session."""
    uri = os.environ.get("MONGODB_URI")
    if uri:
        yield uri
        return
    with FerretDB(ferretdb_binary(), tmp_path_factory.mktemp("ferretdb")) as server:
        yield server.uri


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        # Shared, like MongoDB: some tests hold two stores on the file, as two processes would.
        settings = StorageSettings(backend="sqlite", sqlite_path=tmp_path / "a.db", shared=True)
        yield Backend("sqlite", settings)
        return
    uri: str = request.getfixturevalue("mongodb_uri")  # only started if a test needs it
    database = f"contract_{uuid.uuid4().hex[:16]}"
    settings = StorageSettings(backend="mongodb", mongodb_uri=uri, mongodb_database=database)
    yield Backend("mongodb", settings)
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
        uri, serverSelectionTimeoutMS=5000
    )
    try:
        client.drop_database(database)
    finally:
        client.close()


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    opened = backend.new_store()
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def new_memory_store(backend: Backend) -> AnyMemoryStore:
    """An unopened memory store beside `backend`'s conversation store: the same SQLite file,
    or the same MongoDB database, as the server wires them."""
    if backend.name == "sqlite":
        return SQLiteMemoryStore(backend.settings.sqlite_path)
    return MongoMemoryStore(backend.settings)


@pytest.fixture
async def memory_store(backend: Backend) -> AsyncIterator[AnyMemoryStore]:
    """An open memory store on the test's fresh file or database (per backend)."""
    opened = new_memory_store(backend)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    """An open SQLiteStore on a fresh file: for the tests of SQLite's own write path."""
    opened = SQLiteStore(tmp_path / "db.sqlite")
    await opened.open()
    yield opened
    await opened.close()


@pytest.fixture
def mongodb_database(mongodb_uri: str) -> Iterator[str]:
    """A fresh database name on `mongodb_uri`, dropped after the test."""
    database = f"server_{uuid.uuid4().hex[:16]}"
    yield database
    drop_database(mongodb_uri, database)


def drop_database(uri: str, database: str) -> None:
    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
        uri, serverSelectionTimeoutMS=5000
    )
    try:
        client.drop_database(database)
    finally:
        client.close()
