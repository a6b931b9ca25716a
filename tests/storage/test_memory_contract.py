"""The MemoryStore contract (agent/tools/memory.py), run against every backend.

Each test gets a fresh SQLite file or MongoDB database (see conftest.py), the memory store
sitting beside the conversation store as the server wires it. The memory tools themselves
run over both stores at the end; MongoDB-only behaviour (indexes, a shared client, the
database going away) comes last.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymongo
import pytest
from pymongo import AsyncMongoClient

from agent.errors import StorageError
from agent.tools.config import MemoryConfig
from agent.tools.memory import build_memory_tools
from agent.tools.memory_policy import MemoryRecord
from server.settings import StorageSettings
from server.storage.memory_mongo import MongoMemoryStore
from tests.agent.tools.conftest import call, context
from tests.fakes.ferretdb import FerretDB, free_port
from tests.storage.conftest import AnyMemoryStore, Backend, new_memory_store
from tests.storage.test_contract import (
    collect_pymongo_monitor_sockets,
    eventually,
    gave_up_within,
)

T0 = 1_750_000_000_000
ALICE = ("acme", "alice")
BOB = ("acme", "bob")  # same tenant, other user
MALLORY = ("globex", "alice")  # other tenant, same user name


def record(memory_id: str = "m1", content: str = "Prefers tea", **changes: Any) -> MemoryRecord:
    base = MemoryRecord(memory_id, content, "preference", "core", ("tea",), 0, T0, T0, T0)
    return replace(base, **changes)


async def by_id(store: AnyMemoryStore, owner: tuple[str, str]) -> dict[str, MemoryRecord]:
    return {r.memory_id: r for r in await store.records(*owner)}


async def is_ferretdb(uri: str) -> bool:
    """FerretDB announces itself in buildInfo; real MongoDB does not."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, timeoutMS=5000)
    try:
        return "ferretdbVersion" in await client.admin.command("buildInfo")
    finally:
        await client.close()


# -- save and records --------------------------------------------------------------------------


async def test_save_then_records_returns_the_same_record(memory_store: AnyMemoryStore) -> None:
    saved = record(keywords=("tea", "drink"), use_count=2, tier="important", category="profile")
    await memory_store.save(*ALICE, saved)

    assert await memory_store.records(*ALICE) == [saved]
    assert await memory_store.records("acme", "nobody") == []


async def test_saving_an_existing_id_replaces_the_record(memory_store: AnyMemoryStore) -> None:
    await memory_store.save(*ALICE, record())
    newer = record(
        content="Prefers green tea",
        category="technical",
        tier="context",
        keywords=("green", "tea"),
        use_count=4,
        last_used_at=T0 + 5,
        updated_at=T0 + 5,
    )
    await memory_store.save(*ALICE, newer)

    assert await memory_store.records(*ALICE) == [newer]


async def test_records_are_scoped_by_tenant_and_user(memory_store: AnyMemoryStore) -> None:
    mine = [record("a1", "Prefers tea"), record("a2", "Uses vim")]
    for item in mine:
        await memory_store.save(*ALICE, item)
    await memory_store.save(*BOB, record("b1", "Prefers coffee"))
    await memory_store.save(*MALLORY, record("g1", "Prefers water"))

    assert await by_id(memory_store, ALICE) == {r.memory_id: r for r in mine}
    assert list(await by_id(memory_store, BOB)) == ["b1"]
    assert list(await by_id(memory_store, MALLORY)) == ["g1"]


async def test_another_users_record_is_never_changed(memory_store: AnyMemoryStore) -> None:
    original = record()
    await memory_store.save(*ALICE, original)

    await memory_store.save(*MALLORY, record(content="overwritten"))  # same id, other owner
    await memory_store.save(*BOB, record(content="overwritten"))
    await memory_store.mark_used(*MALLORY, ["m1"], T0 + 1)
    await memory_store.delete(*BOB, ["m1"])

    assert await memory_store.records(*ALICE) == [original]
    assert await memory_store.records(*MALLORY) == []
    assert await memory_store.records(*BOB) == []


# -- delete ------------------------------------------------------------------------------------


async def test_delete_removes_only_the_given_ids(memory_store: AnyMemoryStore) -> None:
    for memory_id in ("m1", "m2", "m3"):
        await memory_store.save(*ALICE, record(memory_id, f"fact {memory_id}"))

    await memory_store.delete(*ALICE, ["m1", "m3", "unknown"])
    await memory_store.delete(*ALICE, [])

    assert list(await by_id(memory_store, ALICE)) == ["m2"]


