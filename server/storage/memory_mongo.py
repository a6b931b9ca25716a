"""MongoMemoryStore: the MemoryStore of agent/tools/memory.py over a MongoDB database.

It lives in the conversation store's database (`StorageSettings.mongodb_database`) and owns
only the `memories` collection: one document per record, each carrying `tenant_id` and
`user_id`, and every query filters on both, so a record of another user is never read,
changed or deleted. Indexes, created at `open()` one per command (FerretDB 1.24 crashes on
a `createIndexes` batch whose indexes all exist already) and so idempotent:

    memory_id_1 (unique)      one record per id, whoever owns it
    tenant_id_1_user_id_1     `records`: all of one user's memories

`mark_used` is one `update_many` with `$inc`, atomic per document on MongoDB, so concurrent
retrievals from any number of processes never lose a use. FerretDB 1.x applies updates as
read-then-replace (see server/storage/mongo.py), so there two concurrent `mark_used` of the
same record can count once. This store serializes its own `mark_used` calls per user, so one
process never races itself even on FerretDB; across processes on FerretDB a use may be lost.
That is harmless (`use_count` only ranks and breaks eviction ties), which is why the counter
is not built the insert-decides way the event numbering is.

The driver is pymongo's `AsyncMongoClient`. Pass the client of an open `MongoStore` (or any
client) to share its connection pool; without one the store opens its own and closes it in
`close()`. Either way `mongodb_timeout_ms` bounds every operation (via `pymongo.timeout`, so a
shared client's own settings cannot lengthen it), and every driver failure is a StorageError.
The store opens on first use too, so it works even if nobody calls `open()`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pymongo
from pymongo import ASCENDING, AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from agent.errors import StorageError
from agent.tools.memory_policy import CATEGORIES, TIERS, MemoryRecord
from server.settings import StorageSettings
from server.storage.mongo import _translated

__all__ = ["MongoMemoryStore"]

Doc = dict[str, Any]

COLLECTION = "memories"
_INDEXES: list[list[tuple[str, int]]] = [
    [("memory_id", ASCENDING)],
    [("tenant_id", ASCENDING), ("user_id", ASCENDING)],
]
_UNIQUE = {"memory_id_1"}
_FIELDS = ("content", "category", "tier", "keywords", "use_count", "last_used_at", "updated_at")


class MongoMemoryStore:
    """Per-user memories in the `memories` collection of the configured MongoDB database."""

    def __init__(
        self, settings: StorageSettings, *, client: AsyncMongoClient[Doc] | None = None
    ) -> None:
        """`client`: share this (already configured) client; it is then not closed here."""
        self._settings = settings
        self._timeout_s = settings.mongodb_timeout_ms / 1000
        self._client = client
        self._owns_client = client is None
        self._collection: AsyncCollection[Doc] | None = None
        self._opening = asyncio.Lock()
        self._closed = False
        # One lock per user for mark_used (see the module docstring); weak, so idle users
        # cost nothing.
        self._marking: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and create the indexes now, so a bad URI fails at startup rather than at
        the first tool call; fail within the timeout if the server is away."""
        await self._memories()

    async def close(self) -> None:
        """Close the client if this store made it; later calls raise StorageError."""
        self._closed = True
        self._collection = None
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            with _translated("close the MongoDB memory client"):
                await client.close()

    # -- MemoryStore -------------------------------------------------------------------------

    async def records(self, tenant_id: str, user_id: str) -> list[MemoryRecord]:
        memories = await self._memories()
        with self._op("read memories"):
            docs = await memories.find(_owner(tenant_id, user_id), {"_id": 0}).to_list()
        return [_record(doc) for doc in docs]

    async def save(self, tenant_id: str, user_id: str, record: MemoryRecord) -> None:
        """Upsert on (memory_id, owner). An id owned by another user fails the insert on the
        unique index and is then left alone, as SQLite's guarded upsert does."""
        memories = await self._memories()
        where = {"memory_id": record.memory_id, **_owner(tenant_id, user_id)}
        fields: Doc = {name: getattr(record, name) for name in _FIELDS}
        fields["keywords"] = list(record.keywords)
        change = {"$set": fields, "$setOnInsert": {"created_at": record.created_at}}
        with self._op("save a memory"):
            try:
                await memories.update_one(where, change, upsert=True)
            except DuplicateKeyError:
                # Either another user's id, or a concurrent save of the same record won the
                # insert: in that case the record is ours now, and a plain update lands.
                await memories.update_one(where, change)

    async def delete(self, tenant_id: str, user_id: str, memory_ids: Sequence[str]) -> None:
        if not memory_ids:
            return
        memories = await self._memories()
        where = {"memory_id": {"$in": list(memory_ids)}, **_owner(tenant_id, user_id)}
        with self._op("delete memories"):
            await memories.delete_many(where)

    async def mark_used(
        self, tenant_id: str, user_id: str, memory_ids: Sequence[str], now_ms: int
    ) -> None:
        if not memory_ids:
            return
        memories = await self._memories()
        where = {"memory_id": {"$in": list(memory_ids)}, **_owner(tenant_id, user_id)}
        change = {"$inc": {"use_count": 1}, "$set": {"last_used_at": now_ms}}
        lock = self._marking.setdefault((tenant_id, user_id), asyncio.Lock())
        async with lock:
            with self._op("mark memories used"):
                await memories.update_many(where, change)

    # -- plumbing ----------------------------------------------------------------------------

    async def _memories(self) -> AsyncCollection[Doc]:
        """The collection, connecting and creating the indexes on first use."""
        if self._closed:
            raise StorageError("the memory store is closed")
        if self._collection is not None:
            return self._collection
        async with self._opening:
            if self._collection is None:
                self._collection = await self._connect()
            return self._collection

    async def _connect(self) -> AsyncCollection[Doc]:
        where = f"open the memories of MongoDB database {self._settings.mongodb_database!r}"
        client = self._client
        if client is None:
            timeout = self._settings.mongodb_timeout_ms
            with _translated(where):
                client = AsyncMongoClient(
                    self._settings.mongodb_uri,
                    serverSelectionTimeoutMS=timeout,
                    connectTimeoutMS=timeout,
                    socketTimeoutMS=timeout,
                    timeoutMS=timeout,
                    appname="agent-server-memory",
                )
            self._client = client
        memories = client[self._settings.mongodb_database][COLLECTION]
        with self._op(where):
            for keys in _INDEXES:
                name = "_".join(f"{field}_{order}" for field, order in keys)
                await memories.create_index(keys, name=name, unique=name in _UNIQUE)
        return memories

    @contextmanager
    def _op(self, action: str) -> Iterator[None]:
        """Bound the block by `mongodb_timeout_ms` and turn driver errors into StorageError."""
        with _translated(action), pymongo.timeout(self._timeout_s):
            yield


def _owner(tenant_id: str, user_id: str) -> Doc:
    return {"tenant_id": tenant_id, "user_id": user_id}


def _record(doc: Doc) -> MemoryRecord:
    """A stored document as a record; a malformed one is a StorageError, not a crash."""
    memory_id = doc.get("memory_id", "?")
    category, tier = doc.get("category"), doc.get("tier")
    if category not in CATEGORIES or tier not in TIERS:
        raise StorageError(f"memory {memory_id} has an unknown category or tier")
    try:
        return MemoryRecord(
            memory_id=str(doc["memory_id"]),
            content=str(doc["content"]),
            category=category,
            tier=tier,
            keywords=tuple(str(k) for k in doc["keywords"]),
            use_count=int(doc["use_count"]),
            last_used_at=int(doc["last_used_at"]),
            created_at=int(doc["created_at"]),
            updated_at=int(doc["updated_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageError(f"memory {memory_id} is malformed: {exc!r}") from exc
