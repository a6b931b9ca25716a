"""The storage contract every backend implements (SQLite embedded, MongoDB shared).

It has three parts, each a Protocol of its own, so that a module names the one it needs:
`SessionStore` (sessions and their messages), `EventLog` (each session's events by `seq`) and
`RunCoordination` (run slots, leases, recovery and controls across processes). `Store` is
the three together, opened and closed as one: what a backend implements.

Every read and write is scoped by a tenant and user: a session of another scope does not
exist for the caller. Event `seq` and message `sequence` are allocated by the store, gap-free
and unique per session, also when several processes write (each backend says how).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol, cast

import orjson

from agent.errors import StorageError
from agent.messages import Message, ToolCall

__all__ = [
    "EVENTS_PAGE",
    "EVENTS_PAGE_BYTES",
    "Control",
    "ControlKind",
    "Cursor",
    "EventLog",
    "DeleteOutcome",
    "Lease",
    "PartlyStored",
    "RunCoordination",
    "RunTakenOver",
    "Scope",
    "SessionRecord",
    "SessionStore",
    "SessionStatus",
    "StatusChange",
    "Store",
    "UnfinishedRun",
    "WritesInOrder",
    "events_in_pages",
    "message_from_api",
    "message_to_api",
]


class SessionStatus(StrEnum):
    """Where a session's run is (docs/wire-protocol.md). A `str`: each member is its value,
    the same string on the wire, in JSON and in both stores. Its allowed moves are
    `server.live.MOVES`."""

    IDLE = "idle"
    RUNNING = "running"
    AWAITING_INPUT = "awaiting_input"
    AWAITING_APPROVAL = "awaiting_approval"

    @property
    def waiting(self) -> bool:
        """Does a question or approval wait for the user?"""
        return self in (SessionStatus.AWAITING_INPUT, SessionStatus.AWAITING_APPROVAL)


DeleteOutcome = Literal["deleted", "not_found", "run_in_progress"]
ControlKind = Literal["stop", "answer", "decision"]
EVENTS_PAGE = 500  # events read at a time by `events_in_pages`…
EVENTS_PAGE_BYTES = 4 << 20  # …or fewer, once past this many bytes
SLOT_GRACE_MS = 10_000  # a run slot this young is never taken for a leftover


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose data: every query filters on both."""

    tenant_id: str
    user_id: str


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a follower of a session is: its owner, and the last `seq` it has."""

    scope: Scope
    after_seq: int


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    tenant_id: str
    user_id: str
    status: SessionStatus
    title: str
    created_at: int
    updated_at: int
    last_seq: int
    active_run_id: str | None = None
    pending_input: dict[str, Any] | None = None

    def to_api(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "title": self.title,
        }


@dataclass(frozen=True, slots=True)
class UnfinishedRun:
    """A run the store still shows as active: its process died before it ended."""

    scope: Scope
    session_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A session's new status, with the fields `update_session` always writes with one."""

    status: SessionStatus
    active_run_id: str | None = None
    pending_input: dict[str, Any] | None = None
    lease_until: int | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A run this process holds, for `Store.renew_leases`. `given` is the latest lease this
    process has given it (written, or being written with a status change): a lease past
    that is another process's, which claimed the run once this one's ran out."""

    session_id: str
    run_id: str
    given: int


class RunTakenOver(StorageError):
    """The run's lease ran out (its process was paused or cut off from the store) and another
    process claimed or closed it: this process must write nothing more for it."""


class PartlyStored(StorageError):
    """A batch failed after its events were stored (a store that writes its parts one after
    another): `bodies` are those events, still to be delivered."""

    def __init__(self, bodies: list[bytes], cause: StorageError) -> None:
        super().__init__(str(cause))
        self.bodies = bodies


@dataclass(frozen=True, slots=True)
class Control:
    """A stop, answer or approval decision for a run, left in the store for the process that
    runs it. `key` is unique per session: storing a second control with the same key fails,
    which is how exactly one of two concurrent answers to a question is accepted."""

    session_id: str
    run_id: str
    key: str
    kind: ControlKind
    payload: dict[str, Any]


class SessionStore(Protocol):
    """Sessions and their conversations: the records the session list shows, the messages a
    run reads and the HTTP API pages, and what each tenant keeps."""

    async def create_session(
        self, scope: Scope, session_id: str, now: int, title: str = ""
    ) -> SessionRecord:
        """Store a new idle session; `title` saves a later write on a session's first run."""
        ...

    async def get_session(self, scope: Scope, session_id: str) -> SessionRecord | None: ...

    async def list_sessions(self, scope: Scope, limit: int) -> list[SessionRecord]:
        """Newest `updated_at` first."""
        ...

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
        """Set the given fields. `pending_input`, `active_run_id` and `lease_until` are always
        written (None clears them) whenever `status` is given."""
        ...

    async def rename_session(self, scope: Scope, session_id: str, title: str) -> bool:
        """Set the title (its place in the list, `updated_at`, stays); False if no such
        session in the caller's scope."""
        ...

    async def delete_session(self, scope: Scope, session_id: str, now: int) -> DeleteOutcome:
        """Delete an idle session with its events and messages. "not_found": no such session
        in the caller's scope (nothing of another scope is touched). "run_in_progress": its
        status is not idle, or its run slot was taken less than `SLOT_GRACE_MS` ago (a run
        starting in another process); nothing is deleted. A run cannot take the slot while
        the delete holds it, so no run writes into a session being deleted."""
        ...

    async def session_owners(self, session_ids: Sequence[str]) -> dict[str, Scope]:
        """The owner of each of these sessions that is stored, whoever it is: another process
        may have deleted one, someone else may have made a new one with its id, and a
        client-chosen id (AG-UI's thread ids) may already be another's. Callers compare; the
        owners are never shown."""
        ...

    async def stored_bytes(self, tenant: str | None = None) -> dict[str, int]:
        """Bytes of stored events and messages per tenant: one tenant's, or (None) every
        tenant's; a tenant with nothing stored may be left out. Cheap: read from counts kept
        per session, never by reading the events. On a shared store a run's latest writes
        may be counted only by its next status change (MongoDB)."""
        ...

    async def append_messages(
        self, scope: Scope, session_id: str, messages: Sequence[Message], now: int
    ) -> None: ...

    async def read_messages(
        self,
        scope: Scope,
        session_id: str,
        limit: int,
        since: int | None,
        *,
        max_bytes: int | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """(API message dicts oldest first, total count of the session's messages).

        With `since`: the first `limit` messages with ts > since; else the last `limit`. With
        `max_bytes`, fewer when they are large: the first (or, without `since`, the last) up
        to the one that brings their stored bodies past that many bytes.
        """
        ...

    async def load_history(self, scope: Scope, session_id: str) -> list[Message]:
        """Every message of the session, in order, for the model."""
        ...


class EventLog(Protocol):
    """Each session's events, numbered by `seq`, stored exactly as they were sent: what a
    client replays, and what a follower in another process reads."""

    async def append_events(
        self, scope: Scope, session_id: str, frames: Sequence[dict[str, Any]], now: int
    ) -> list[bytes]:
        """Give each frame the session's next `seq`, store it, return the JSON sent for it.

        Each frame dict has a "seq" key whose value is replaced.
        """
        ...

    async def store_batch(
        self,
        scope: Scope,
        session_id: str,
        now: int,
        *,
        frames: Sequence[dict[str, Any]] = (),
        messages: Sequence[Message] = (),
        status: StatusChange | None = None,
    ) -> list[bytes]:
        """A session's writes of one batch: its events (as `append_events`, whose result this
        is), its messages, then its status change (as `update_session` with `status`). All
        or nothing where the backend can (SQLite: one transaction); otherwise in that order
        (`WritesInOrder`), and a failure once the events are stored raises `PartlyStored`."""
        ...

    async def read_events(
        self,
        scope: Scope,
        session_id: str,
        after_seq: int,
        limit: int | None = None,
        *,
        max_bytes: int | None = None,
    ) -> list[bytes]:
        """Stored frames with seq > after_seq, ascending, exactly as they were sent. With
        `max_bytes`, the page ends with the frame that brings it past that many bytes."""
        ...

    async def tail_events(
        self, cursors: Mapping[str, Cursor], limit: int
    ) -> list[tuple[str, int, bytes]]:
        """(session_id, seq, stored frame) of every event with seq > its session's cursor,
        ordered by session then seq, at most `limit` in all (a session cut short continues
        from its last row next time). Only a session stored for the cursor's scope has rows:
        one deleted and made again under its id by someone else has none."""
        ...

    def notices(self) -> AsyncIterator[None]:
        """Yield (nothing) each time any process stores events or controls, where the backend
        pushes such news (MongoDB change streams); end at once where it cannot (SQLite).
        Raise StorageError when the backend refuses (FerretDB has no change streams). A
        notice is only a wake-up: readers still read by `seq`, so a lost one costs delay."""
        ...


class RunCoordination(Protocol):
    """What lets several processes share runs: slots (one run per session, a limit per
    tenant), leases and recovery of runs whose process died, and the controls (stop, answer,
    decision) left for the process that runs one."""

    shared: bool
    """True when several server processes may use the store at once (MongoDB): active runs
    then carry a lease their process renews, and only expired leases are recovered."""

    async def renew_leases(self, leases: Sequence[Lease], lease_until: int) -> set[str]:
        """Move each run's lease on to `lease_until` where its session still shows that run
        with a lease this process gave it (at most `given`); return the ids of the sessions
        renewed. One left out was taken over (`RunTakenOver`)."""
        ...

    async def claim_run(self, item: UnfinishedRun, now: int, lease_until: int) -> bool:
        """Take over an unfinished run whose lease expired; False if another process did."""
        ...

    async def unfinished_runs(self, now: int | None = None) -> list[UnfinishedRun]:
        """Sessions left running or awaiting input (across all tenants), for recovery; with
        `now`, only those whose lease expired before it."""
        ...

    async def send_control(self, scope: Scope, control: Control, now: int) -> bool:
        """Store a control for the run's process; False when the session already has one with
        this key (another process won the claim). Atomic on every backend."""
        ...

    async def pending_controls(self, session_ids: Sequence[str]) -> list[Control]:
        """The controls stored for these sessions, oldest first."""
        ...

    async def drop_controls(self, session_id: str, run_id: str) -> None:
        """Forget the controls of a run that ended."""
        ...

    async def take_run_slot(
        self, scope: Scope, session_id: str, run_id: str, limit: int, now: int
    ) -> Literal["run_in_progress", "too_many_runs"] | None:
        """Take the session's run slot and one of the tenant's `limit` slots for `run_id`,
        atomically across processes; None when taken, else why not (nothing is kept). Slots
        older than `SLOT_GRACE_MS` whose run the store no longer shows active are freed."""
        ...

    async def release_run_slot(self, session_id: str, run_id: str) -> None:
        """Free the slots `take_run_slot` took for this run."""
        ...


class Store(SessionStore, EventLog, RunCoordination, Protocol):
    """A backend: all three parts over one database (a batch writes events, messages and a
    status change together), opened and closed as one."""

    async def open(self) -> None:
        """Connect and create the schema or indexes (idempotent)."""
        ...

    async def close(self) -> None: ...


class WritesInOrder:
    """`Store.store_batch` for a backend without transactions over several collections
    (MongoDB): the events and messages at once, then the status change, so that it never
    claims what was not stored. A failure once the events are stored raises `PartlyStored`."""

    async def store_batch(
        self,
        scope: Scope,
        session_id: str,
        now: int,
        *,
        frames: Sequence[dict[str, Any]] = (),
        messages: Sequence[Message] = (),
        status: StatusChange | None = None,
    ) -> list[bytes]:
        store = cast(Store, self)
        bodies: list[bytes] = []
        try:
            if frames and messages:
                stored, saved = await asyncio.gather(
                    store.append_events(scope, session_id, frames, now),
                    store.append_messages(scope, session_id, messages, now),
                    return_exceptions=True,
                )
                if isinstance(stored, BaseException):
                    raise stored
                bodies = stored
                if isinstance(saved, BaseException):
                    raise saved
            elif frames:
                bodies = await store.append_events(scope, session_id, frames, now)
            elif messages:
                await store.append_messages(scope, session_id, messages, now)
            if status is not None:
                await store.update_session(
                    scope,
                    session_id,
                    now,
                    status=status.status,
                    active_run_id=status.active_run_id,
                    pending_input=status.pending_input,
                    lease_until=status.lease_until,
                )
        except StorageError as exc:
            if bodies:
                raise PartlyStored(bodies, exc) from exc
            raise
        return bodies


_OPTIONAL_FIELDS = ("run_id", "tool_call_id", "tool_name", "status", "error", "phase")


async def events_in_pages(
    store: EventLog,
    scope: Scope,
    session_id: str,
    after_seq: int,
    *,
    events: int = EVENTS_PAGE,
    max_bytes: int = EVENTS_PAGE_BYTES,
) -> AsyncIterator[tuple[list[bytes], int]]:
    """A session's stored events after `after_seq`, a page at a time with the `seq` of its
    last event: pages of `events`, or fewer once past `max_bytes`, so that a long session (or
    one of large tool results) is never held whole in memory."""
    while True:
        page = await store.read_events(scope, session_id, after_seq, events, max_bytes=max_bytes)
        if page:
            after_seq = int(orjson.loads(page[-1])["seq"])
            yield page, after_seq
        if len(page) < events and sum(map(len, page)) <= max_bytes:
            return  # neither bound ended the page: nothing more is stored


def message_to_api(message: Message, message_id: str, sequence: int, ts: int) -> dict[str, Any]:
    """The HTTP API shape of a stored message (also what backends store as its body)."""
    out: dict[str, Any] = {
        "message_id": message_id,
        "role": message.role,
        "content": message.content,
        "sequence": sequence,
        "ts": ts,
    }
    for name in _OPTIONAL_FIELDS:
        value = getattr(message, name)
        if value is not None:
            out[name] = value
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    return out


def message_from_api(body: dict[str, Any]) -> Message:
    """Inverse of `message_to_api`. Spelled out field by field: a run reads its session's
    whole conversation with it, thousands of messages in a long session."""
    get = body.get
    calls = get("tool_calls")
    return Message(
        role=body["role"],
        content=body["content"],
        tool_calls=tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in calls)
        if calls
        else (),
        tool_call_id=get("tool_call_id"),
        tool_name=get("tool_name"),
        phase=get("phase"),
        status=get("status"),
        error=get("error"),
        run_id=get("run_id"),
    )
