"""SessionHub: the session registry. Opens sessions, starts and stops runs, recovers.

A run is a task. Its RunControl (stop Event, input queue) is what `agent_control` and
`agent_user_input` act on; its sink and transcript write through the LiveSession, so every
event is stored before any socket sees it. Whatever way a run ends (finished, stopped,
failed), the hub sends exactly one `response_complete` as its last event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from agent.budget import Budget
from agent.chat import run_chat
from agent.context import ContextWindow
from agent.control import Decision, DecisionError, RunControl
from agent.errors import ModelError, StorageError
from agent.events import (
    AgentEvent,
    ApprovalRequested,
    ChatDone,
    InputRequested,
    RunCompleted,
    RunStopped,
    UserMessage,
)
from agent.loop import run_agent
from agent.messages import Message, Usage
from agent.metrics import Metric, Metrics
from agent.ports import ChatModel, PromptProvider, Toolbox, ToolSpec
from agent.run import RunContext, RunLimits, RunRecorder, Search, Style
from server import remote
from server.client_tools import ClientToolbox
from server.live import ActiveRun, LiveSession, now_ms, shielded
from server.protocol import (
    AgentControlFrame,
    ChatFrame,
    ProtocolError,
    error_frame,
    event_frame,
    run_frame,
)
from server.relay import StoreRelay
from server.settings import AgentSettings
from server.storage.base import Scope, SessionRecord, Store, UnfinishedRun

__all__ = ["SessionHub"]

log = logging.getLogger(__name__)
GOING_AWAY = 1001


_LAST = (RunCompleted, RunStopped, ChatDone)  # awaited: a failed write before them is reported
_TAIL_EVENTS = 400  # how far back `retry`/`continue` look for the last run's message
_CONTINUE = "Please continue the task from where you stopped."
def _too_many_runs(active: int) -> ProtocolError:
    return ProtocolError(
        "too_many_runs",
        f"Your organization already has {active} active runs, the limit; wait for one to finish.",
    )


@dataclass(frozen=True, slots=True)
class _RunRequest:
    content: str
    agent_mode: bool
    max_steps: int
    tools: tuple[str, ...] | None
    style: Style
    client_id: str | None = None
    origin: Literal["chat", "retry", "continue"] = "chat"
    client_tools: tuple[ToolSpec, ...] = ()


class _RunSink:
    """EventSink of one run: frames, status changes, then delivery, via the LiveSession."""

    def __init__(self, live: LiveSession, run_id: str) -> None:
        self._live = live
        self._run_id = run_id

    async def emit(self, event: AgentEvent) -> None:
        frame = event_frame(event, self._live.session_id, self._run_id, now_ms())
        if isinstance(event, InputRequested):
            pending = {
                "question": event.question,
                "tool_call_id": event.call_id,
                "step": event.step,
                "expires_at": event.expires_at,
            }
            await self._live.publish(
                [frame], status="awaiting_input", pending_input=pending, run_id=self._run_id
            )
        elif isinstance(event, ApprovalRequested):
            pending = {
                "tool_name": event.name,
                "arguments": event.arguments,
                "tool_call_id": event.call_id,
                "step": event.step,
                "expires_at": event.expires_at,
            }
            await self._live.publish(
                [frame], status="awaiting_approval", pending_approval=pending, run_id=self._run_id
            )
        elif isinstance(event, _LAST):
            await self._live.publish([frame])
        else:  # stored in order with the run's next awaited write (its messages, its end)
            await self._live.publish_streamed([frame])

    async def emit_all(self, events: Sequence[AgentEvent]) -> None:
        session, run, now = self._live.session_id, self._run_id, now_ms()
        await self._live.publish([event_frame(e, session, run, now) for e in events])

    async def append(self, messages: Sequence[Message]) -> None:
        await self._live.save_messages(messages)


class SessionHub:
    """Own every live session, every run, and the per-tenant run limit."""

    def __init__(
        self,
        *,
        store: Store,
        model: ChatModel,
        tools: Toolbox,
        tool_names: Sequence[str],
        prompts: PromptProvider,
        settings: AgentSettings,
        budget: Budget | None = None,
        context: ContextWindow | None = None,
        research: Search | None = None,
        run_lease_s: float = 30.0,
        tools_for: Callable[[str], Sequence[str]] | None = None,
        needs_approval: Callable[[str], bool] | None = None,
        approval_timeout_s: float = 300.0,
        model_name: str = "",
        poll_interval_s: float = 0.05,
    ) -> None:
        self._store = store
        self.session_defaults: dict[str, Any] = {  # in every `session` frame
            "model": model_name,
            "defaults": {
                "agent_mode": settings.default_mode,
                "max_steps": settings.default_max_steps,
                "max_steps_limit": settings.max_steps_limit,
                "style": settings.style,
            },
        }
        self._model = model
        self._tools = tools
        self._tool_names = tuple(tool_names)
        # The tools a tenant may use now (MCP servers come and go); default: tool_names.
        self._tools_for = tools_for or (lambda tenant: self._tool_names)
        self._needs_approval = needs_approval
        self._approval_timeout_s = approval_timeout_s
        self._prompts = prompts
        self._settings = settings
        self._budget = budget or Budget()
        self._context_window = context
        self._research = research
        self._lease_ms = int(run_lease_s * 1000)
        self._needs_repair: dict[str, UnfinishedRun] = {}  # runs that ended while storage failed
        self._upkeep: asyncio.Task[None] | None = None
        self._tenant_metrics: defaultdict[str, Metrics] = defaultdict(Metrics)
        self._live: dict[str, LiveSession] = {}
        self._active: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()
        self._emptied = asyncio.Event()
        # Shared store: follow other processes' runs and take controls for ours (relay.py).
        self._relay = (
            StoreRelay(store, self._live, remote.apply_control, poll_interval_s)
            if store.shared
            else None
        )

    # -- sessions ----------------------------------------------------------------------------

    async def open(
        self, scope: Scope, session_id: str | None, *, create: bool = False
    ) -> tuple[LiveSession, bool]:
        """Return (live session, resumed). A new session is made when `session_id` is None,
        or (`create`, for AG-UI's client-chosen thread ids) when no session of the caller has
        that id; the caller must then `ensure_stored` it, which fails on another's id.

        A new session is stored with its first `chat`; until then it lives only while a
        connection holds it, so page loads that never chat leave nothing behind.
        Raise ProtocolError("session_not_found") for an unknown or foreign id.
        """
        if session_id is None or (create and await self._unknown(scope, session_id)):
            now = now_ms()
            record = SessionRecord(
                session_id or uuid.uuid4().hex,
                scope.tenant_id,
                scope.user_id,
                "idle",
                "",
                now,
                now,
                0,
            )
            live = self._live[record.session_id] = self._new_live(record, stored=False)
            self._emptied.clear()
            return live, False
        repair = self._needs_repair.get(session_id)
        if repair is not None and repair.scope == scope and session_id not in self._live:
            await self._repair(repair)  # the store may be back: settle the run first
        live_or_none = self._live.get(session_id)
        if live_or_none is None:
            stored = await self._store.get_session(scope, session_id)
            live_or_none = self._live.get(session_id)  # another connection may have won
            if live_or_none is None and stored is not None:
                live_or_none = self._live[session_id] = self._new_live(stored)
                self._emptied.clear()
                if stored.status == "awaiting_approval" and self._store.shared:
                    await remote.find_pending_approval(self._store, live_or_none)
        if live_or_none is None or live_or_none.scope != scope:
            raise ProtocolError("session_not_found", "There is no such session.")
        return live_or_none, True

    async def _unknown(self, scope: Scope, session_id: str) -> bool:
        """No session of that id, neither in memory nor (for this caller) in the store."""
        if session_id in self._live:
            return False
        stored = await self._store.get_session(scope, session_id)
        return stored is None and session_id not in self._live  # nobody made it meanwhile

    def _new_live(self, record: SessionRecord, *, stored: bool = True) -> LiveSession:
        return LiveSession(record, self._store, stored=stored, lease_ms=self._lease_ms)

    def active_runs(self, tenant: str | None = None) -> int:
        """Runs currently working, of one tenant or (None) across tenants."""
        return sum(self._active.values()) if tenant is None else self._active[tenant]

    def run_active(self, session_id: str) -> bool:
        """True while a run of this session is working in this process."""
        live = self._live.get(session_id)
        return live is not None and live.run is not None

    def close_watchers(self, session_id: str, code: int) -> None:
        """Close every connection watching the session (e.g. it was deleted) with `code`."""
        live = self._live.get(session_id)
        for subscriber in list(live.subscribers if live is not None else ()):
            subscriber.finish(code)

    def live_count(self, tenant: str | None = None) -> int:
        """Sessions held in memory (watched or running), of one tenant or (None) of all."""
        if tenant is None:
            return len(self._live)
        return sum(1 for live in self._live.values() if live.scope.tenant_id == tenant)

    def metrics(self, tenant: str | None = None) -> Metrics:
        """Run counters (GET /metrics) of one tenant, or (None) summed over all tenants."""
        if tenant is not None:
            return Metrics(self._tenant_metrics.get(tenant, {}))
        total = Metrics()
        for counters in self._tenant_metrics.values():
            total.update(counters)
        return total

    async def wait_empty(self) -> None:
        """Return once no session is held in memory (leak checks, tests)."""
        while self._live:
            self._emptied.clear()
            await self._emptied.wait()

    def release(self, live: LiveSession) -> None:
        """Forget the session when nobody watches it and no run works on it."""
        if live.idle and self._live.get(live.session_id) is live:
            del self._live[live.session_id]
            if not self._live:
                self._emptied.set()

    # -- runs --------------------------------------------------------------------------------

    async def start_run(
        self,
        live: LiveSession,
        frame: ChatFrame,
        origin: Literal["chat", "retry", "continue"] = "chat",
        client_tools: Sequence[ToolSpec] = (),
    ) -> str:
        """Start a run for `frame`; raise ProtocolError when the frame cannot start one now.
        `client_tools` (AG-UI's frontend tools) are offered to the model with ours.

        On a shared store the run first takes its slots there (one per session, and one of
        the tenant's `max_concurrent_runs_per_tenant`), so the limits hold across processes.
        """
        request = self._validate(frame, live.scope.tenant_id)
        taken = {*self._tools_for(live.scope.tenant_id), "request_input"}
        clash = ", ".join(repr(t.name) for t in client_tools if t.name in taken)
        if clash:
            raise ProtocolError("invalid_message", f"tools: {clash} is a server tool's name.")
        request = dataclasses.replace(
            request, client_id=frame.id, origin=origin, client_tools=tuple(client_tools)
        )
        if live.run is not None:  # a run elsewhere holds the session's slot in the store
            raise ProtocolError(
                "run_in_progress", "A run is already active in this session; stop it first."
            )
        tenant = live.scope.tenant_id
        limit = self._settings.max_concurrent_runs_per_tenant
        if self._active[tenant] >= limit:
            raise _too_many_runs(self._active[tenant])
        run = ActiveRun(uuid.uuid4().hex, RunControl())
        live.run = run
        self._active[tenant] += 1
        if self._store.shared:
            repair = self._needs_repair.get(live.session_id)
            if repair is not None:  # the last run's end (and slot) never reached the store
                await self._repair(repair)
            refused: str | None = "failed"  # until the store answers
            try:
                refused = await self._store.take_run_slot(
                    live.scope, live.session_id, run.run_id, limit, now_ms()
                )
            except StorageError as exc:  # the run's first write fails too and ends it with
                log.warning("run slots unavailable: %s", exc)  # storage_error, as it should
                refused = None
            finally:
                if refused is not None:
                    live.run = None
                    self._active[tenant] -= 1
            if refused == "run_in_progress":
                raise ProtocolError(
                    "run_in_progress", "A run is already active in this session; stop it first."
                )
            if refused is not None:
                raise _too_many_runs(limit)
        task = asyncio.create_task(self._drive(live, run, request), name=f"run-{run.run_id}")
        run.task = task
        run.control.attach(task)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run.run_id

    async def rerun(self, live: LiveSession, frame: AgentControlFrame) -> str:
        """`retry`: run the session's last user message again (after an error, a stop, or to
        regenerate an answer); `continue`: go on after a run that hit its step limit or budget.
        """
        if live.run is not None:
            raise ProtocolError(
                "run_in_progress", "A run is already active in this session; stop it first."
            )
        last = await self._last_run(live)
        if last is None:
            raise ProtocolError("nothing_to_retry", "This session has no earlier message to run.")
        content, agent_mode, ending = last
        if frame.action == "continue":
            if ending not in ("max_steps", "budget"):
                raise ProtocolError(
                    "nothing_to_retry",
                    "Only a run that stopped at its step limit or budget can be continued.",
                )
            content, agent_mode = _CONTINUE, True
        chat = ChatFrame(
            type="chat",
            content=content,
            agent_mode=agent_mode,
            agent_max_steps=frame.agent_max_steps,
            id=frame.id,
        )
        return await self.start_run(
            live, chat, "retry" if frame.action == "retry" else "continue"
        )

    async def _last_run(self, live: LiveSession) -> tuple[str, bool, str] | None:
        """(the last run's user message, its mode, how it ended), from the stored events;
        older sessions without `agent_user_message` events fall back to the messages."""
        tail = await self._store.read_events(
            live.scope, live.session_id, max(0, live.last_seq - _TAIL_EVENTS)
        )
        frames = [orjson.loads(raw) for raw in tail]
        ending = ""
        for frame in reversed(frames):
            kind = frame.get("update_type") or frame.get("type")
            if not ending and kind in ("agent_completion", "agent_stopped", "error"):
                ending = str(frame.get("stop_reason") or frame.get("reason") or kind)
            if kind == "agent_user_message":
                return str(frame["content"]), bool(frame.get("agent_mode", True)), ending
        history = await self._store.load_history(live.scope, live.session_id)
        for message in reversed(history):
            if message.role == "user" and message.run_id:
                return message.content, self._settings.default_mode, ending
        return None

    async def stop(self, live: LiveSession) -> None:
        """Stop the session's run, here or (shared store) in the process that owns it."""
        if live.run is None:
            await remote.stop_elsewhere(self._store, live)
            return
        live.run.control.request_stop("user")

    async def answer(self, live: LiveSession, content: str) -> None:
        """Answer the pending question, here or in the process that runs it; of two answers
        to one question, from any processes, exactly one is accepted."""
        run = live.run
        if run is None:
            await remote.answer_elsewhere(self._store, live, content)
            return
        question = run.control.pending
        if question is None:
            raise remote.not_awaiting_input()
        payload = {"content": content}
        key = f"answer:{question.tool_call_id}"
        if not await remote.claim(self._store, live, run, key, "answer", payload):
            raise remote.not_awaiting_input()
        if not run.control.answer(content):
            raise remote.not_awaiting_input()
        await live.publish([], status="running", run_id=run.run_id)

    async def decide(
        self, live: LiveSession, tool_call_id: str, approve: bool, reason: str | None
    ) -> None:
        """Approve or deny the call waiting for approval; ProtocolError says what is wrong."""
        run = live.run
        payload = {"tool_call_id": tool_call_id, "approve": approve, "reason": reason or ""}
        if run is None:
            await remote.decide_elsewhere(self._store, live, payload)
            return
        if self._store.shared:
            remote.check_decision(run, tool_call_id)
            key = f"decision:{tool_call_id}"
            if not await remote.claim(self._store, live, run, key, "decision", payload):
                raise remote.already_decided(tool_call_id)
        try:
            run.control.decide(tool_call_id, Decision(approve, reason or ""))
        except DecisionError as exc:
            raise ProtocolError(exc.code, exc.message) from None  # type: ignore[arg-type]
        await live.publish([], status="running", run_id=run.run_id)

    def _validate(self, frame: ChatFrame, tenant_id: str) -> _RunRequest:
        limit = self._settings.max_steps_limit
        steps = frame.agent_max_steps or self._settings.default_max_steps
        if steps > limit:
            raise ProtocolError(
                "invalid_message", f"agent_max_steps: must be at most {limit} (got {steps})."
            )
        tools = None if frame.tools is None else tuple(frame.tools)
        available = self._tools_for(tenant_id)
        unknown = [t for t in tools or () if t not in available]
        if unknown:
            names = ", ".join(repr(t) for t in unknown)
            enabled = ", ".join(available) or "none"
            raise ProtocolError(
                "invalid_message",
                f"tools: unknown tool{'s' if len(unknown) > 1 else ''} {names} "
                f"(enabled: {enabled}).",
            )
        mode = self._settings.default_mode if frame.agent_mode is None else frame.agent_mode
        return _RunRequest(
            frame.content, mode, steps, tools, frame.agent_style or self._settings.style
        )

    async def _drive(self, live: LiveSession, run: ActiveRun, request: _RunRequest) -> None:
        limits = RunLimits(
            max_steps=request.max_steps,
            request_input_timeout_s=self._settings.request_input_timeout_s,
            tool_timeout_s=self._settings.tool_timeout_s,
            chat_tool_rounds=self._settings.chat_tool_rounds,
            budget=self._budget,
            plan_every=self._settings.plan_every,
            style=request.style,
            control_retries=self._settings.control_retries,
            max_verifications=self._settings.max_verifications,
            approval_timeout_s=self._approval_timeout_s,
        )
        ctx = self._context(live, run, limits, request.tools, request.client_tools)
        sink = ctx.sink
        limit = asyncio.get_running_loop().call_later(
            self._settings.run_timeout_s, run.control.request_stop, "run_timeout"
        )
        self._tenant_metrics[live.scope.tenant_id][Metric.RUNS_STARTED] += 1
        try:
            repair = self._needs_repair.get(live.session_id)
            if repair is not None:  # the last run's end was never stored: close it first
                await self._repair(repair)
            await self._begin(live, run, request)
            await sink.emit(
                UserMessage(request.content, request.agent_mode, request.origin, request.client_id)
            )
            history = await self._store.load_history(live.scope, live.session_id)
            runner = run_agent if request.agent_mode else run_chat
            await runner(ctx, history)
        except asyncio.CancelledError:
            reason = run.control.stop_reason
            if reason is None:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            await sink.emit(RunStopped(0, reason, Usage().as_dict()))  # before the loop began
        except ModelError as exc:
            await self._fail(live, run, "llm_error", str(exc))
        except StorageError as exc:
            log.error("storage failed in session %s: %s", live.session_id, exc)
            await self._fail(live, run, "storage_error", "Your conversation could not be saved.")
        except Exception:
            log.exception("run %s failed", run.run_id)
            await self._fail(live, run, "internal_error", "Something went wrong on the server.")
        finally:
            limit.cancel()
            run.control.detach()
            await self._finish(live, run)

    def _context(
        self,
        live: LiveSession,
        run: ActiveRun,
        limits: RunLimits,
        tools: tuple[str, ...] | None,
        client_tools: tuple[ToolSpec, ...] = (),
    ) -> RunContext:
        sink = _RunSink(live, run.run_id)
        names = tools if tools is not None else self._tools_for(live.scope.tenant_id)
        toolbox: Toolbox = self._tools
        if client_tools:
            toolbox = ClientToolbox(self._tools, client_tools)
            names = (*names, *(t.name for t in client_tools))
        return RunContext(
            session_id=live.session_id,
            run_id=run.run_id,
            tenant_id=live.scope.tenant_id,
            user_id=live.scope.user_id,
            model=self._model,
            tools=toolbox,
            prompts=self._prompts,
            sink=sink,
            transcript=sink,
            control=run.control,
            limits=limits,
            tool_names=names,
            metrics=self._tenant_metrics[live.scope.tenant_id],
            context=self._context_window,
            research=self._research if self._settings.pre_task_research else None,
            needs_approval=self._needs_approval,
        )

    async def _begin(self, live: LiveSession, run: ActiveRun, request: _RunRequest) -> None:
        await live.ensure_stored()
        if not live.title:
            await live.set_title(" ".join(request.content.split())[:80])
        await live.save_messages([Message("user", request.content, run_id=run.run_id)])
        await live.publish([], status="running", run_id=run.run_id)

    async def _fail(self, live: LiveSession, run: ActiveRun, code: Any, message: str) -> None:
        self._tenant_metrics[live.scope.tenant_id][Metric.run_failed(code)] += 1
        frame = {
            **run_frame("error", live.session_id, run.run_id, now_ms()),
            **error_frame(code, message),
        }
        try:
            await live.publish([frame])
        except StorageError:
            frame.pop("seq")
            live.deliver_unstored(orjson.dumps(frame).decode())

    async def _finish(self, live: LiveSession, run: ActiveRun) -> None:
        """Send the run's one `response_complete`; the session turns idle (and releases the
        run) at that moment, so the session is never seen without a run but still running."""
        self._active[live.scope.tenant_id] -= 1
        frame = run_frame("response_complete", live.session_id, run.run_id, now_ms())
        try:
            await live.publish([frame], status="idle")
        except StorageError:
            frame.pop("seq")
            live.status, live.pending_input = "idle", None
            if live.run is run:
                live.run = None
            live.deliver_unstored(orjson.dumps(frame).decode())
            # The store still shows the run as active: close it there once it is back.
            self._needs_repair[live.session_id] = UnfinishedRun(
                live.scope, live.session_id, run.run_id
            )
        finally:
            if live.run is run:  # a chat sent on receiving response_complete may own it now
                live.run = None
            self.release(live)
        if self._store.shared:
            try:
                await shielded(self._release_run(live.session_id, run.run_id))
            except StorageError as exc:
                log.warning("controls of run %s stay stored: %s", run.run_id, exc)

    # -- lifecycle ---------------------------------------------------------------------------

    async def shutdown(self, timeout_s: float) -> None:
        """Stop every run ("shutdown"), wait (bounded) until each has stored its stop, then
        let every connection send what it has queued and close with 1001 (going away)."""
        for live in list(self._live.values()):
            if live.run is not None:
                live.run.control.request_stop("shutdown")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)
        closing = []
        for live in list(self._live.values()):
            for subscriber in list(live.subscribers):
                subscriber.finish(GOING_AWAY)
                closing.append(asyncio.ensure_future(subscriber.wait_closed()))
        if closing:
            _, late = await asyncio.wait(closing, timeout=max(0.1, deadline - loop.time()))
            for waiter in late:
                waiter.cancel()

    async def recover(self) -> int:
        """Close runs a dead process left open: `agent_stopped` ("interrupted"), then
        `response_complete`, with the conversation repaired. Return how many.

        A store used by one process (SQLite) closes every run it shows active at startup; on
        a shared store (MongoDB) only runs whose lease expired are claimed and closed.
        """
        now = now_ms()
        unfinished = await self._store.unfinished_runs(now if self._store.shared else None)
        closed = 0
        for item in unfinished:
            held = self._live.get(item.session_id)
            if held is not None and (held.run is not None or not self._store.shared):
                continue  # ours and alive
            if self._store.shared and not await self._store.claim_run(
                item, now, now + self._lease_ms
            ):
                continue  # another process took it
            await shielded(self._recover_one(item, followed=True))
            closed += 1
        return closed

    def start_upkeep(self) -> None:
        """Renew this process's run leases, close expired runs of dead processes (shared
        stores), and settle runs that ended while the store was down."""
        if self._upkeep is None:
            self._upkeep = asyncio.create_task(self._upkeep_forever(), name="session-upkeep")
        if self._relay is not None:
            self._relay.start()

    async def stop_upkeep(self) -> None:
        if self._relay is not None:
            await self._relay.stop()
        if self._upkeep is not None:
            self._upkeep.cancel()
            await asyncio.gather(self._upkeep, return_exceptions=True)
            self._upkeep = None

    async def _upkeep_forever(self) -> None:
        period = max(0.2, self._lease_ms / 3000)
        ticks = 0
        while True:
            await asyncio.sleep(period)  # a timer, not synchronization: leases are time-based
            ticks += 1
            try:
                active = [lv.session_id for lv in self._live.values() if lv.run is not None]
                await self._store.renew_leases(active, now_ms() + self._lease_ms)
                for item in list(self._needs_repair.values()):
                    await self._repair(item)
                if self._store.shared and ticks % 3 == 0:
                    await self.recover()
            except StorageError as exc:
                log.warning("session upkeep failed, will retry: %s", exc)

    async def _repair(self, item: UnfinishedRun) -> None:
        """Close a run whose end could not be stored; keep it for later if the store fails."""
        try:
            await shielded(self._recover_one(item))
        except StorageError:
            return
        self._needs_repair.pop(item.session_id, None)

    async def _release_run(self, session_id: str, run_id: str) -> None:
        await self._store.drop_controls(session_id, run_id)
        await self._store.release_run_slot(session_id, run_id)

    async def _recover_one(self, item: UnfinishedRun, *, followed: bool = False) -> None:
        """Close the run in the store. `followed`: it died in another process, so watchers
        here have not seen it end and get the closing events; else they saw it end live."""
        record = await self._store.get_session(item.scope, item.session_id)
        if record is None:
            return
        live = self._new_live(record)  # detached: watchers already saw this run end live
        run = ActiveRun(item.run_id or uuid.uuid4().hex, RunControl())
        ctx = self._context(live, run, RunLimits(), None)
        history = await self._store.load_history(item.scope, item.session_id)
        recorder = RunRecorder(ctx, history)
        recorder.step, recorder.open_events = await self._last_step(live, run.run_id)
        await recorder.record_stop("interrupted")
        frame = run_frame("response_complete", live.session_id, run.run_id, now_ms())
        await live.publish([frame], status="idle")
        if self._store.shared:
            await self._release_run(item.session_id, run.run_id)
        held = self._live.get(item.session_id)
        if followed and held is not None and self._relay is not None and held.run is None:
            await self._relay.poll()  # its watchers follow the closing events now
        elif held is not None:  # keep the in-memory view in step with what was stored
            held.last_seq = max(held.last_seq, live.last_seq)

    async def _last_step(self, live: LiveSession, run_id: str) -> tuple[int, dict[str, str]]:
        """The last step the dead run started, and its tool calls that never ended."""
        frames = await self._store.read_events(live.scope, live.session_id, 0)
        step = 0
        open_calls: dict[str, str] = {}
        for raw in frames:
            frame = orjson.loads(raw)
            if frame.get("run_id") != run_id:
                continue
            step = max(step, int(frame.get("step", 0) or 0))
            if frame["type"] == "tool_start":
                open_calls[frame["tool_call_id"]] = frame["tool_name"]
            elif frame["type"] in ("tool_complete", "tool_error"):
                open_calls.pop(frame["tool_call_id"], None)
        return step, open_calls
