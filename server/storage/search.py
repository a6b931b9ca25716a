"""Finding a user's sessions by what was said in them (`GET /api/sessions?q=`).

Each backend searches with its own text index (SQLite FTS5: sqlite_search.py; MongoDB's text
index, or a scan where the server has none: mongo_search.py) and answers with `SearchHit`s:
the session, and a piece of its best-matching message with the matched words marked, so a
client can highlight them without parsing anything. What is searched: what the user wrote and
the answers (not tool results, not the agent's working notes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from server.storage.base import Scope, SessionRecord

__all__ = [
    "ANSWER_PHASES",
    "MAX_QUERY_CHARS",
    "SearchHit",
    "SessionSearch",
    "excerpt",
    "from_markers",
    "searchable",
    "title_matches",
    "words",
]

MAX_QUERY_CHARS = 200
ANSWER_PHASES = ("final", "chat", "summarize")  # assistant messages that are answers
_WORD = re.compile(r"\w+")
EXCERPT_CHARS = 120  # about what a chat list line shows, with room either side


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A session that matched; `snippet` None when only its title did."""

    session: SessionRecord
    snippet: str | None = None
    highlights: tuple[tuple[int, int], ...] = ()  # [start, end) of each match in `snippet`

    def to_api(self) -> dict[str, Any]:
        match = None
        if self.snippet is not None:
            match = {"text": self.snippet, "highlights": [list(h) for h in self.highlights]}
        return {**self.session.to_api(), "match": match}


@runtime_checkable
class SessionSearch(Protocol):
    async def search_sessions(self, scope: Scope, query: str, limit: int) -> list[SearchHit]:
        """The caller's sessions whose title or searched messages hold every word of
        `query` (the last one as a prefix, for search as you type), newest update first."""
        ...


def words(query: str) -> list[str]:
    """The words of a query, as the indexes split text (letters and digits, any script)."""
    return _WORD.findall(query)


def searchable(body: Mapping[str, Any]) -> bool:
    """Whether a stored message (its API dict) is searched."""
    role, phase = body.get("role"), body.get("phase")
    return (role == "user" and phase is None) or (role == "assistant" and phase in ANSWER_PHASES)


def title_matches(title: str, query_words: list[str]) -> bool:
    folded = title.casefold()
    return all(w.casefold() in folded for w in query_words)


def excerpt(content: str, query_words: list[str]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """A piece of `content` around the first word that matches (a word starting with a
    query word), and where each match in it is. For backends without snippets."""
    pattern = re.compile(
        r"\b(?:" + "|".join(re.escape(w) for w in query_words) + r")\w*", re.IGNORECASE
    )
    flat = " ".join(content.split())
    first = pattern.search(flat)
    start = 0
    if first is not None and first.start() > EXCERPT_CHARS // 3:
        start = first.start() - EXCERPT_CHARS // 3
        space = flat.find(" ", start, first.start())  # begin at a word
        start = space + 1 if space >= 0 else start
    end = min(len(flat), start + EXCERPT_CHARS)
    piece = flat[start:end]
    prefix = "…" if start else ""
    text = prefix + piece + ("…" if end < len(flat) else "")
    marks = tuple((m.start() + len(prefix), m.end() + len(prefix)) for m in pattern.finditer(piece))
    return text, marks


def from_markers(marked: str, begin: str, end: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """Turn a snippet with `begin`…`end` around each match into (text, highlights)."""
    text: list[str] = []
    marks: list[tuple[int, int]] = []
    length, opened = 0, None
    for part in re.split(f"({re.escape(begin)}|{re.escape(end)})", marked):
        if part == begin:
            opened = length
        elif part == end:
            if opened is not None and length > opened:
                marks.append((opened, length))
            opened = None
        else:
            text.append(part)
            length += len(part)
    return "".join(text), tuple(marks)
