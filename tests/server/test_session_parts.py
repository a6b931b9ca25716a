"""The session hub's parts alone, in process, on a real SQLite file: the run quota (here and
across two processes' store slots), the session registry, a chat frame's checks, and the
per-tenant counters."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent.control import Decision, PendingApproval, PendingQuestion, RunControl
from agent.events import RunStarted, StepStarted
from agent.metrics import Metric
from agent.ports import ToolSpec
from agent.run import RunLimits
from server.events import Event, RunFailed
from server.live import ActiveRun
from server.protocol import ChatFrame, ProtocolError, event_frame
from server.run_driver import RunDriver
from server.run_quota import RunQuota
from server.run_recovery import RunRecovery, where_it_stopped
from server.run_request import read_request, rerun_request
from server.session_registry import SessionRegistry
from server.settings import AgentSettings
from server.storage.base import Scope, SessionStatus, UnfinishedRun
from server.storage.sqlite import SQLiteStore
from server.tenant_metrics import TenantMetrics
from tests.storage.sqlite_trace import traced

ALICE = Scope("acme", "alice")
BOB = Scope("acme", "bob")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "agent.db", shared=True)
    await store.open()
    yield store
    await store.close()


class Repairs:
    """A repair queue that records which runs it was asked to close."""

    def __init__(self) -> None:
        self.queued: dict[str, UnfinishedRun] = {}
        self.repaired: list[UnfinishedRun] = []

    def pending(self, session_id: str) -> UnfinishedRun | None:
        return self.queued.get(session_id)

    def defer(self, item: UnfinishedRun, told: Sequence[dict[str, Any]] = ()) -> None:
        self.queued[item.session_id] = item

    async def repair(self, item: UnfinishedRun) -> None:
        self.repaired.append(item)
        self.queued.pop(item.session_id, None)


class Watcher:
    """A connection as the registry sees it: closed with a code."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.closed = asyncio.Event()

    def deliver(self, text: str, seq: int | None, event: Event) -> None:
        pass

    def finish(self, code: int) -> None:
        self.codes.append(code)
        self.closed.set()

    async def wait_closed(self) -> None:
        await self.closed.wait()


def _chat(**fields: object) -> ChatFrame:
    return ChatFrame.model_validate({"type": "chat", "content": "hi", **fields})


# -- RunQuota --------------------------------------------------------------------------------


async def test_the_quota_counts_each_tenant_apart_and_refuses_at_the_limit(
    store: SQLiteStore,
) -> None:
    quota = RunQuota(store, limit=2)
    quota.reserve("acme")
    quota.reserve("acme")
    quota.reserve("globex")
    with pytest.raises(ProtocolError) as refused:
        quota.reserve("acme")
    assert refused.value.code == "too_many_runs"
    assert "2 active runs" in refused.value.message
    assert (quota.active_runs("acme"), quota.active_runs("globex"), quota.active_runs()) == (
        2,
        1,
        3,
    )
    quota.release("acme")
    quota.reserve("acme")  # the freed place is usable again
    assert quota.active_runs("acme") == 2


async def test_store_slots_hold_the_limit_across_processes(tmp_path: Path) -> None:
    first, second = (SQLiteStore(tmp_path / "shared.db", shared=True) for _ in range(2))
    await first.open()
    await second.open()
    try:
        here, there = RunQuota(first, limit=1), RunQuota(second, limit=1)
        here.reserve("acme")
        await here.take_slot(ALICE, "s1", "r1")
        there.reserve("acme")
        with pytest.raises(ProtocolError) as refused:
            await there.take_slot(BOB, "s2", "r2")  # the tenant's one slot is taken elsewhere
        assert refused.value.code == "too_many_runs"
        assert there.active_runs("acme") == 0  # the refused run is not counted
        await here.free_slot("s1", "r1")
        there.reserve("acme")
        await there.take_slot(BOB, "s2", "r2")
        assert there.active_runs("acme") == 1
    finally:
        await first.close()
        await second.close()


