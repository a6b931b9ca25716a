"""memory_save / memory_retrieve over the real SQLite store, with an injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.errors import ModelBehaviorError, StorageError, ToolError
from agent.ports import ToolContext
from agent.tools.base import Tool
from agent.tools.config import MemoryConfig
from agent.tools.memory import build_memory_tools
from agent.tools.memory_policy import MemoryRecord
from server.storage.memory_sqlite import SQLiteMemoryStore
from server.storage.sqlite import SQLiteStore
from tests.agent.tools.conftest import call, context

DAY = 86_400_000
T0 = 1_750_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


class Memory:
    """The two tools over one store, as one user (or another, via `ctx`)."""

    def __init__(self, store: SQLiteMemoryStore, clock: Clock, **config: Any) -> None:
        self.store = store
        self.clock = clock
        self.save_tool, self.retrieve_tool = build_memory_tools(
            MemoryConfig(**config), store, clock=clock
        )

    async def save(self, content: str, ctx: ToolContext | None = None, **args: Any) -> Any:
        args.setdefault("category", "preference")
        return await call(self.save_tool, {"content": content, **args}, ctx)

    async def retrieve(self, ctx: ToolContext | None = None, **args: Any) -> list[str]:
        result = await self.recall(ctx, **args)
        return [m["content"] for m in result["memories"]]

    async def recall(self, ctx: ToolContext | None = None, **args: Any) -> Any:
        return await call(self.retrieve_tool, args, ctx)

    async def contents(self, tenant: str = "acme", user: str = "alice") -> set[str]:
        return {r.content for r in await self.store.records(tenant, user)}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteMemoryStore]:
    memory_store = SQLiteMemoryStore(tmp_path / "agent.db")
    await memory_store.open()
    yield memory_store
    await memory_store.close()


@pytest.fixture
def memory(store: SQLiteMemoryStore) -> Memory:
    return Memory(store, Clock())


async def test_save_then_retrieve(memory: Memory) -> None:
    saved = await memory.save("Prefers answers in French", tier="core", keywords=["Language"])
    assert saved["status"] == "saved"
    fact = saved["memory"]
    assert fact["content"] == "Prefers answers in French" and fact["category"] == "preference"
    assert fact["tier"] == "core" and fact["keywords"] == ["language"]
    assert fact["use_count"] == 0 and fact["created_at"] == "2025-06-15T15:06:40+00:00"
    found = (await memory.recall(query="which language?"))["memories"]
    assert [m["id"] for m in found] == [fact["id"]] and found[0]["use_count"] == 1


async def test_keywords_default_to_the_content_words(memory: Memory) -> None:
    saved = await memory.save("Works on the billing service in Go", category="project")
    assert saved["memory"]["keywords"] == ["billing", "go", "service", "work"]


async def test_same_or_near_same_content_updates_instead_of_inserting(memory: Memory) -> None:
    first = await memory.save("User prefers dark mode.", keywords=["theme"])
    memory.clock.now += DAY
    again = await memory.save("the user prefers DARK mode", tier="core", category="technical")
    near = await memory.save("User prefers dark mode!!")
    assert again["status"] == near["status"] == "updated"
    assert again["memory"]["id"] == near["memory"]["id"] == first["memory"]["id"]
    (record,) = await memory.store.records("acme", "alice")
    # The category of the last save wins; the tier never drops (core was asked once).
    assert record.tier == "core" and record.category == "preference"
    assert "theme" in record.keywords and record.created_at == T0


async def test_different_facts_are_kept_apart(memory: Memory) -> None:
    await memory.save("Prefers Python for scripts", category="technical")
    second = await memory.save("Prefers Rust for services", category="technical")
    assert second["status"] == "saved" and len(await memory.contents()) == 2


async def test_tier_limit_evicts_the_least_used_then_oldest(memory: Memory) -> None:
    for i in range(8):
        memory.clock.now += 1000
        await memory.save(f"core fact number {i} about topic{i}", tier="core")
    await memory.recall(query="topic0")  # used once: survives
    saved = await memory.save("core fact number 8 about topic8", tier="core")
    assert saved["evicted"] == ["core fact number 1 about topic1"]
    contents = await memory.contents()
    assert len(contents) == 8 and "core fact number 8 about topic8" in contents


async def test_each_tier_has_its_own_limit(memory: Memory) -> None:
    for i in range(7):
        await memory.save(f"context fact {i} subject{i}", tier="context")
    await memory.save("an important fact about subjectx", tier="important")
    records = await memory.store.records("acme", "alice")
    tiers = sorted(r.tier for r in records)
    assert tiers == ["context"] * 6 + ["important"]


async def test_expiry_by_tier(memory: Memory) -> None:
    await memory.save("Is debugging an outage right now", tier="context")
    await memory.save("Plans to migrate to Postgres", tier="important", category="project")
    await memory.save("Name is Alice", tier="core", category="profile")

    async def remaining_after(days: int) -> set[str]:
        memory.clock.now = T0 + days * DAY
        # Expiry is applied whenever memories are read; this read matches (and bumps) nothing.
        assert await memory.retrieve(categories=["technical"]) == []
        return await memory.contents()

    assert len(await remaining_after(29)) == 3
    assert await remaining_after(31) == {"Plans to migrate to Postgres", "Name is Alice"}
    assert await remaining_after(89) == {"Plans to migrate to Postgres", "Name is Alice"}
    assert await remaining_after(91) == {"Name is Alice"}
    assert await remaining_after(3650) == {"Name is Alice"}


async def test_use_postpones_expiry(memory: Memory) -> None:
    await memory.save("Is on call this week", tier="context")
    memory.clock.now = T0 + 20 * DAY
    assert await memory.retrieve(query="on call") == ["Is on call this week"]
    memory.clock.now = T0 + 45 * DAY
    assert await memory.retrieve(query="call") == ["Is on call this week"]


async def test_ranking_overlap_then_tier_then_recency(memory: Memory) -> None:
    await memory.save("Uses vim with a solarized theme", tier="context", category="technical")
    await memory.save("Deploys with Kubernetes", tier="core", category="technical")
    await memory.save("Writes Python with vim keybindings in vscode", tier="important")
    memory.clock.now += DAY
    await memory.save("Likes vim", tier="context", keywords=["vim", "editor"])
    ranked = await memory.retrieve(query="vim editor")
    # "Likes vim": two keyword hits; then by tier among single hits; Kubernetes not matched.
    assert ranked == [
        "Likes vim",
        "Writes Python with vim keybindings in vscode",
        "Uses vim with a solarized theme",
    ]
    everything = await memory.retrieve()
    assert everything[0] == "Deploys with Kubernetes"  # no query: core first


async def test_use_count_breaks_ties_and_is_bumped(memory: Memory) -> None:
    await memory.save("Runs Linux at home", tier="context", category="technical")
    await memory.save("Runs macOS at work", tier="context", category="technical")
    for _ in range(5):
        await memory.retrieve(query="macos")
    memory.clock.now += 1
    result = await memory.recall(query="runs")
    assert [m["content"] for m in result["memories"]] == [
        "Runs macOS at work",
        "Runs Linux at home",
    ]
    assert [m["use_count"] for m in result["memories"]] == [6, 1]


async def test_categories_and_limit(memory: Memory) -> None:
    await memory.save("Name is Alice", category="profile", tier="core")
    await memory.save("Prefers short answers")
    await memory.save("Building a chat app", category="project")
    assert await memory.retrieve(categories=["profile", "project"], limit=5) == [
        "Name is Alice",
        "Building a chat app",
    ]
    assert len(await memory.retrieve(limit=1)) == 1
    with pytest.raises(ModelBehaviorError):
        await memory.recall(categories=["secrets"])


async def test_memories_are_scoped_by_tenant_and_user(memory: Memory) -> None:
    bob, other_alice = context(user="bob"), context(tenant="other", user="alice")
    await memory.save("Prefers tea", keywords=["drink"])
    await memory.save("Prefers coffee", bob, keywords=["drink"])
    assert await memory.retrieve(query="drink") == ["Prefers tea"]
    assert await memory.retrieve(bob, query="drink") == ["Prefers coffee"]
    assert await memory.retrieve(other_alice, query="drink") == []
    saved = await memory.save("Prefers tea", other_alice)
    assert saved["status"] == "saved"  # no dedupe across users either


async def test_store_never_touches_another_users_record(store: SQLiteMemoryStore) -> None:
    record = MemoryRecord("m1", "Prefers tea", "preference", "core", ("tea",), 0, T0, T0, T0)
    await store.save("acme", "alice", record)
    await store.save("acme", "mallory", record.__class__(**{**_fields(record), "content": "x"}))
    await store.mark_used("acme", "mallory", ["m1"], T0 + 1)
    await store.delete("acme", "mallory", ["m1"])
    assert await store.records("acme", "alice") == [record]
    assert await store.records("acme", "mallory") == []


def _fields(record: MemoryRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__}


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        ("My OpenAI key is sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv", "API key"),
        ("AWS access key AKIAIOSFODNN7EXAMPLE for prod", "AWS access key"),
        ("GitHub token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "GitHub token"),
        ("my password is hunter2", "a password"),
        ("wifi passphrase: correct-horse-battery", "a password"),
        ("deploy token: 9f8e7d6c5b4a", "API key or token"),
        ("the signing secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "random-looking"),
        ("Pays with card 4111 1111 1111 1111", "payment card"),
        ("card 5555-5555-5555-4444 expires soon", "payment card"),
        ("db at postgres://admin:s3cret@db.internal/app", "credentials in a URL"),
        ("-----BEGIN RSA PRIVATE KEY----- MIIE", "private key"),
    ],
)
async def test_secrets_are_refused_and_not_echoed(memory: Memory, content: str, kind: str) -> None:
    with pytest.raises(ToolError, match=kind) as caught:
        await memory.save(content)
    assert "never stored" in str(caught.value)
    secret_part = content.split()[-1]
    assert secret_part not in str(caught.value)
    assert await memory.contents() == set()


async def test_secrets_in_keywords_are_refused(memory: Memory) -> None:
    with pytest.raises(ToolError, match="API key"):
        await memory.save("Uses OpenAI", keywords=["sk-live-abcdefghijklmnopqrstuv"])


@pytest.mark.parametrize(
    "content",
    [
        "Uses 1Password as their password manager",
        "Pinned the project to commit 3f2a9c1e5b7d4f6a8c0e2b4d6f8a0c2e4b6d8f0a",
        "Tenant id is 123e4567-e89b-12d3-a456-426614174000",
        "Phone prefix +33 6 12 34 56 78",
        "Order number 1234567890123 was late",
        "Maintains AbstractSingletonProxyFactoryBean",
        "Keeps the secret of a good espresso to themselves",
    ],
)
async def test_ordinary_facts_are_not_mistaken_for_secrets(memory: Memory, content: str) -> None:
    assert (await memory.save(content, category="technical"))["status"] == "saved"


async def test_overlong_content_is_refused(memory: Memory) -> None:
    with pytest.raises(ToolError, match="under 500"):
        await memory.save("word " * 150)


async def test_concurrent_saves_of_one_fact_keep_one_record(memory: Memory) -> None:
    results = await asyncio.gather(*(memory.save("Prefers green tea") for _ in range(5)))
    assert sorted(r["status"] for r in results) == ["saved"] + ["updated"] * 4
    assert len(await memory.store.records("acme", "alice")) == 1


async def test_memories_survive_a_restart_and_share_the_store_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    conversations = SQLiteStore(path)
    await conversations.open()
    first = SQLiteMemoryStore(path)
    await Memory(first, Clock()).save("Prefers metric units", tier="core")
    await first.close()
    second = SQLiteMemoryStore(path)
    try:
        assert await Memory(second, Clock()).retrieve(query="units") == ["Prefers metric units"]
    finally:
        await second.close()
        await conversations.close()


async def test_closed_store_is_a_storage_error(tmp_path: Path) -> None:
    closed = SQLiteMemoryStore(tmp_path / "m.db")
    await closed.close()
    with pytest.raises(StorageError, match="closed"):
        await closed.records("acme", "alice")


async def test_unopenable_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    broken = SQLiteMemoryStore(tmp_path / "dir.db")
    try:
        with pytest.raises(StorageError, match="cannot open"):
            await broken.open()
    finally:
        await broken.close()


def test_tools_are_named_as_configured(store: SQLiteMemoryStore) -> None:
    tools: list[Tool] = build_memory_tools(MemoryConfig(), store)
    assert [t.name for t in tools] == ["memory_save", "memory_retrieve"]
