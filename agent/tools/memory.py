"""memory_save / memory_retrieve: long-term facts about a user, kept across sessions.

Every memory belongs to one (tenant, user) pair; nothing crosses that boundary. Memories have
a category (profile, preference, technical, project) and a tier that sets how long and how
many are kept (defaults: core never expires, at most 8; important 90 days, 12; context
30 days, 6). A tier's lifetime runs from the memory's last use or update. Saving a fact
already stored updates it instead (its tier never drops). The rules live in
agent/tools/memory_policy.py; a store only keeps records (see MemoryStore).
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from agent.clock import now_ms
from agent.errors import ToolError
from agent.ports import ToolContext
from agent.tools.base import Tool
from agent.tools.config import MemoryConfig
from agent.tools.memory_policy import (
    TIERS,
    Category,
    MemoryRecord,
    Tier,
    evictions,
    find_duplicate,
    is_expired,
    keywords_of,
    rank,
    tokens,
)
from agent.tools.python import make_tool
from agent.tools.secret_scan import find_secret

__all__ = [
    "Category",
    "MemoryRecord",
    "MemoryStore",
    "MemorySaveArgs",
    "MemoryRetrieveArgs",
    "Tier",
    "build_memory_tools",
]


class MemoryStore(Protocol):
    """Where memories are kept. Every method is scoped by tenant and user: a record of
    another pair is never read, changed or deleted. A user holds only a few dozen records
    (tier limits), so `records` returns them all and the policy works in memory.
    Raise agent.errors.StorageError when the backend fails.
    """

    async def records(self, tenant_id: str, user_id: str) -> list[MemoryRecord]:
        """Every record of the user, in any order."""
        ...

    async def save(self, tenant_id: str, user_id: str, record: MemoryRecord) -> None:
        """Insert the record, or replace the user's record with the same memory_id."""
        ...

    async def delete(self, tenant_id: str, user_id: str, memory_ids: Sequence[str]) -> None:
        """Delete the user's records with these ids; unknown ids are ignored."""
        ...

    async def mark_used(
        self, tenant_id: str, user_id: str, memory_ids: Sequence[str], now_ms: int
    ) -> None:
        """Add 1 to use_count and set last_used_at = now_ms for these records, atomically
        where the database allows (FerretDB 1.x may under-count across processes)."""
        ...


class MemorySaveArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(
        min_length=3,
        max_length=4000,
        # No example: small models saved it as a fact ("Prefers answers in French") when
        # asked the time in London, or wrote it into another tool's call.
        description="One self-contained fact the user told you about themselves, in a sentence.",
    )
    category: Category = Field(
        description="profile (who they are), preference (how they like things), technical "
        "(their tools and setup) or project (what they work on)."
    )
    tier: Tier = Field(
        default="context",
        description="core: lasting identity facts (kept forever, at most 8); important: "
        "kept 90 days (at most 12); context: current situation, kept 30 days (at most 6).",
    )
    keywords: list[str] = Field(
        default_factory=list,
        max_length=12,
        description="A few words to find this fact again; default: words of the content.",
    )


class MemoryRetrieveArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        default="",
        max_length=500,
        description="Words describing what to recall; empty: the most important memories.",
    )
    keywords: list[str] = Field(
        default_factory=list, max_length=20, description="Extra words to match."
    )
    categories: list[Category] | None = Field(
        default=None, description="Only memories of these categories."
    )
    limit: int | None = Field(default=None, ge=1, le=50, description="At most this many.")


def build_memory_tools(
    config: MemoryConfig, store: MemoryStore, *, clock: Callable[[], int] = now_ms
) -> list[Tool]:
    """Build memory_save and memory_retrieve over `store`; `clock` gives epoch ms."""
    locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
        weakref.WeakValueDictionary()
    )

    async def live_records(tenant: str, user: str, now: int) -> list[MemoryRecord]:
        """The user's records, after deleting the expired ones."""
        records = await store.records(tenant, user)
        expired = [r.memory_id for r in records if is_expired(r, now, config)]
        if expired:
            await store.delete(tenant, user, expired)
        return [r for r in records if r.memory_id not in expired]

    async def memory_save(args: MemorySaveArgs, context: ToolContext) -> dict[str, Any]:
        content = " ".join(args.content.split())
        if len(content) > config.max_content_chars:
            raise ToolError(
                f"The memory is {len(content)} characters long; keep it under "
                f"{config.max_content_chars}: one short fact per memory."
            )
        kind = find_secret(" ".join([content, *args.keywords]))
        if kind is not None:
            raise ToolError(
                f"Not saved: this looks like it contains {kind}. Secrets (passwords, API "
                "keys, tokens, card numbers) are never stored; save the fact without the "
                "secret value."
            )
        tenant, user = context.tenant_id, context.user_id
        lock = locks.setdefault((tenant, user), asyncio.Lock())
        async with lock:
            now = clock()
            records = await live_records(tenant, user, now)
            same = find_duplicate(records, content)
            keywords = keywords_of(content, args.keywords)
            if same is not None:
                record = replace(
                    same,
                    content=content,
                    category=args.category,
                    tier=max(same.tier, args.tier, key=TIERS[::-1].index),
                    keywords=tuple(dict.fromkeys((*keywords, *same.keywords)))[:12],
                    last_used_at=now,
                    updated_at=now,
                )
                records = [record if r.memory_id == same.memory_id else r for r in records]
            else:
                record = MemoryRecord(
                    uuid.uuid4().hex, content, args.category, args.tier, keywords, 0, now, now, now
                )
                records.append(record)
            await store.save(tenant, user, record)
            doomed = evictions(records, config, keep=record.memory_id)
            if doomed:
                await store.delete(tenant, user, [r.memory_id for r in doomed])
        answer: dict[str, Any] = {
            "status": "updated" if same is not None else "saved",
            "memory": _public(record),
        }
        if doomed:
            answer["evicted"] = [r.content for r in doomed]
        return answer

    async def memory_retrieve(args: MemoryRetrieveArgs, context: ToolContext) -> dict[str, Any]:
        tenant, user = context.tenant_id, context.user_id
        query = tokens(" ".join([args.query, *args.keywords]))
        limit = min(args.limit or config.max_results, config.max_results)
        now = clock()
        records = await live_records(tenant, user, now)
        found = rank(records, query, args.categories, now)[:limit]
        if found:
            await store.mark_used(tenant, user, [r.memory_id for r in found], now)
            found = [replace(r, use_count=r.use_count + 1, last_used_at=now) for r in found]
        return {"memories": [_public(r) for r in found], "count": len(found)}

    return [
        make_tool(
            memory_save,
            description=(
                "Remember one lasting fact about the user for future conversations (a near-"
                "identical memory is updated instead of duplicated). Never save secrets."
            ),
        ),
        make_tool(
            memory_retrieve,
            description=(
                "Recall what you remember about the user: memories matching the query and "
                "categories, most relevant first."
            ),
        ),
    ]


def _public(record: MemoryRecord) -> dict[str, Any]:
    return {
        "id": record.memory_id,
        "content": record.content,
        "category": record.category,
        "tier": record.tier,
        "keywords": list(record.keywords),
        "use_count": record.use_count,
        "created_at": _iso(record.created_at),
        "last_used_at": _iso(record.last_used_at),
    }


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")