async def test_a_session_has_one_run_slot(store: SQLiteStore) -> None:
    quota = RunQuota(store, limit=5)
    quota.reserve("acme")
    await quota.take_slot(ALICE, "s1", "r1")
    quota.reserve("acme")
    with pytest.raises(ProtocolError) as refused:
        await quota.take_slot(ALICE, "s1", "r2")
    assert refused.value.code == "run_in_progress"
    assert quota.active_runs("acme") == 1


# -- LiveSession's and ActiveRun's transitions ------------------------------------------------


async def test_a_session_holds_one_run_and_lets_go_only_of_its_own(store: SQLiteStore) -> None:
    registry = SessionRegistry(store, Repairs())
    live, _ = await registry.open(ALICE, None)
    first, second = ActiveRun("r1", RunControl()), ActiveRun("r2", RunControl())
    live.claim_run(first)
    with pytest.raises(RuntimeError, match="has run r1 already"):
        live.claim_run(second)
    live.release_run(second)  # not the session's run: nothing changes
    assert live.run is first
    live.run_ended(first)
    assert live.run is None and live.ended_run == "r1"
    live.claim_run(second)  # a chat sent on receiving the first run's end
    live.release_run(first)
    assert live.run is second
    live.release_run(second)
    registry.release(live)
    await asyncio.wait_for(registry.wait_empty(), 5)


async def test_an_answer_clears_every_view_of_the_question_at_once(
    store: SQLiteStore, tmp_path: Path
) -> None:
    """What waits for the user has one copy here, the run's RunControl: the session's view
    is read from it, so it cannot drift. Another process sees the stored copy."""
    registry = SessionRegistry(store, Repairs())
    live, _ = await registry.open(ALICE, None)
    await live.ensure_stored("t")
    run = ActiveRun("r1", RunControl())
    live.claim_run(run)
    await live.publish([], status=SessionStatus.RUNNING, run_id="r1")
    question = PendingQuestion("Which city?", "c1", 1, 9_000)
    run.control.pose(question)
    assert live.snapshot()["pending_input"] is None  # not announced yet: still running
    await live.publish(
        [], status=SessionStatus.AWAITING_INPUT, pending_input=asdict(question), run_id="r1"
    )
    assert live.snapshot()["pending_input"] == asdict(question)
    other_store = SQLiteStore(tmp_path / "agent.db", shared=True)  # another process
    await other_store.open()
    try:
        other = SessionRegistry(other_store, Repairs())
        elsewhere, _ = await other.open(ALICE, live.session_id)
        assert elsewhere.run is None
        assert elsewhere.snapshot()["status"] == "awaiting_input"
        assert elsewhere.snapshot()["pending_input"] == asdict(question)
        other.release(elsewhere)
    finally:
        await other_store.close()

    assert run.control.answer("Paris")
    assert live.pending_input is None  # at once, before the status change is stored
    assert live.snapshot()["pending_input"] is None
    await live.publish([], status=SessionStatus.RUNNING, run_id="r1")
    stored = await store.get_session(ALICE, live.session_id)
    assert stored is not None and stored.pending_input is None

    approval = PendingApproval("shell", {"cmd": "ls"}, "c2", 2, 9_000)
    run.control.pose_approval(approval)
    await live.publish([], status=SessionStatus.AWAITING_APPROVAL, run_id="r1")
    assert live.snapshot()["pending_approval"] == asdict(approval)
    assert live.snapshot()["pending_input"] is None
    run.control.decide("c2", Decision(approve=True))
    assert live.snapshot()["pending_approval"] is None  # at once
    await live.publish([], status=SessionStatus.IDLE)
    assert live.run is None and live.snapshot()["status"] == "idle"
    registry.release(live)
    await asyncio.wait_for(registry.wait_empty(), 5)


async def test_a_run_whose_end_was_not_stored_leaves_nothing_waiting(store: SQLiteStore) -> None:
    registry = SessionRegistry(store, Repairs())
    live, _ = await registry.open(ALICE, None)
    await live.ensure_stored("t")
    run = ActiveRun("r1", RunControl())
    live.claim_run(run)
    approval = PendingApproval("shell", {}, "c1", 1, 9)
    run.control.pose_approval(approval)
    await live.publish([], status=SessionStatus.AWAITING_APPROVAL, run_id="r1")
    assert live.snapshot()["pending_approval"] == asdict(approval)
    live.ended_unstored(run)
    assert live.run is None
    assert live.snapshot() == {
        "status": "idle",
        "last_seq": live.last_seq,
        "pending_input": None,
        "pending_approval": None,  # not shown waiting beside an idle status
    }
    registry.release(live)
    await asyncio.wait_for(registry.wait_empty(), 5)


