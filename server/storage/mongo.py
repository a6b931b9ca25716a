"""MongoStore: the shared backend, for several server processes over one MongoDB database.

Driven by pymongo's native asyncio client (`AsyncMongoClient`), not motor: no thread pool,
and since 4.13.2 connecting no longer blocks the event loop.

Collections, every document carrying `tenant_id` and `user_id` so each query filters on both:

    sessions  one per session: status, title, timestamps, active run, pending question,
              `bytes` (its events' and messages' bodies, for `stored_bytes`)
    events    one per event: `seq`, `run_id`, `ts` and `body`, the exact JSON bytes sent
    messages  one per conversation message: `sequence`, `ts` and `body`, its API dict
    controls  one per stop, answer or approval sent to a run another process may own
    runs      one per run: its parent and when it was last shown (server/storage/runs.py)

Numbering (event `seq`, message `sequence`) is decided by the unique `(session_id, seq)` and
`(session_id, sequence)` indexes, not by a counter: a writer reads the session's highest
number and inserts from the next one; if another process took a number first, the insert
stops there and the writer continues after the new highest. A number is only ever taken by
an inserted document, so numbering stays unique and gap-free across processes and crashes.
It needs no transactions and no atomic read-modify-write, which matters because FerretDB 1.x
applies every update (`$inc` included) as read-then-replace: a `$inc` counter there hands two
processes the same numbers. `last_seq` and the message total are therefore read from the
indexes too, never cached on the session document.

A session's `bytes` is a count, not a number anything depends on: the bytes this process
stored for it are added (`$inc`) with its next session write (`_touch`, a status change),
which a run makes at least at its end, so counting costs no round trip of its own. A process
that dies loses what it had not added yet, and on FerretDB a write of the session by another
process at the same moment can undo an addition: a quota read from it may be a little low.

Every driver failure surfaces as `StorageError`, and `mongodb_timeout_ms` bounds each
operation (server selection, connect, socket and the whole operation), so an unreachable
database fails fast instead of hanging a run.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Literal, TypeVar

import orjson
import pymongo
from bson import Binary, ObjectId
from bson.errors import BSONError
from pymongo import ASCENDING, DESCENDING, AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, ConnectionFailure, DuplicateKeyError, PyMongoError

from agent.errors import StorageError
from agent.messages import Message
from server.settings import StorageSettings
from server.storage import mongo_search
from server.storage.base import (
    SLOT_GRACE_MS,
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
from server.storage.outage import Outage, StoreUnavailable, check_before_retry
from server.storage.runs import RunNode
from server.storage.search import SearchHit, title_matches, words
from server.storage.write_gate import WriteGate

__all__ = ["MongoStore"]

T = TypeVar("T")
Doc = dict[str, Any]

_DUPLICATE_KEY = 11000
_MAX_CONFLICTS = 100  # each conflict means another writer made progress: this bounds livelock
_MAX_HINTS = 10_000  # remembered next numbers, one per recently written session and kind

_OPEN_TIMEOUT_MS = 10_000  # the indexes at start-up: see open()

# (collection, keys, unique). Created one per command: FerretDB 1.24 crashes on a
# createIndexes batch whose indexes all exist already.
_INDEXES: list[tuple[str, list[tuple[str, int]], bool]] = [
    ("sessions", [("session_id", ASCENDING)], True),
    (
        "sessions",
        [("tenant_id", ASCENDING), ("user_id", ASCENDING), ("updated_at", DESCENDING)],
        False,
    ),
    (
        "sessions",
        [("tenant_id", ASCENDING), ("status", ASCENDING), ("created_at", DESCENDING)],
        False,
    ),
    ("events", [("session_id", ASCENDING), ("seq", ASCENDING)], True),
    ("messages", [("session_id", ASCENDING), ("sequence", ASCENDING)], True),
    ("controls", [("session_id", ASCENDING), ("key", ASCENDING)], True),
    ("run_slots", [("key", ASCENDING)], True),
    ("run_slots", [("tenant_id", ASCENDING), ("created_at", ASCENDING)], False),
    ("runs", [("session_id", ASCENDING), ("run_id", ASCENDING)], True),
]


class MongoStore(WritesInOrder):
    """The Store contract over a MongoDB (or MongoDB-compatible) database."""

    shared = True  # several server processes may write: active runs carry leases

    def __init__(self, settings: StorageSettings) -> None:
        self._settings = settings
        self.outage = Outage(settings.outage_tolerance_s)  # a stall or failover: wait
        self._client: AsyncMongoClient[Doc] | None = None
        self._db: AsyncDatabase[Doc] | None = None
        self._hints: OrderedDict[tuple[str, str], int] = OrderedDict()  # next free number
        self._checked: OrderedDict[tuple[str, str, str], None] = OrderedDict()  # see append
        self._gate = WriteGate()  # FerretDB: no write of a session undoes another (write_gate)
        self._text_index = False  # the server has the message text index (mongo_search.py)
        self._uncounted: dict[str, int] = {}  # session_id -> bytes stored, not yet in `bytes`

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and create the indexes; fail within the timeout if the server is away."""
        timeout = self._settings.mongodb_timeout_ms
        where = f"open MongoDB database {self._settings.mongodb_database!r}"
        with _translated(where):
            client: AsyncMongoClient[Doc] = AsyncMongoClient(
                self._settings.mongodb_uri,
                serverSelectionTimeoutMS=timeout,
                connectTimeoutMS=timeout,
                socketTimeoutMS=timeout,
                timeoutMS=timeout,
                appname="agent-server",
            )
        db = client[self._settings.mongodb_database]
        try:
            with _translated(where):
                await db.command("ping")  # an absent server fails within the timeout
            # Creating the indexes is a one-off at start-up, and a fresh database's first DDL
            # can take longer than a request may: a short `mongodb_timeout_ms` (meant to fail
            # requests fast in an outage) must not fail the start.
            with _translated(where), pymongo.timeout(max(timeout, _OPEN_TIMEOUT_MS) / 1000):
                for name, keys, unique in _INDEXES:
                    await db[name].create_index(keys, unique=unique)
                self._text_index = await mongo_search.create_text_index(db)
        except BaseException:
            await client.close()
            raise
        self._client, self._db = client, db

    async def close(self) -> None:
        client, self._client, self._db = self._client, None, None
        if client is not None:
            with _translated("close the MongoDB client"):
                await client.close()

    # -- sessions ----------------------------------------------------------------------------

    async def create_session(
        self, scope: Scope, session_id: str, now: int, title: str = ""
    ) -> SessionRecord:
        doc = {
            "session_id": session_id,
            **_owner(scope),
            "status": SessionStatus.IDLE.value,
            "title": title,
            "created_at": now,
            "updated_at": now,
            "active_run_id": None,
            "pending_input": None,
            "bytes": 0,
        }

        async def create() -> None:
            try:
                await self._col("sessions").insert_one(dict(doc))
            except DuplicateKeyError:  # ours, if an earlier try was stored unanswered
                mine = {**_session_filter(scope, session_id), "created_at": now}
                if await self._col("sessions").find_one(mine, {"_id": 1}) is None:
                    raise

        await self._ride("create session", create)
        return SessionRecord(
            session_id, scope.tenant_id, scope.user_id, SessionStatus.IDLE, title, now, now, 0
        )

    async def get_session(self, scope: Scope, session_id: str) -> SessionRecord | None:
        doc = await self._ride(
            "read session",
            lambda: self._col("sessions").find_one(_session_filter(scope, session_id)),
        )
        return await self._record(doc) if doc else None

    async def list_sessions(self, scope: Scope, limit: int) -> list[SessionRecord]:
        if limit == 0:  # pymongo reads limit 0 as "no limit"
            return []
        cursor = (
            self._col("sessions")
            .find(_owner(scope))
            .sort([("updated_at", DESCENDING), ("_id", DESCENDING)])
        )
        if limit > 0:
            cursor = cursor.limit(limit)
        docs = await self._ride("list sessions", lambda: cursor.clone().to_list())
        return list(await asyncio.gather(*(self._record(doc) for doc in docs)))

    async def search_sessions(self, scope: Scope, query: str, limit: int) -> list[SearchHit]:
        """`SessionSearch`: the text index (or a scan) over the searched messages, and the
        titles."""
        query_words = words(query)
        if limit <= 0 or not query_words:
            return []
        with _translated("search sessions"):
            found = await mongo_search.search(
                self._db_open(), scope, query_words, limit, indexed=self._text_index
            )
            cursor = (
                self._col("sessions")
                .find(_owner(scope), {"session_id": 1, "title": 1})
                .sort([("updated_at", DESCENDING), ("_id", DESCENDING)])
            )
            chosen: list[str] = []
            async for doc in cursor:
                if doc["session_id"] in found or title_matches(doc["title"], query_words):
                    chosen.append(doc["session_id"])
                    if len(chosen) == limit:
                        break
            docs = {
                doc["session_id"]: doc
                async for doc in self._col("sessions").find(
                    {**_owner(scope), "session_id": {"$in": chosen}}
                )
            }
            records = await asyncio.gather(*(self._record(docs[i]) for i in chosen if i in docs))
        return [SearchHit(r, *found.get(r.session_id, (None, ()))) for r in records]

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
        fields: Doc = {"updated_at": now}
        if status is not None:
            fields |= {
                "status": status,
                "active_run_id": active_run_id,
                "pending_input": pending_input or None,
                "lease_until": lease_until,
            }
        if title is not None:
            fields["title"] = title

        async def update() -> None:
            async with self._gate.write(session_id):
                with self._counting(session_id) as count:
                    result = await self._col("sessions").update_one(
                        _session_filter(scope, session_id), {"$set": fields, **count}
                    )
            ended = status == SessionStatus.IDLE and result.matched_count
            if ended:  # the run ended: free its slots
                await self._col("run_slots").delete_many({"session_id": session_id})

        await self._ride("update session", update)

    async def rename_session(self, scope: Scope, session_id: str, title: str) -> bool:
        async def rename() -> bool:
            async with self._gate.write(session_id):
                result = await self._col("sessions").update_one(
                    _session_filter(scope, session_id), {"$set": {"title": title}}
                )
            return result.matched_count > 0

        return await self._ride("rename session", rename)

    async def delete_session(self, scope: Scope, session_id: str, now: int) -> DeleteOutcome:
        """The delete holds the session's run slot, so no run starts in any process while it
        goes; a run already holding it makes the delete refuse. The session document goes
        last, so a failure half way leaves a session that can be deleted again rather than
        orphaned events."""
        query = _session_filter(scope, session_id)
        holder = f"delete/{uuid.uuid4().hex}"
        slot = {
            "key": f"session/{session_id}",
            "tenant_id": scope.tenant_id,
            "session_id": session_id,
            "run_id": holder,
        }

        async def delete() -> DeleteOutcome:
            if await self._col("sessions").find_one(query, {"_id": 1}) is None:
                return "not_found"
            if not await self._insert_slot(slot, now) and not (
                await self._free_leftover_slots(scope, now) and await self._insert_slot(slot, now)
            ):
                held = await self._col("run_slots").find_one({"key": slot["key"]}, {"run_id": 1})
                going = held is not None and str(held["run_id"]).startswith("delete/")
                return "not_found" if going else "run_in_progress"  # going: another delete
            try:
                session = await self._col("sessions").find_one(query, {"_id": 0, "status": 1})
                if session is None:
                    return "not_found"
                if session.get("status") != SessionStatus.IDLE:
                    return "run_in_progress"
                for name in ("events", "messages", "controls", "runs"):
                    await self._col(name).delete_many(query)
                await self._col("sessions").delete_one(query)
            finally:
                await self._col("run_slots").delete_many({"run_id": holder})
            return "deleted"

        outcome = await self._ride("delete session", delete)
        if outcome != "deleted":
            return outcome
        for name in ("events", "messages"):
            self._hints.pop((name, session_id), None)
        self._uncounted.pop(session_id, None)
        self._checked.pop((scope.tenant_id, scope.user_id, session_id), None)
        return "deleted"

    # -- events ------------------------------------------------------------------------------

    async def append_events(
        self, scope: Scope, session_id: str, frames: Sequence[dict[str, Any]], now: int
    ) -> list[bytes]:
        for frame in frames:  # fail before touching anything, as SQLite's rollback would
            _encode(frame)
        checked = (scope.tenant_id, scope.user_id, session_id)
        if checked not in self._checked:
            # The first append here checks the session is the caller's and bumps
            # `updated_at`; later ones skip that write (half of each append, and a full scan
            # on FerretDB): messages, stored at the end of every phase, keep it current.
            await self._touch(scope, session_id, now)
            self._checked[checked] = None
            if len(self._checked) > _MAX_HINTS:
                self._checked.popitem(last=False)

        def event(frame: dict[str, Any], seq: int) -> Doc:
            frame["seq"] = seq
            return {
                **_session_filter(scope, session_id),
                "seq": seq,
                "run_id": frame.get("run_id"),
                "ts": frame.get("ts", now),
                "body": Binary(_encode(frame)),
            }

        docs = await self._insert_numbered("events", "seq", scope, session_id, frames, event)
        bodies = [bytes(doc["body"]) for doc in docs]
        self._uncount(session_id, sum(map(len, bodies)))
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
        if limit == 0:  # pymongo reads limit 0 as "no limit"
            return []
        query = {**_session_filter(scope, session_id), "seq": {"$gt": after_seq}}
        cursor = self._col("events").find(query, {"_id": 0, "body": 1}).sort("seq", ASCENDING)
        if limit is not None and limit > 0:
            cursor = cursor.limit(limit)

        async def read() -> list[bytes]:
            frames: list[bytes] = []
            size = 0
            reading = cursor.clone()
            try:
                async for doc in reading:
                    frames.append(bytes(doc["body"]))
                    size += len(frames[-1])
                    if max_bytes is not None and size > max_bytes:
                        break  # the driver fetched at most one batch ahead
            finally:
                await reading.close()
            return frames

        return await self._ride("read events", read)

    # -- messages ----------------------------------------------------------------------------

    async def append_messages(
        self, scope: Scope, session_id: str, messages: Sequence[Message], now: int
    ) -> None:
        await self._touch(scope, session_id, now)

        def message(item: Message, sequence: int) -> Doc:
            body = message_to_api(item, uuid.uuid4().hex, sequence, now)
            return {
                **_session_filter(scope, session_id),
                "sequence": sequence,
                "ts": now,
                "body": body,
            }

        docs = await self._insert_numbered(
            "messages", "sequence", scope, session_id, messages, message
        )
        self._uncount(session_id, sum(len(orjson.dumps(doc["body"])) for doc in docs))

    async def read_messages(
        self,
        scope: Scope,
        session_id: str,
        limit: int,
        since: int | None,
        *,
        max_bytes: int | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        return await self._ride(
            "read messages",
            lambda: self._read_messages(scope, session_id, limit, since, max_bytes),
        )

    async def _read_messages(
        self, scope: Scope, session_id: str, limit: int, since: int | None, max_bytes: int | None
    ) -> tuple[list[dict[str, Any]], int]:
        sessions = self._col("sessions")
        if await sessions.find_one(_session_filter(scope, session_id), {"_id": 1}) is None:
            return [], 0
        total = await self._next_number("messages", "sequence", scope, session_id)
        if limit == 0:
            return [], total
        query: Doc = _session_filter(scope, session_id)
        if since is not None:
            query["ts"] = {"$gt": since}
        newest_first = since is None  # without `since`: the last `limit`, oldest first
        cursor = (
            self._col("messages")
            .find(query, {"_id": 0, "body": 1})
            .sort("sequence", DESCENDING if newest_first else ASCENDING)
        )
        if limit > 0:
            cursor = cursor.limit(limit)
        bodies: list[dict[str, Any]] = []
        size = 0
        try:
            async for doc in cursor:
                bodies.append(doc["body"])
                if max_bytes is not None:
                    size += len(orjson.dumps(doc["body"]))
                    if size > max_bytes:
                        break  # the driver fetched at most one batch ahead
        finally:
            await cursor.close()
        return (bodies[::-1] if newest_first else bodies), total

    async def load_history(self, scope: Scope, session_id: str) -> list[Message]:
        cursor = (
            self._col("messages")
            .find(_session_filter(scope, session_id), {"_id": 0, "body": 1})
            .sort("sequence", ASCENDING)
        )
        return await self._ride(
            "load history",
            lambda: _bodies_of(cursor.clone(), lambda d: message_from_api(d["body"])),
        )

    # -- run tree (server/storage/runs.py) ---------------------------------------------------
    # A session's runs never start concurrently (its run slot), so counting and reading the
    # latest `shown_at` before a write cannot race with another run's node.

    async def add_run(
        self, scope: Scope, session_id: str, run_id: str, parent_run_id: str | None, now: int
    ) -> None:
        query = _session_filter(scope, session_id)

        async def add() -> None:
            position = await self._col("runs").count_documents(query)
            doc = {
                **query,
                "run_id": run_id,
                "parent_run_id": parent_run_id,
                "position": position,
                "shown_at": await self._latest_shown(query, now),
            }
            try:
                await self._col("runs").update_one(
                    {**query, "run_id": run_id}, {"$setOnInsert": doc}, upsert=True
                )
            except DuplicateKeyError:
                pass  # stored by a try whose answer a timeout lost, still running meanwhile

        await self._ride("store a run", add)

    async def show_run(self, scope: Scope, session_id: str, run_id: str, now: int) -> bool:
        query = _session_filter(scope, session_id)

        async def show() -> bool:
            shown_at = await self._latest_shown(query, now)
            result = await self._col("runs").update_one(
                {**query, "run_id": run_id}, {"$set": {"shown_at": shown_at}}
            )
            return result.matched_count > 0

        return await self._ride("show a version", show)

    async def run_nodes(self, scope: Scope, session_id: str) -> list[RunNode]:
        cursor = (
            self._col("runs")
            .find(_session_filter(scope, session_id), {"_id": 0})
            .sort("position", ASCENDING)
        )

        def node(doc: Doc) -> RunNode:
            return RunNode(
                doc["run_id"], doc.get("parent_run_id"), doc["position"], doc["shown_at"]
            )

        return await self._ride("read runs", lambda: _bodies_of(cursor.clone(), node))

    async def _latest_shown(self, query: Doc, now: int) -> int:
        """`now`, or later than every run of the session already shown."""
        last = await self._col("runs").find_one(
            query, {"_id": 0, "shown_at": 1}, sort=[("shown_at", DESCENDING)]
        )
        return max(now, int(last["shown_at"]) + 1) if last else now

    async def renew_leases(self, leases: Sequence[Lease], lease_until: int) -> set[str]:
        sessions = self._col("sessions")

        async def renew(lease: Lease) -> str | None:
            held = {
                "session_id": lease.session_id,
                "active_run_id": lease.run_id,
                "status": {"$in": _ACTIVE},
                # ours: given by this process, or by a try of this renewal whose answer was
                # lost (a lease of exactly that instant is no other process's)
                "$or": [{"lease_until": {"$lte": lease.given}}, {"lease_until": lease_until}],
            }
            result = await sessions.update_one(held, {"$set": {"lease_until": lease_until}})
            return lease.session_id if result.matched_count else None

        async def renew_all() -> list[str | None]:
            async with self._gate.renewal():
                return await asyncio.gather(*(renew(lease) for lease in leases))

        if not leases:
            return set()
        renewed = await self._ride("renew run leases", renew_all)
        return {session_id for session_id in renewed if session_id is not None}

    async def claim_run(self, item: UnfinishedRun, now: int, lease_until: int) -> bool:
        """Atomic on MongoDB (one find_one_and_update); on FerretDB 1.x two processes may
        both win a race, which only repeats the closing events (see docs/storage.md)."""
        expired = {"$or": [{"lease_until": None}, {"lease_until": {"$lt": now}}]}
        doc = await self._ride(
            "claim an unfinished run",
            lambda: self._col("sessions").find_one_and_update(
                {"session_id": item.session_id, "status": {"$in": _ACTIVE}, **expired},
                {"$set": {"lease_until": lease_until}},
            ),
        )
        return doc is not None

    async def unfinished_runs(self, now: int | None = None) -> list[UnfinishedRun]:
        query: Doc = {"status": {"$in": _ACTIVE}}
        if now is not None:
            query["$or"] = [{"lease_until": None}, {"lease_until": {"$lt": now}}]
        cursor = self._col("sessions").find(
            query,
            {"_id": 0, "tenant_id": 1, "user_id": 1, "session_id": 1, "active_run_id": 1},
        )
        docs = await self._ride("find unfinished runs", lambda: cursor.clone().to_list())
        return [
            UnfinishedRun(
                Scope(d["tenant_id"], d["user_id"]), d["session_id"], d.get("active_run_id") or ""
            )
            for d in docs
        ]

    # -- several processes -------------------------------------------------------------------

    async def tail_events(
        self, cursors: Mapping[str, Cursor], limit: int
    ) -> list[tuple[str, int, bytes]]:
        """Polling by `seq` (one query for every followed session): it works on FerretDB,
        which has no change streams, and costs one indexed look-up per session and poll.
        Events carry their session's owner, so a session made again under a deleted one's
        id by someone else does not match the old cursor."""
        if not cursors or limit <= 0:
            return []
        query = {
            "$or": [
                {**_session_filter(c.scope, s), "seq": {"$gt": c.after_seq}}
                for s, c in cursors.items()
            ]
        }
        cursor = (
            self._col("events")
            .find(query, {"_id": 0, "session_id": 1, "seq": 1, "body": 1})
            .sort([("session_id", ASCENDING), ("seq", ASCENDING)])
            .limit(limit)
        )
        return await self._ride(
            "follow events",
            lambda: _bodies_of(
                cursor.clone(), lambda d: (d["session_id"], int(d["seq"]), bytes(d["body"]))
            ),
        )

    async def notices(self) -> AsyncIterator[None]:
        """A change stream on the inserts into `events` and `controls` (a replica set or
        Atlas; a standalone server and FerretDB refuse it: StorageError). Only the resume
        token travels; each wait for news is bounded, within the operation timeout."""
        if self._db is None:
            raise StorageError("the MongoDB store is not open")
        pipeline: list[Doc] = [
            {"$match": {"operationType": "insert", "ns.coll": {"$in": ["events", "controls"]}}},
            {"$project": {"_id": 1}},
        ]
        wait_ms = max(100, min(1000, self._settings.mongodb_timeout_ms // 2))
        with _translated("watch for new events"):
            stream = await self._db.watch(pipeline, max_await_time_ms=wait_ms)
            async with stream:
                while stream.alive:
                    if await stream.try_next() is not None:
                        yield

    async def send_control(self, scope: Scope, control: Control, now: int) -> bool:
        """The unique (session_id, key) index decides: atomic on MongoDB and on FerretDB,
        whose updates are not (an insert either takes the key or fails)."""
        doc = {
            **_session_filter(scope, control.session_id),
            "key": control.key,
            "run_id": control.run_id,
            "kind": control.kind,
            "payload": control.payload,
            "created_at": now,
            "_id": ObjectId(),  # the same at every try: a stored try is recognised as ours
        }

        async def send() -> bool:
            sessions = self._col("sessions")
            if await sessions.find_one(_session_filter(scope, control.session_id)) is None:
                return False  # not the caller's session
            try:
                await self._col("controls").insert_one(doc)
            except DuplicateKeyError:
                mine = await self._col("controls").find_one({"_id": doc["_id"]}, {"_id": 1})
                return mine is not None
            return True

        return await self._ride("send a control", send)

    async def pending_controls(self, session_ids: Sequence[str]) -> list[Control]:
        if not session_ids:
            return []
        cursor = (
            self._col("controls")
            .find({"session_id": {"$in": list(session_ids)}}, {"_id": 0})
            .sort("created_at", ASCENDING)
        )
        docs = await self._ride("read controls", lambda: cursor.clone().to_list())
        return [
            Control(d["session_id"], d["run_id"], d["key"], d["kind"], d.get("payload") or {})
            for d in docs
        ]

    async def drop_controls(self, session_id: str, run_id: str) -> None:
        await self._ride(
            "drop controls",
            lambda: self._col("controls").delete_many({"session_id": session_id, "run_id": run_id}),
        )

    async def take_run_slot(
        self, scope: Scope, session_id: str, run_id: str, limit: int, now: int
    ) -> Literal["run_in_progress", "too_many_runs"] | None:
        """Insert-decides, like `seq`: a slot is a document with a unique `key`, so of two
        processes taking the same slot one insert fails, on MongoDB and on FerretDB alike."""
        return await self._ride(
            "take a run slot", lambda: self._take_slots(scope, session_id, run_id, limit, now)
        )

    async def _take_slots(
        self, scope: Scope, session_id: str, run_id: str, limit: int, now: int
    ) -> Literal["run_in_progress", "too_many_runs"] | None:
        """One try of `take_run_slot`: a slot this run took in an earlier try is its own."""
        base = {"tenant_id": scope.tenant_id, "session_id": session_id, "run_id": run_id}
        for attempt in range(2):
            if await self._insert_slot({**base, "key": f"session/{session_id}"}, now):
                break
            if attempt or not await self._free_leftover_slots(scope, now):
                return "run_in_progress"
        for attempt in range(2):
            for slot in range(limit):
                key = f"tenant/{scope.tenant_id}/{slot}"
                if await self._insert_slot({**base, "key": key}, now):
                    return None
            if attempt or not await self._free_leftover_slots(scope, now):
                break
        await self._col("run_slots").delete_many({"run_id": run_id})
        return "too_many_runs"

    async def release_run_slot(self, session_id: str, run_id: str) -> None:
        await self._ride(
            "release a run slot", lambda: self._col("run_slots").delete_many({"run_id": run_id})
        )

    async def _insert_slot(self, doc: Doc, now: int) -> bool:
        """True when the slot is the run's: taken now, or by an earlier try whose answer was
        lost (a write that timed out may have been stored)."""
        try:
            await self._col("run_slots").insert_one({**doc, "created_at": now})
        except DuplicateKeyError:
            mine = {"key": doc["key"], "run_id": doc["run_id"]}
            return await self._col("run_slots").find_one(mine, {"_id": 1}) is not None
        return True

    async def _free_leftover_slots(self, scope: Scope, now: int) -> bool:
        """Delete the tenant's slots (older than the grace period) whose run the store no
        longer shows active: their process died before releasing them. True if any went."""
        old = {"tenant_id": scope.tenant_id, "created_at": {"$lt": now - SLOT_GRACE_MS}}
        freed = False
        async for slot in self._col("run_slots").find(old):
            session = await self._col("sessions").find_one(
                {"session_id": slot["session_id"], "status": {"$in": _ACTIVE}},
                {"_id": 0, "active_run_id": 1},
            )
            if session is None or session.get("active_run_id") != slot["run_id"]:
                result = await self._col("run_slots").delete_one(
                    {"key": slot["key"], "run_id": slot["run_id"]}
                )
                freed = freed or result.deleted_count > 0
        return freed

    # -- plumbing ----------------------------------------------------------------------------

    def _col(self, name: str) -> AsyncCollection[Doc]:
        return self._db_open()[name]

    def _db_open(self) -> AsyncDatabase[Doc]:
        if self._db is None:
            raise StorageError("the MongoDB store is not open")
        return self._db

    async def _record(self, doc: Doc) -> SessionRecord:
        scope = Scope(doc["tenant_id"], doc["user_id"])
        next_seq = await self._next_number("events", "seq", scope, doc["session_id"])
        return SessionRecord(
            session_id=doc["session_id"],
            tenant_id=doc["tenant_id"],
            user_id=doc["user_id"],
            status=SessionStatus(doc["status"]),
            title=doc["title"],
            created_at=doc["created_at"],
            updated_at=doc["updated_at"],
            last_seq=next_seq - 1,
            active_run_id=doc.get("active_run_id"),
            pending_input=doc.get("pending_input"),
        )

    async def _ride(self, action: str, work: Callable[[], Awaitable[T]]) -> T:
        """`work()`, its driver errors translated, again while the database is away or
        slow, for up to `storage.outage_tolerance_s` (server/storage/outage.py). `work`
        must be safe to repeat: a write that timed out may have been stored."""

        async def once() -> T:
            with _translated(action):
                return await work()

        return await self.outage.ride(once)

    async def _touch(self, scope: Scope, session_id: str, now: int) -> None:
        """Bump `updated_at`; refuse a session that is not the caller's."""

        async def touch() -> Any:
            async with self._gate.write(session_id):
                with self._counting(session_id) as count:
                    return await self._col("sessions").update_one(
                        _session_filter(scope, session_id), {"$set": {"updated_at": now}, **count}
                    )

        result = await self._ride("update session", touch)
        if result.matched_count == 0:
            raise StorageError(f"session {session_id} does not exist")

    async def _next_number(self, name: str, key: str, scope: Scope, session_id: str) -> int:
        """The session's next free `key` in collection `name`: one past the highest stored
        (events count from 1, messages from 0)."""
        last = await self._ride(
            f"read the last {key}",
            lambda: self._col(name).find_one(
                _session_filter(scope, session_id), {"_id": 0, key: 1}, sort=[(key, DESCENDING)]
            ),
        )
        if last is not None:
            return int(last[key]) + 1
        return 1 if key == "seq" else 0

    async def _insert_numbered(
        self,
        name: str,
        key: str,
        scope: Scope,
        session_id: str,
        items: Sequence[T],
        build: Callable[[T, int], Doc],
    ) -> list[Doc]:
        """Store one document per item, numbered consecutively after the session's last.

        The unique `(session_id, key)` index decides races: a number another writer took
        first fails our insert there, so we read the new last number and go on from it.
        Items keep their order; a batch may interleave with another writer's. The next
        number is remembered from our own last insert, which saves the read when one process
        writes a session (the usual case): a remembered number can be too low (another
        writer went on: one conflict, then a read) but never too high, as none is deleted.
        """
        hint_key = (name, session_id)
        first = self._hints.pop(hint_key, None)
        stored: list[Doc] = []
        remaining = list(items)
        conflicts = 0
        while remaining:
            if first is None:
                if stored or conflicts:  # another writer went on in this session: a run's
                    await check_before_retry()  # writer checks it still holds the run
                first = await self._next_number(name, key, scope, session_id)
            docs = [build(item, first + i) for i, item in enumerate(remaining)]
            inserted = await self._insert_until_taken(name, docs)
            stored += docs[:inserted]
            remaining = remaining[inserted:]
            first = None if remaining else first + inserted
            conflicts = 0 if inserted else conflicts + 1
            if conflicts > _MAX_CONFLICTS:
                raise StorageError(f"too many concurrent writers on session {session_id}")
        if first is not None:
            self._hints[hint_key] = first
            if len(self._hints) > _MAX_HINTS:
                self._hints.popitem(last=False)
        return stored

    async def _insert_until_taken(self, name: str, docs: list[Doc]) -> int:
        """Insert in order, stopping at a number already taken; return how many went in.

        Idempotent across tries: each document keeps its `_id` from try to try, so when a
        number is found taken by a document of ours (stored by a try that timed out, in full
        or in part), the documents of ours stored count as inserted and the rest follow."""
        for doc in docs:
            doc.setdefault("_id", ObjectId())
        done = 0
        while done < len(docs):
            rest = docs[done:]
            taken = await self._ride(f"store {name}", partial(self._insert_many, name, rest))
            if taken is None:
                return len(docs)
            done += taken
            ours = await self._ride(f"store {name}", partial(self._stored, name, docs[done:]))
            if not ours:
                return done  # another writer took the number
            done += ours
        return done

    async def _insert_many(self, name: str, docs: list[Doc]) -> int | None:
        """One try: None when every document went in, else the index of the first whose
        number (or `_id`) was taken; the ones before it went in."""
        try:
            await self._col(name).insert_many(docs, ordered=True)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors") or []
            if not errors or errors[0].get("code") != _DUPLICATE_KEY:
                raise
            return int(errors[0]["index"])
        return None

    async def _stored(self, name: str, docs: list[Doc]) -> int:
        """How many of `docs`, from the first, are stored (by their `_id`): an ordered insert
        stores a prefix."""
        ids = [doc["_id"] for doc in docs]
        found = {d["_id"] async for d in self._col(name).find({"_id": {"$in": ids}}, {"_id": 1})}
        count = 0
        while count < len(ids) and ids[count] in found:
            count += 1
        return count

    async def stored_bytes(self, tenant: str | None = None) -> dict[str, int]:
        match = {} if tenant is None else {"tenant_id": tenant}
        pipeline: list[Doc] = [
            {"$match": match},
            {"$group": {"_id": "$tenant_id", "bytes": {"$sum": "$bytes"}}},
        ]

        async def read() -> dict[str, int]:
            cursor = await self._col("sessions").aggregate(pipeline)
            return {str(doc["_id"]): int(doc["bytes"]) async for doc in cursor}

        return await self._ride("count stored bytes", read)

    def _uncount(self, session_id: str, size: int) -> None:
        """Bytes stored for the session, to add to its count with its next write."""
        self._uncounted[session_id] = self._uncounted.get(session_id, 0) + size

    @contextmanager
    def _counting(self, session_id: str) -> Iterator[Doc]:
        """The `$inc` that adds the session's uncounted bytes to a write of it; given back
        if the write fails (a try that timed out may still have added them: counted twice)."""
        size = self._uncounted.pop(session_id, 0)
        try:
            yield {"$inc": {"bytes": size}} if size else {}
        except BaseException:
            if size:
                self._uncount(session_id, size)
            raise

    async def session_owners(self, session_ids: Sequence[str]) -> dict[str, Scope]:
        if not session_ids:
            return {}
        cursor = self._col("sessions").find(
            {"session_id": {"$in": list(session_ids)}},
            {"_id": 0, "session_id": 1, "tenant_id": 1, "user_id": 1},
        )

        def owner(d: Doc) -> tuple[str, Scope]:
            return str(d["session_id"]), Scope(d["tenant_id"], d["user_id"])

        owners = await self._ride("check sessions", lambda: _bodies_of(cursor.clone(), owner))
        return dict(owners)


_ACTIVE = [status.value for status in SessionStatus if status != SessionStatus.IDLE]


def _owner(scope: Scope) -> Doc:
    return {"tenant_id": scope.tenant_id, "user_id": scope.user_id}


def _session_filter(scope: Scope, session_id: str) -> Doc:
    return {"session_id": session_id, **_owner(scope)}


def _encode(frame: Mapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(frame)
    except orjson.JSONEncodeError as exc:
        raise StorageError(f"event frame is not JSON-serializable: {exc}") from exc


async def _bodies_of(cursor: Any, read: Callable[[Doc], T]) -> list[T]:
    """Every document of `cursor`, through `read`, the cursor closed however it ends."""
    try:
        return [read(doc) async for doc in cursor]
    finally:
        await cursor.close()


@contextmanager
def _translated(action: str) -> Iterator[None]:
    """Turn driver errors into StorageError with a one-line message (pymongo's can span a
    whole topology description); one that can pass (unreachable, no primary, a timeout)
    into StoreUnavailable, which `_ride` retries."""
    try:
        yield
    except ConnectionFailure as exc:  # also server selection, no primary, network timeouts
        raise StoreUnavailable(f"cannot {action}: unreachable ({_first_line(exc)})") from exc
    except PyMongoError as exc:
        passing = exc.timeout or exc.has_error_label("RetryableWriteError")
        kind = StoreUnavailable if passing else StorageError
        raise kind(f"cannot {action}: {_first_line(exc)}") from exc
    except BSONError as exc:
        raise StorageError(f"cannot {action}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    for noise in (" (configured timeouts", ", Timeout:"):  # pymongo's settings and topology
        text = text.split(noise)[0]
    return text if len(text) <= 200 else text[:197] + "..."
