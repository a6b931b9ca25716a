"""The rules of long-term memory, as pure functions: dedupe, expiry, eviction, ranking.

Kept apart from any store so every backend (SQLite, MongoDB) behaves the same,
and so the rules can be tested without I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from agent.tools.config import MemoryConfig

__all__ = [
    "CATEGORIES",
    "TIERS",
    "Category",
    "MemoryRecord",
    "Tier",
    "evictions",
    "find_duplicate",
    "is_expired",
    "keywords_of",
    "rank",
    "tokens",
]

Category = Literal["profile", "preference", "technical", "project"]
Tier = Literal["core", "important", "context"]
CATEGORIES: tuple[Category, ...] = ("profile", "preference", "technical", "project")
TIERS: tuple[Tier, ...] = ("core", "important", "context")
DAY_MS = 86_400_000
DUPLICATE_OVERLAP = 0.8  # Jaccard similarity of content tokens at which two facts are one
_TIER_WEIGHT = {"core": 2, "important": 1, "context": 0}
_STOPWORDS = frozenset(
    "a an and are as at be been but by for from has have he her his i in is it its me my "
    "of on or our she so that the their them they this to was we were with you your user "
    "users likes like".split()
)
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One remembered fact about a user. Times are Unix epoch milliseconds."""

    memory_id: str
    content: str
    category: Category
    tier: Tier
    keywords: tuple[str, ...]
    use_count: int
    last_used_at: int
    created_at: int
    updated_at: int


def tokens(text: str) -> set[str]:
    """Lower-case content words, crudely singularized ("prefers" ~ "prefer")."""
    found = set()
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS or len(word) < 2:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        found.add(word)
    return found


def keywords_of(content: str, given: Iterable[str], limit: int = 12) -> tuple[str, ...]:
    """The given keywords (normalized), else the content's own words, at most `limit`."""
    chosen = [w for k in given for w in sorted(tokens(k))] or sorted(tokens(content))
    return tuple(dict.fromkeys(chosen))[:limit]


def find_duplicate(records: Sequence[MemoryRecord], content: str) -> MemoryRecord | None:
    """The stored record saying the same thing (same normalized text or near-same words)."""
    normalized = " ".join(_WORD.findall(content.lower()))
    words = tokens(content)
    best: tuple[float, MemoryRecord] | None = None
    for record in records:
        if " ".join(_WORD.findall(record.content.lower())) == normalized:
            return record
        other = tokens(record.content)
        if not words or not other:
            continue
        similarity = len(words & other) / len(words | other)
        if similarity >= DUPLICATE_OVERLAP and (best is None or similarity > best[0]):
            best = (similarity, record)
    return best[1] if best else None


def is_expired(record: MemoryRecord, now_ms: int, config: MemoryConfig) -> bool:
    """core never expires; the others expire after their TTL without being used or saved."""
    days = {"core": None, "important": config.important_ttl_days}.get(
        record.tier, config.context_ttl_days
    )
    if days is None:
        return False
    return now_ms - max(record.last_used_at, record.updated_at) > days * DAY_MS


def tier_limit(tier: Tier, config: MemoryConfig) -> int:
    return {"core": config.core_max, "important": config.important_max}.get(
        tier, config.context_max
    )


def evictions(
    records: Sequence[MemoryRecord], config: MemoryConfig, keep: str
) -> list[MemoryRecord]:
    """Records over their tier's limit: least used first, then least recently used, oldest.

    `keep` (the record just saved) is never chosen.
    """
    doomed: list[MemoryRecord] = []
    for tier in TIERS:
        in_tier = [r for r in records if r.tier == tier]
        excess = len(in_tier) - tier_limit(tier, config)
        if excess <= 0:
            continue
        candidates = sorted(
            (r for r in in_tier if r.memory_id != keep),
            key=lambda r: (r.use_count, r.last_used_at, r.created_at),
        )
        doomed.extend(candidates[:excess])
    return doomed


def rank(
    records: Sequence[MemoryRecord],
    query: set[str],
    categories: Sequence[Category] | None,
    now_ms: int,
) -> list[MemoryRecord]:
    """Filter by category (and, with a query, by at least one shared word), best first.

    Score = 10 x word overlap (a keyword counts double) + 3 x tier (core 2, important 1,
    context 0) + 1.5 x recency (half-life 30 days) + usage (log scale, saturating at 20).
    Overlap dominates; tier outweighs recency and usage together.
    """
    scored: list[tuple[float, int, MemoryRecord]] = []
    for record in records:
        if categories and record.category not in categories:
            continue
        keywords = set(record.keywords)
        overlap = 2 * len(query & keywords) + len(query & (tokens(record.content) - keywords))
        if query and not overlap:
            continue
        age_days = max(0, now_ms - record.last_used_at) / DAY_MS
        recency = 0.5 ** (age_days / 30)
        usage = min(1.0, math.log1p(record.use_count) / math.log1p(20))
        score = 10 * overlap + 3 * _TIER_WEIGHT[record.tier] + 1.5 * recency + usage
        scored.append((score, record.last_used_at, record))
    scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [record for _, _, record in scored]
