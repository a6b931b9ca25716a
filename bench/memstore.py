"""NullStore: the Store contract kept in memory, for measuring the server without persistence.

Sessions, messages (the model needs the conversation) and `seq` numbering are kept; event
bodies are encoded exactly as a real store encodes them but not retained, so memory stays
flat in long runs. Replays therefore return nothing: only benchmarks use this.

Every method of the Store protocol and of the run tree is written out here, those one
process has no use for (leases, controls, quotas, following other processes) as the answer
of a store nobody else writes: tests/server/test_bench_store.py holds it to both protocols.
A fallback that answered None for any method it lacked had hidden the run tree's absence,
and every turn after a session's first then failed with `internal_error`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import orjson

from agent.messages import Message
from server.storage.base import (
    Control,
    Cursor,
    DeleteOutcome,
    Lease,
    Scope,
    SessionRecord,
    SessionStatus,
    UnfinishedRun,
    WritesInOrder,
    message_from_api,
    message_to_api,
)
from server.storage.runs import RunNode

__all__ = ["NullStore"]


class NullStore(WritesInOrder):
    shared = False  # one process: no run leases

    def __init__(self) -> None:
        self._sessions: dict[str, SessionRecord] = {}
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._runs: dict[str, list[RunNode]] = {}  # per session, in the order runs started

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def create_session(
        self, scope: Scope, session_id: str, now: int, title: str = ""
    ) -> SessionRecord:
        record = SessionRecord(
            session_id, scope.tenant_id, scope.user_id, SessionStatus.IDLE, title, now, now, 0
        )
        self._sessions[session_id] = record
        self._messages[session_id] = []
        return record

    def _get(self, scope: Scope, session_id: str) -> SessionRecord | None:
        record = self._sessions.get(session_id)
        if record is None or (record.tenant_id, record.user_id) != (scope.tenant_id, scope.user_id):
            return None
        return record

    async def get_session(self, scope: Scope, session_id: str) -> SessionRecord | None:
        return self._get(scope, session_id)

    async def list_sessions(self, scope: Scope, limit: int) -> list[SessionRecord]:
        mine = [r for r in self._sessions.values() if self._get(scope, r.session_id)]
        return sorted(mine, key=lambda r: r.updated_at, reverse=True)[:limit]

    async def update_session(
        self,
        scope: Scope,
        session_id: str,
        now: int,
        *,
        status: SessionStatus | None = None,
        title: str | None = None,
        active_run_id: str | None = None,
        pending_input: dict[str, Any] | None = None,
        lease_until: int | None = None,
    ) -> None:
        record = self._get(scope, session_id)
        if record is None:
            return
        changes: dict[str, Any] = {"updated_at": now}
        if status is not None:
            changes.update(status=status, active_run_id=active_run_id, pending_input=pending_input)
        if title is not None:
            changes["title"] = title
        self._sessions[session_id] = replace(record, **changes)

    async def rename_session(self, scope: Scope, session_id: str, title: str) -> bool:
        record = self._get(scope, session_id)
        if record is not None:
            self._sessions[session_id] = replace(record, title=title)
        return record is not None

    async def delete_session(self, scope: Scope, session_id: str, now: int) -> DeleteOutcome:
        record = self._get(scope, session_id)
        if record is None:
            return "not_found"
        if record.status != "idle":
            return "run_in_progress"
        del self._sessions[session_id]
        self._messages.pop(session_id, None)
        self._runs.pop(session_id, None)
        return "deleted"

    async def add_run(
        self, scope: Scope, session_id: str, run_id: str, parent_run_id: str | None, now: int
    ) -> None:
        if self._get(scope, session_id) is not None:
            nodes = self._runs.setdefault(session_id, [])
            nodes.append(RunNode(run_id, parent_run_id, len(nodes), now))

    async def show_run(self, scope: Scope, session_id: str, run_id: str, now: int) -> bool:
        nodes = self._runs.get(session_id, []) if self._get(scope, session_id) else []
        for i, node in enumerate(nodes):
            if node.run_id == run_id:
                nodes[i] = replace(node, shown_at=now)
                return True
        return False

    async def run_nodes(self, scope: Scope, session_id: str) -> list[RunNode]:
        return list(self._runs.get(session_id, [])) if self._get(scope, session_id) else []

    async def append_events(
        self, scope: Scope, session_id: str, frames: Sequence[dict[str, Any]], now: int
    ) -> list[bytes]:
        record = self._get(scope, session_id)
        last = record.last_seq if record is not None else 0
        bodies = []
        for offset, frame in enumerate(frames, start=last + 1):
            frame["seq"] = offset
            bodies.append(orjson.dumps(frame))
        if record is not None:
            self._sessions[session_id] = replace(
                record, last_seq=last + len(frames), updated_at=now
            )
        return bodies

    async def read_events(
        self,
        scope: Scope,
        session_id: str,
        after_seq: int,
        limit: int | None = None,
        *,
        max_bytes: int | None = None,
    ) -> list[bytes]:
        return []

    async def append_messages(
        self, scope: Scope, session_id: str, messages: Sequence[Message], now: int
    ) -> None:
        stored = self._messages.setdefault(session_id, [])
        for message in messages:
            stored.append(message_to_api(message, uuid.uuid4().hex, len(stored), now))

    async def read_messages(
        self,
        scope: Scope,
        session_id: str,
        limit: int,
        since: int | None,
        *,
        max_bytes: int | None = None,  # not applied: the benchmarks read no large messages
    ) -> tuple[list[dict[str, Any]], int]:
        stored = self._messages.get(session_id, []) if self._get(scope, session_id) else []
        if since is not None:
            return [m for m in stored if m["ts"] > since][:limit], len(stored)
        return stored[-limit:], len(stored)

    async def load_history(self, scope: Scope, session_id: str) -> list[Message]:
        if self._get(scope, session_id) is None:
            return []
        return [message_from_api(m) for m in self._messages.get(session_id, [])]

    async def renew_leases(self, leases: Sequence[Lease], lease_until: int) -> set[str]:
        return {lease.session_id for lease in leases}  # one process: nobody takes a run over

    async def claim_run(self, item: UnfinishedRun, now: int, lease_until: int) -> bool:
        return False

    async def unfinished_runs(self, now: int | None = None) -> list[UnfinishedRun]:
        return []

    async def session_owners(self, session_ids: Sequence[str]) -> dict[str, Scope]:
        return {
            r.session_id: Scope(r.tenant_id, r.user_id)
            for r in (self._sessions.get(i) for i in session_ids)
            if r is not None
        }

    async def stored_bytes(self, tenant: str | None = None) -> dict[str, int]:
        return {}  # nothing is kept

    async def tail_events(
        self, cursors: Mapping[str, Cursor], limit: int
    ) -> list[tuple[str, int, bytes]]:
        return []  # no other process writes

    async def notices(self) -> AsyncIterator[None]:
        return  # no other process writes
        yield

    async def send_control(self, scope: Scope, control: Control, now: int) -> bool:
        return False  # one process: a stop reaches its run directly

    async def pending_controls(self, session_ids: Sequence[str]) -> list[Control]:
        return []

    async def drop_controls(self, session_id: str, run_id: str) -> None:
        return None

    async def take_run_slot(
        self, scope: Scope, session_id: str, run_id: str, limit: int, now: int
    ) -> Literal["run_in_progress", "too_many_runs"] | None:
        return None  # the process's own session state admits runs

    async def release_run_slot(self, session_id: str, run_id: str) -> None:
        return None