# -- mark_used ---------------------------------------------------------------------------------


async def test_mark_used_counts_and_stamps_only_the_given_ids(
    memory_store: AnyMemoryStore,
) -> None:
    for memory_id in ("m1", "m2"):
        await memory_store.save(*ALICE, record(memory_id, f"fact {memory_id}", use_count=3))

    await memory_store.mark_used(*ALICE, ["m1", "unknown"], T0 + 10)
    await memory_store.mark_used(*ALICE, ["m1"], T0 + 20)
    await memory_store.mark_used(*ALICE, [], T0 + 30)

    found = await by_id(memory_store, ALICE)
    assert (found["m1"].use_count, found["m1"].last_used_at) == (5, T0 + 20)
    assert found["m1"].updated_at == T0  # a use is not an update
    assert found["m2"] == record("m2", "fact m2", use_count=3)


async def test_concurrent_mark_used_from_several_tasks_loses_no_use(
    memory_store: AnyMemoryStore,
) -> None:
    for owner in (ALICE, BOB):
        await memory_store.save(*owner, record("m1" if owner == ALICE else "b1"))
        await memory_store.save(*owner, record("m2" if owner == ALICE else "b2", "Uses vim"))
    tasks = 20

    await asyncio.gather(
        *(memory_store.mark_used(*ALICE, ["m1", "m2"], T0 + i) for i in range(tasks)),
        *(memory_store.mark_used(*BOB, ["b1"], T0 + i) for i in range(tasks)),
    )

    alice, bob = await by_id(memory_store, ALICE), await by_id(memory_store, BOB)
    assert alice["m1"].use_count == alice["m2"].use_count == bob["b1"].use_count == tasks
    assert bob["b2"].use_count == 0
    assert T0 <= alice["m1"].last_used_at < T0 + tasks


async def test_mark_used_from_two_stores_counts_every_use_except_on_ferretdb(
    backend: Backend, memory_store: AnyMemoryStore
) -> None:
    """Two store instances stand for two server processes (two connection pools).

    MongoDB's `$inc` and SQLite's write lock count every use. FerretDB 1.x applies updates
    as read-then-replace, so there concurrent uses can count once, even through one store's
    connection pool: the documented caveat, harmless since use_count only ranks. Its bounds
    are checked instead.
    """
    await memory_store.save(*ALICE, record())
    other = new_memory_store(backend)
    per_store = 15
    try:
        await asyncio.gather(
            *(
                store.mark_used(*ALICE, ["m1"], T0 + 1)
                for store in (memory_store, other)
                for _ in range(per_store)
            )
        )
    finally:
        await other.close()

    [found] = await memory_store.records(*ALICE)
    assert found.last_used_at == T0 + 1
    if backend.name == "mongodb" and await is_ferretdb(backend.settings.mongodb_uri):
        assert 1 <= found.use_count <= 2 * per_store
    else:
        assert found.use_count == 2 * per_store


# -- lifecycle ---------------------------------------------------------------------------------


async def test_records_survive_a_new_store_instance(
    backend: Backend, memory_store: AnyMemoryStore
) -> None:
    await memory_store.save(*ALICE, record())
    await memory_store.close()

    reopened = new_memory_store(backend)
    try:
        await reopened.open()  # a second open: index creation is idempotent
        assert await reopened.records(*ALICE) == [record()]
    finally:
        await reopened.close()


async def test_a_closed_store_raises_storage_error(memory_store: AnyMemoryStore) -> None:
    await memory_store.close()
    with pytest.raises(StorageError, match="closed"):
        await memory_store.records(*ALICE)


async def test_the_store_opens_on_first_use(backend: Backend) -> None:
    unopened = new_memory_store(backend)
    try:
        await unopened.save(*ALICE, record())
        assert await unopened.records(*ALICE) == [record()]
    finally:
        await unopened.close()


# -- the memory tools over each store ---------------------------------------------------------


async def test_memory_tools_save_dedupe_and_retrieve(memory_store: AnyMemoryStore) -> None:
    save, retrieve = build_memory_tools(MemoryConfig(), memory_store, clock=lambda: T0)
    fact = {"content": "Prefers green tea", "category": "preference"}

    results = await asyncio.gather(*(call(save, fact, context(*ALICE)) for _ in range(5)))
    found = await call(retrieve, {"query": "tea"}, context(*ALICE))
    found_again = await call(retrieve, {"query": "tea"}, context(*ALICE))
    others = await call(retrieve, {"query": "tea"}, context(*MALLORY))

    assert sorted(r["status"] for r in results) == ["saved"] + ["updated"] * 4
    assert [m["content"] for m in found["memories"]] == ["Prefers green tea"]
    assert found_again["memories"][0]["use_count"] == 2
    assert others["count"] == 0
    [stored] = await memory_store.records(*ALICE)
    assert stored.use_count == 2


