"""Message search for SQLiteStore, with SQLite's FTS5 (server/storage/search.py says what).

Two tables of their own, filled by triggers on `messages`, so the store's write path stays
as it is: `search_docs` numbers each searched message (its FTS row id) and finds it again
when the message is deleted; `search_text` is the FTS5 index of their text. A file written
before the index existed is indexed once, when the store opens it (`backfill`).
"""

from __future__ import annotations

import sqlite3

import orjson

from server.storage.base import Scope
from server.storage.search import ANSWER_PHASES, from_markers, searchable

__all__ = ["SCHEMA", "backfill", "search"]

_BODY = "CAST(new.body AS TEXT)"
_SEARCHED = (
    f"(json_extract({_BODY}, '$.role') = 'user' AND json_extract({_BODY}, '$.phase') IS NULL) "
    f"OR (json_extract({_BODY}, '$.role') = 'assistant' "
    f"AND json_extract({_BODY}, '$.phase') IN {ANSWER_PHASES!r})"
)
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS search_docs (
    doc        INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    sequence   INTEGER NOT NULL,
    UNIQUE (session_id, sequence)
);
CREATE VIRTUAL TABLE IF NOT EXISTS search_text USING fts5(
    content, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS search_backfill (done INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS search_message_added AFTER INSERT ON messages
WHEN {_SEARCHED}
BEGIN
    INSERT INTO search_docs (session_id, sequence) VALUES (new.session_id, new.sequence);
    INSERT INTO search_text (rowid, content)
        VALUES (last_insert_rowid(), json_extract({_BODY}, '$.content'));
END;
CREATE TRIGGER IF NOT EXISTS search_message_deleted AFTER DELETE ON messages
BEGIN
    DELETE FROM search_text WHERE rowid IN (
        SELECT doc FROM search_docs WHERE session_id = old.session_id AND sequence = old.sequence
    );
    DELETE FROM search_docs WHERE session_id = old.session_id AND sequence = old.sequence;
END;
"""
_BEGIN, _END = "\x02", "\x03"  # around each match in a snippet; control characters, so
# they cannot be in a message: `sqlite.py` stores message text as JSON, which escapes them


def backfill(conn: sqlite3.Connection) -> None:
    """Index the messages stored before the index existed, once per file."""
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        if conn.execute("SELECT 1 FROM search_backfill").fetchone() is not None:
            return
        rows = conn.execute(
            "SELECT m.session_id, m.sequence, m.body FROM messages m WHERE NOT EXISTS ("
            "SELECT 1 FROM search_docs d "
            "WHERE d.session_id = m.session_id AND d.sequence = m.sequence)"
        )
        for session_id, sequence, body in rows.fetchall():
            message = orjson.loads(body)
            if not searchable(message):
                continue
            doc = conn.execute(
                "INSERT INTO search_docs (session_id, sequence) VALUES (?, ?)",
                (session_id, sequence),
            ).lastrowid
            conn.execute(
                "INSERT INTO search_text (rowid, content) VALUES (?, ?)",
                (doc, str(message.get("content") or "")),
            )
        conn.execute("INSERT INTO search_backfill (done) VALUES (1)")


def search(
    conn: sqlite3.Connection, scope: Scope, query_words: list[str], limit: int
) -> dict[str, tuple[str, tuple[tuple[int, int], ...]]]:
    """The caller's sessions with a message holding every word (the last as a prefix): the
    snippet of each session's best-ranked message, at most `limit` sessions."""
    if not query_words:
        return {}
    match = " ".join(f'"{w}"' for w in query_words) + "*"
    rows = conn.execute(
        "SELECT d.session_id, snippet(search_text, 0, ?, ?, '…', 16) "
        "FROM search_text JOIN search_docs d ON d.doc = search_text.rowid "
        "JOIN sessions s ON s.session_id = d.session_id "
        "WHERE search_text MATCH ? AND s.tenant_id = ? AND s.user_id = ? "
        "ORDER BY rank LIMIT ?",
        (_BEGIN, _END, match, scope.tenant_id, scope.user_id, limit * 20),
    )
    found: dict[str, tuple[str, tuple[tuple[int, int], ...]]] = {}
    for session_id, snippet in rows:
        if session_id not in found:
            found[session_id] = from_markers(snippet, _BEGIN, _END)
            if len(found) == limit:
                break
    return found