def test_a_run_takes_each_store_control_once_and_starts_once() -> None:
    run = ActiveRun("r1", RunControl())
    assert run.take_control("answer:c1")
    assert not run.take_control("answer:c1")  # the relay leaves it alone
    run.give_back_control("answer:c1")  # another process's control won the key
    assert run.take_control("answer:c1")
    run.opened("m1")
    run.opened("m2")
    assert run.opened_by == "m1"


async def test_a_run_is_started_once() -> None:
    run = ActiveRun("r1", RunControl())
    task = asyncio.create_task(asyncio.sleep(0))
    run.started(task)
    with pytest.raises(RuntimeError, match="started already"):
        run.started(task)
    await task


# -- SessionRegistry -------------------------------------------------------------------------


async def test_a_new_session_is_held_until_released(store: SQLiteStore) -> None:
    registry = SessionRegistry(store, Repairs())
    live, resumed = await registry.open(ALICE, None)
    assert not resumed and not live.stored
    assert registry.live_count() == registry.live_count("acme") == 1
    assert registry.live_count("globex") == 0
    registry.release(live)
    await asyncio.wait_for(registry.wait_empty(), 5)
    assert registry.live_count() == 0
    assert await store.get_session(ALICE, live.session_id) is None  # never chatted: not stored


async def test_every_opener_of_a_session_shares_one_live_session(store: SQLiteStore) -> None:
    registry = SessionRegistry(store, Repairs())
    made, _ = await registry.open(ALICE, None)
    await made.ensure_stored()
    registry.release(made)
    first, resumed = await registry.open(ALICE, made.session_id)
    second, _ = await registry.open(ALICE, made.session_id)
    assert resumed and first is second is not made


async def test_a_new_session_is_stored_with_its_title_in_one_write(store: SQLiteStore) -> None:
    registry = SessionRegistry(store, Repairs())
    live, _ = await registry.open(ALICE, None)
    statements = await traced(store)
    await live.ensure_stored("Plan my trip")
    await live.ensure_stored("Another title")  # stored already: nothing to do

    assert [s.split()[0] for s in statements if s.split()[0] in ("INSERT", "UPDATE")] == ["INSERT"]
    record = await store.get_session(ALICE, live.session_id)
    assert record is not None and record.title == live.title == "Plan my trip"


async def test_unknown_and_foreign_ids_are_not_found(store: SQLiteStore) -> None:
    registry = SessionRegistry(store, Repairs())
    with pytest.raises(ProtocolError) as unknown:
        await registry.open(ALICE, "nope")
    assert unknown.value.code == "session_not_found"
    mine, _ = await registry.open(ALICE, None)
    await mine.ensure_stored()
    for held in (1, 0):  # held in memory, then only stored
        assert registry.live_count() == held
        with pytest.raises(ProtocolError) as foreign:
            await registry.open(BOB, mine.session_id)
        assert foreign.value.code == "session_not_found"
        registry.release(mine)


async def test_create_makes_a_session_with_the_client_chosen_id(store: SQLiteStore) -> None:
    registry = SessionRegistry(store, Repairs())
    live, resumed = await registry.open(ALICE, "thread-1", create=True)
    assert (live.session_id, resumed) == ("thread-1", False)
    again, resumed = await registry.open(ALICE, "thread-1", create=True)
    assert again is live and resumed


async def test_a_run_queued_for_repair_is_closed_before_its_session_loads(
    store: SQLiteStore,
) -> None:
    repairs = Repairs()
    registry = SessionRegistry(store, repairs)
    live, _ = await registry.open(ALICE, None)
    await live.ensure_stored()
    registry.release(live)
    item = UnfinishedRun(ALICE, live.session_id, "r1")
    repairs.defer(item)
    with pytest.raises(ProtocolError):
        await registry.open(BOB, live.session_id)
    assert repairs.repaired == []  # another user's open does not touch it
    await registry.open(ALICE, live.session_id)
    assert repairs.repaired == [item]


