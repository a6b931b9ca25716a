"""Message search for MongoStore (server/storage/search.py says what).

MongoDB: a text index on the messages' text (`message_text`, the searched roles only where the
server takes a partial index), queried with `$text`, best score first; words are matched
whole there, so a query whose last word is still being typed ("lisb") falls back to the scan.
FerretDB 1.x has no text indexes: there every query is the scan, a case-insensitive `$regex`
per word over the caller's own messages, bounded by `SCAN_LIMIT`.
"""

from __future__ import annotations

import re
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure

from server.storage.base import Scope
from server.storage.search import ANSWER_PHASES, excerpt, searchable

__all__ = ["create_text_index", "search"]

Doc = dict[str, Any]
SCAN_LIMIT = 2000  # messages a scan reads at most: a search never reads a whole database
_TEXT_INDEX = "message_text"
_SEARCHED_ROLES = {"body.role": {"$in": ["user", "assistant"]}}


async def create_text_index(db: AsyncDatabase[Doc]) -> bool:
    """Create the text index if the server has text indexes; False when it has none."""
    messages = db["messages"]
    options: Doc = {"name": _TEXT_INDEX, "default_language": "none"}
    try:
        await messages.create_index(
            [("body.content", "text")], partialFilterExpression=_SEARCHED_ROLES, **options
        )
    except OperationFailure:
        try:  # a server without partial text indexes: index every message's text
            await messages.create_index([("body.content", "text")], **options)
        except OperationFailure:
            return False  # FerretDB 1.x: no text indexes
    return True


async def search(
    db: AsyncDatabase[Doc], scope: Scope, query_words: list[str], limit: int, *, indexed: bool
) -> dict[str, tuple[str, tuple[tuple[int, int], ...]]]:
    """The caller's sessions with a searched message holding every word: an excerpt of the
    best (text index) or newest (scan) such message of each, at most `limit` sessions."""
    if not query_words:
        return {}
    owner: Doc = {"tenant_id": scope.tenant_id, "user_id": scope.user_id, **_SEARCHED_ROLES}
    projection = {"_id": 0, "session_id": 1, "body": 1}
    docs: list[Doc] = []
    if indexed:
        phrase = " ".join(f'"{w}"' for w in query_words)  # quoted: every word is needed
        cursor = (
            db["messages"]
            .find(
                {**owner, "$text": {"$search": phrase}},
                {**projection, "score": {"$meta": "textScore"}},
            )
            .sort([("score", {"$meta": "textScore"})])
            .limit(SCAN_LIMIT)
        )
        docs = await cursor.to_list()
    if not docs:
        words = [
            {"body.content": {"$regex": rf"\b{re.escape(w)}", "$options": "i"}} for w in query_words
        ]
        cursor = (
            db["messages"]
            .find(
                {**owner, "body.phase": {"$in": [None, *ANSWER_PHASES]}, "$and": words}, projection
            )
            .sort([("ts", -1)])
            .limit(SCAN_LIMIT)
        )
        docs = await cursor.to_list()
    found: dict[str, tuple[str, tuple[tuple[int, int], ...]]] = {}
    for doc in docs:
        body = doc.get("body") or {}
        session_id = doc["session_id"]
        if session_id in found or not searchable(body):
            continue
        found[session_id] = excerpt(str(body.get("content") or ""), query_words)
        if len(found) == limit:
            break
    return found