# -- MongoDB only ------------------------------------------------------------------------------


def mongo_settings(uri: str, database: str = "memories", timeout_ms: int = 500) -> StorageSettings:
    return StorageSettings(
        backend="mongodb",
        mongodb_uri=uri,
        mongodb_database=database,
        mongodb_timeout_ms=timeout_ms,
    )


async def test_mongodb_indexes_are_created_once_and_enforced(
    mongodb_uri: str, mongodb_database: str
) -> None:
    store = MongoMemoryStore(mongo_settings(mongodb_uri, mongodb_database, 5000))
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongodb_uri, timeoutMS=5000)
    try:
        await store.open()
        await store.close()
        store = MongoMemoryStore(mongo_settings(mongodb_uri, mongodb_database, 5000))
        await store.open()
        indexes = await client[mongodb_database]["memories"].index_information()
        assert indexes["memory_id_1"].get("unique") is True
        assert indexes["tenant_id_1_user_id_1"]["key"] == [("tenant_id", 1), ("user_id", 1)]
        await store.save(*ALICE, record())
        doc = await client[mongodb_database]["memories"].find_one({"memory_id": "m1"})
        assert doc is not None and (doc["tenant_id"], doc["user_id"]) == ALICE
    finally:
        await store.close()
        await client.close()


async def test_mongodb_store_can_share_a_client_without_closing_it(
    mongodb_uri: str, mongodb_database: str
) -> None:
    shared: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongodb_uri, timeoutMS=5000)
    try:
        store = MongoMemoryStore(mongo_settings(mongodb_uri, mongodb_database), client=shared)
        await store.save(*ALICE, record())
        await store.close()
        assert await shared[mongodb_database]["memories"].count_documents({}) == 1
    finally:
        await shared.close()


async def test_mongodb_malformed_document_is_a_storage_error(
    mongodb_uri: str, mongodb_database: str
) -> None:
    store = MongoMemoryStore(mongo_settings(mongodb_uri, mongodb_database, 5000))
    raw = pymongo.MongoClient[dict[str, Any]](mongodb_uri, serverSelectionTimeoutMS=5000)
    try:
        await store.open()
        raw[mongodb_database]["memories"].insert_one(
            {
                "memory_id": "bad",
                "tenant_id": "acme",
                "user_id": "alice",
                "tier": "forever",
                "category": "preference",
            }
        )
        with pytest.raises(StorageError, match="bad"):
            await store.records(*ALICE)
    finally:
        raw.close()
        await store.close()


async def test_mongodb_unreachable_fails_open_quickly() -> None:
    store = MongoMemoryStore(mongo_settings(f"mongodb://127.0.0.1:{free_port()}", timeout_ms=300))
    try:
        with pytest.raises(StorageError, match="unreachable") as failed:
            await store.open()
    finally:
        await store.close()
        collect_pymongo_monitor_sockets()
    assert gave_up_within(failed.value, 300)


async def test_mongodb_going_down_raises_storage_error_then_recovers(
    ferretdb_bin: Path, tmp_path: Path
) -> None:
    server = FerretDB(ferretdb_bin, tmp_path / "ferretdb")
    await asyncio.to_thread(server.start)
    store = MongoMemoryStore(mongo_settings(server.uri))
    try:
        await store.open()
        await store.save(*ALICE, record())

        await asyncio.to_thread(server.kill)
        for operation in (
            lambda: store.records(*ALICE),
            lambda: store.save(*ALICE, record("m2")),
            lambda: store.mark_used(*ALICE, ["m1"], T0 + 1),
            lambda: store.delete(*ALICE, ["m1"]),
        ):
            with pytest.raises(StorageError) as failed:
                await operation()
            assert gave_up_within(failed.value, 500)

        await asyncio.to_thread(server.start)  # same port, same data
        assert await eventually(lambda: store.records(*ALICE)) == [record()]
        await store.mark_used(*ALICE, ["m1"], T0 + 2)
        assert (await store.records(*ALICE))[0].use_count == 1
    finally:
        await store.close()
        await asyncio.to_thread(server.stop)
        collect_pymongo_monitor_sockets()