async def test_a_deleted_session_is_forgotten_and_its_watchers_closed(
    store: SQLiteStore,
) -> None:
    registry = SessionRegistry(store, Repairs())
    one, _ = await registry.open(ALICE, None)
    await one.ensure_stored("one")
    other, _ = await registry.open(BOB, None)
    watchers = [Watcher(), Watcher(), Watcher()]
    one.subscribers.update(watchers[:2])
    other.subscribers.add(watchers[2])
    assert await store.delete_session(ALICE, one.session_id, 0) == "deleted"
    registry.forget(one.session_id, 4404)
    assert [w.codes for w in watchers] == [[4404], [4404], []]
    with pytest.raises(ProtocolError):  # not the copy its closing watchers still hold
        await registry.open(ALICE, one.session_id)
    registry.release(one)  # the watchers' connections let go of it later: nothing changes
    assert list(registry.sessions) == [other.session_id]
    await registry.close_all(1001, timeout_s=5)
    assert [w.codes for w in watchers] == [[4404], [4404], [1001]]
    assert not registry.run_active(one.session_id)


# -- read_request ----------------------------------------------------------------------------


def test_a_chat_frame_gets_the_settings_defaults() -> None:
    settings = AgentSettings(default_max_steps=7, default_mode=False, style="direct")
    request = read_request(_chat(id="c1"), settings, ["web_search"], "retry")
    assert (request.max_steps, request.agent_mode, request.style) == (7, False, "direct")
    assert (request.tools, request.client_id, request.origin) == (None, "c1", "retry")


@pytest.mark.parametrize(
    ("fields", "client_tools", "says"),
    [
        ({"agent_max_steps": 51}, (), "agent_max_steps: must be at most 50 (got 51)."),
        ({"tools": ["shell"]}, (), "tools: unknown tool 'shell' (enabled: web_search)."),
        ({}, ("web_search",), "tools: 'web_search' is a server tool's name."),
        ({}, ("request_input",), "tools: 'request_input' is a server tool's name."),
    ],
)
def test_a_chat_frame_that_cannot_run_is_refused(
    fields: dict[str, object], client_tools: tuple[str, ...], says: str
) -> None:
    specs = [ToolSpec(name, "", {}) for name in client_tools]
    with pytest.raises(ProtocolError) as refused:
        read_request(_chat(**fields), AgentSettings(), ["web_search"], client_tools=specs)
    assert (refused.value.code, refused.value.message) == ("invalid_message", says)


def test_a_retry_is_a_run_request_with_the_limits_of_a_chat() -> None:
    """`retry` and `continue` build the request they run, checked as a chat's would be."""
    settings = AgentSettings(default_max_steps=7, style="direct")
    request = rerun_request("go on", True, None, "c2", "continue", settings)
    assert (request.content, request.max_steps, request.style) == ("go on", 7, "direct")
    assert (request.tools, request.client_id, request.origin) == (None, "c2", "continue")
    with pytest.raises(ProtocolError) as refused:
        rerun_request("again", True, 51, None, "retry", settings)
    assert refused.value.message == "agent_max_steps: must be at most 50 (got 51)."


# -- TenantMetrics ---------------------------------------------------------------------------


def test_each_tenant_sees_its_own_counters_and_the_total_sums_them() -> None:
    metrics = TenantMetrics()
    metrics.of("acme")[Metric.RUNS_STARTED] += 2
    metrics.of("globex")[Metric.RUNS_STARTED] += 1
    acme = metrics.snapshot("acme")
    acme[Metric.RUNS_STARTED] += 10  # a snapshot is a copy
    assert metrics.snapshot("acme")[Metric.RUNS_STARTED] == 2
    assert metrics.snapshot("initech")[Metric.RUNS_STARTED] == 0
    assert metrics.snapshot()[Metric.RUNS_STARTED] == 3


# -- RunDriver -------------------------------------------------------------------------------


