"""AG-UI thread ids, the client's to choose, each caller's own.

A thread id names the caller's session with that id, when she has one (a session made on
`/ws`, or a thread stored before thread ids were scoped); otherwise the session
`thread_session(scope, thread_id)`, an id derived from the caller's tenant, user and the
thread id. Two callers' "x" are two sessions, so nobody can take an id before another uses
it, nor learn that another uses it. The derivation is the same in every process and on every
store. The events a client reads keep its thread id; their `rawEvent.session_id` is the
session's.
"""

from __future__ import annotations

import hashlib

import orjson

from server.storage.base import Scope
from server.stored_sessions import StoredSessions

__all__ = ["session_of_thread", "thread_session"]

PREFIX = "agui-"


def thread_session(scope: Scope, thread_id: str) -> str:
    """The id of the session that holds `thread_id` for this caller, unless she has a session
    named `thread_id` itself: `agui-` and 32 hex digits, unguessable without the thread id."""
    key = orjson.dumps([scope.tenant_id, scope.user_id, thread_id])
    return PREFIX + hashlib.sha256(key).hexdigest()[:32]


async def session_of_thread(stored: StoredSessions, scope: Scope, thread_id: str) -> str:
    """The session id `thread_id` stands for, for this caller (StorageError when the store
    cannot say)."""
    if await stored.get(scope, thread_id) is not None:
        return thread_id
    return thread_session(scope, thread_id)