class HangingRepairs(Repairs):
    """A repair that waits until cancelled: the connection that sent the chat went away."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()

    async def repair(self, item: UnfinishedRun) -> None:
        self.started.set()
        await asyncio.Event().wait()


async def test_a_chat_cut_off_while_its_session_is_repaired_leaves_nothing_taken(
    store: SQLiteStore,
) -> None:
    repairs = HangingRepairs()
    registry = SessionRegistry(store, repairs)
    quota = RunQuota(store, limit=1)
    driver = RunDriver(
        store=store,
        registry=registry,
        quota=quota,
        repairs=repairs,
        context=lambda *args: None,  # type: ignore[arg-type,return-value]  # never reached
        metrics=TenantMetrics(),
        settings=AgentSettings(),
        tools_for=lambda tenant: [],
        limits=RunLimits(),
    )
    live, _ = await registry.open(ALICE, None)
    repairs.defer(UnfinishedRun(ALICE, live.session_id, "r0"))
    chat = asyncio.create_task(driver.start_run(live, _chat()))
    await asyncio.wait_for(repairs.started.wait(), 5)
    chat.cancel()
    with pytest.raises(asyncio.CancelledError):
        await chat
    assert live.run is None  # the session takes the next chat
    assert quota.active_runs(ALICE.tenant_id) == 0  # and the tenant's run count is given back


class _CountingReads(SQLiteStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.read = 0

    async def read_events(self, *args: Any, **kwargs: Any) -> list[bytes]:
        frames = await super().read_events(*args, **kwargs)
        self.read += len(frames)
        return frames


@pytest.mark.parametrize("run_events", [5, 700])  # within one read back, and across several
async def test_recovery_reads_back_only_as_far_as_the_dead_run_goes(
    tmp_path: Path, run_events: int
) -> None:
    store = _CountingReads(tmp_path / "long.db")
    await store.open()
    try:
        await store.create_session(ALICE, "s1", 1)
        old = [event_frame(StepStarted(9), "s1", f"old-{i // 50}", 2) for i in range(5000)]
        await store.append_events(ALICE, "s1", old, 2)
        dead = [
            event_frame(StepStarted(1 + i * 3 // run_events), "s1", "dead", 3)
            for i in range(run_events)
        ]
        without_step = event_frame(RunStarted(5), "s1", "dead", 3)
        dead.insert(run_events // 2, without_step)
        await store.append_events(ALICE, "s1", dead, 3)
        store.read = 0
        last_seq = 5000 + run_events + 1
        assert (await where_it_stopped(store, ALICE, "s1", last_seq, "dead")).step == 3
        assert store.read < 4 * (run_events + 256)  # not the 5,000 events before the run
        assert (await where_it_stopped(store, ALICE, "s1", last_seq, "never-ran")).step == 0
    finally:
        await store.close()


async def test_a_run_asked_to_be_repaired_twice_at_once_is_closed_once(
    store: SQLiteStore,
) -> None:
    # The store came back: the upkeep and a client opening the session both ask to repair
    # the run whose `error` was stored and whose `response_complete` was not.
    await store.create_session(ALICE, "s1", 1)
    await store.update_session(ALICE, "s1", 2, status="running", active_run_id="r1")
    error = Event(RunFailed("storage_error", "away"), "s1", "r1", 3)
    await store.append_events(ALICE, "s1", [error.draft()], 3)

    async def free_slot(session_id: str, run_id: str) -> None:
        pass

    recovery = RunRecovery(
        store=store,
        sessions={},
        context=lambda *args: pytest.fail("a run whose error is stored needs no context"),
        release_run=free_slot,
        relay=None,
        lease_ms=3000,
        limits=RunLimits(),
    )
    item = UnfinishedRun(ALICE, "s1", "r1")
    recovery.defer(item)
    await asyncio.gather(recovery.repair(item), recovery.repair(item))

    kinds = [orjson.loads(e)["type"] for e in await store.read_events(ALICE, "s1", 0)]
    assert kinds == ["error", "response_complete"]
    assert recovery.pending("s1") is None
    assert (await store.get_session(ALICE, "s1")).status == "idle"  # type: ignore[union-attr]
