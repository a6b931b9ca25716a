"""RunDriver: start each run as a task and see it to its one `response_complete`.

A run is a task. Its RunControl (stop Event, input queue) is what `agent_control` and
`agent_user_input` act on; its sink and transcript write through the LiveSession, so every
event is stored before any socket sees it. Whatever way a run ends (finished, stopped,
failed), the driver sends exactly one `response_complete` as its last event.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agent.chat import run_chat
from agent.control import RunControl
from agent.errors import ModelError, StorageError
from agent.events import AgentEvent, RunCompleted, RunStopped, UserMessage
from agent.loop import run_agent
from agent.messages import Message
from agent.metrics import Metric
from agent.ports import ToolSpec
from agent.run import RunLimits
from agent.stopping import stop_recorded
from server.events import Event, RunEnded, RunFailed, ServerEvent
from server.live import ActiveRun, LiveSession, now_ms, shielded
from server.protocol import (
    AgentControlFrame,
    ChatFrame,
    ProtocolError,
)
from server.run_context import BuildContext
from server.run_quota import RunQuota, run_in_progress
from server.run_recovery import Repairs
from server.run_request import Origin, RunRequest, read_request, rerun_request
from server.session_registry import RECONNECT, SessionRegistry
from server.settings import AgentSettings
from server.storage.base import PartlyStored, Scope, SessionStatus, Store, UnfinishedRun
from server.storage.frames import read_decoded
from server.storage.outage import StoreUnavailable, outage_of
from server.storage.runs import RunTree
from server.tenant_metrics import TenantMetrics
from server.titles import SessionTitles, first_words
from server.versions import history_on_path, load_tree, on_path

__all__ = ["RunDriver"]

log = logging.getLogger(__name__)

_TAKEN_OVER = (
    ": another process took it over when its lease ran out (this process was paused, or cut "
    "off from the store, for longer than storage.run_lease_s)"
)


def storage_unavailable() -> ProtocolError:
    return ProtocolError(
        "storage_unavailable",
        "The conversation store is unavailable; nothing was started. Try again in a moment.",
    )


def _ending(event: AgentEvent | ServerEvent) -> str:
    """How a run ended, as `retry` and `continue` read it: its completion's or stop's reason,
    or "error"; "" for an event that ends no run."""
    if isinstance(event, RunCompleted):
        return event.stop_reason
    if isinstance(event, RunStopped):
        return event.reason
    return "error" if isinstance(event, RunFailed) else ""


def _log_end(run_id: str, outcome: str, why: str, took_s: float) -> None:
    """One line as a run ends: how, after how long; a failure at warning, with its reason."""
    say = log.warning if outcome == "failed" else log.info
    say("run %s %s after %.1f s%s", run_id, outcome, took_s, why)


_TAIL_EVENTS = 400  # how far back `retry`/`continue` look for the last run's message
_CONTINUE = "Please continue the task from where you stopped."


class RunDriver:
    """Start, retry and continue runs; end each one exactly once, however it ends."""

    def __init__(
        self,
        *,
        store: Store,
        registry: SessionRegistry,
        quota: RunQuota,
        repairs: Repairs,
        context: BuildContext,
        metrics: TenantMetrics,
        settings: AgentSettings,
        tools_for: Callable[[str], Sequence[str]],
        limits: RunLimits,
        titles: SessionTitles | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._quota = quota
        self._repairs = repairs
        self._context = context
        self._metrics = metrics
        self._settings = settings
        self._tools_for = tools_for  # the tools a tenant may use now (MCP servers come and go)
        self._limits = limits  # the configured ones; each run's steps and style: its request's
        self._tasks: set[asyncio.Task[None]] = set()
        self._titles = titles  # None: sessions keep the first words of their first message

    async def start_run(
        self,
        live: LiveSession,
        frame: ChatFrame,
        origin: Origin = "chat",
        client_tools: Sequence[ToolSpec] = (),
    ) -> str:
        """Start a run for `frame`; raise ProtocolError when the frame cannot start one now.
        `client_tools` (AG-UI's frontend tools) are offered to the model with ours.

        On a shared store the run first takes its slots there (one per session, and one of
        the tenant's `max_concurrent_runs_per_tenant`), so the limits hold across processes.
        """
        available = self._tools_for(live.scope.tenant_id)
        request = read_request(frame, self._settings, available, origin, client_tools)
        return await self._start(live, request)

    async def _start(self, live: LiveSession, request: RunRequest) -> str:
        """Start a run for `request`, checked already; see `start_run`."""
        if live.run is not None:  # a run elsewhere holds the session's slot in the store
            raise run_in_progress()
        outage = outage_of(self._store)
        if outage is not None and outage.exhausted:  # it would only wait to fail
            raise storage_unavailable()
        if request.replaces is not None:
            await self._parent(live, request.replaces)  # refused now, not once started
            if live.run is not None:  # a chat of another tab started meanwhile
                raise run_in_progress()
        self._quota.reserve(live.scope.tenant_id)
        run = ActiveRun(uuid.uuid4().hex, RunControl(), content=request.content)
        live.claim_run(run)  # before any wait, so a second chat meanwhile is refused
        if self._store.shared:
            try:
                await self._take_slot(live, run)
            except StoreUnavailable:  # nothing started: the client may simply ask again
                live.release_run(run)
                raise storage_unavailable() from None
            except BaseException:  # refused, failed, or the connection went away meanwhile
                live.release_run(run)
                raise
        task = asyncio.create_task(self._drive(live, run, request), name=f"run-{run.run_id}")
        run.started(task)  # the run attaches itself to its control when it starts (see _drive)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run.run_id

    def check_run(self, scope: Scope, frame: ChatFrame, client_tools: Sequence[ToolSpec]) -> None:
        """Refuse `frame` as `start_run` would for what it asks (not for the session's state)."""
        read_request(frame, self._settings, self._tools_for(scope.tenant_id), "chat", client_tools)

    async def _take_slot(self, live: LiveSession, run: ActiveRun) -> None:
        """Settle the session's last run if its end never reached the store, then take the
        run's slots there; on any failure the reservation is given back."""
        repair = self._repairs.pending(live.session_id)
        if repair is not None:  # the last run's end (and slot) never reached the store
            try:
                await self._repairs.repair(repair)
            except BaseException:
                self._quota.release(live.scope.tenant_id)
                raise
        await self._quota.take_slot(live.scope, live.session_id, run.run_id)  # releases too

    async def rerun(self, live: LiveSession, frame: AgentControlFrame) -> str:
        """`retry`: run the session's last user message again (after an error, a stop, or to
        regenerate an answer); `continue`: go on after a run that hit its step limit or budget.
        """
        if live.run is not None:
            raise run_in_progress()
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
        origin: Origin = "retry" if frame.action == "retry" else "continue"
        request = rerun_request(
            content, agent_mode, frame.agent_max_steps, frame.id, origin, self._settings
        )
        return await self._start(live, request)

    async def stop_all(self, timeout_s: float) -> None:
        """Stop every run ("shutdown") and wait, at most `timeout_s`, until each has ended."""
        for live in list(self._registry.sessions.values()):
            if live.run is not None:
                live.run.control.request_stop("shutdown")
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)
        if self._titles is not None:
            await self._titles.close()

    async def _last_run(self, live: LiveSession) -> tuple[str, bool, str] | None:
        """(the shown path's last user message, its mode, how it ended), from the stored
        events; older sessions without `agent_user_message` events fall back to the messages."""
        after = max(0, live.last_seq - _TAIL_EVENTS)
        tail = await read_decoded(self._store, live.scope, live.session_id, after)
        tree = await load_tree(self._store, live.scope, live.session_id)
        events = on_path(tree, tail, lambda e: e.run_id)
        ending = ""
        for event in reversed(events):
            happened = event.event
            if not ending:
                ending = _ending(happened)
            if isinstance(happened, UserMessage):
                return happened.content, happened.agent_mode, ending
        history = await self._store.load_history(live.scope, live.session_id)
        for message in reversed(history):
            if message.role == "user" and message.run_id:
                return message.content, self._settings.default_mode, ending
        return None

    async def _drive(self, live: LiveSession, run: ActiveRun, request: RunRequest) -> None:
        """Run the request to its end; whatever happens, the run ends with `_finish`."""
        limit = asyncio.get_running_loop().call_later(
            self._settings.run_timeout_s, run.control.request_stop, "run_timeout"
        )
        self._metrics.of(live.scope.tenant_id)[Metric.RUNS_STARTED] += 1
        started = time.monotonic()
        log.info(
            "run %s started in session %s (%s mode, %s)",
            run.run_id,
            live.session_id,
            "agent" if request.agent_mode else "chat",
            request.origin,
        )
        outcome, why = "ended", ""
        first = False  # the session's first run: its answer names the session
        try:
            limits = replace(self._limits, max_steps=request.max_steps, style=request.style)
            ctx = self._context(live, run, limits, request.tools, request.client_tools)
            sink = ctx.sink
            async with stop_recorded(ctx):  # also a stop before the loop began
                repair = self._repairs.pending(live.session_id)
                if repair is not None:  # the last run's end was never stored: close it first
                    await self._repairs.repair(repair)
                first = not live.title  # untitled: no run before this one (AG-UI threads too)
                known, parent = await self._begin(live, run, request)
                await sink.emit(
                    UserMessage(
                        request.content,
                        request.agent_mode,
                        request.origin,
                        request.client_id,
                        parent,
                        request.replaces,
                        isinstance(self._store, RunTree),
                    )
                )
                # Only now may a stop cancel the run: the user's message is stored and shown
                # first, and a stop sent with the chat (before this task ran) lands here.
                if (task := asyncio.current_task()) is not None:
                    run.control.attach(task)
                if run.control.stop_reason is not None:
                    await asyncio.sleep(0)  # it lands here, before any step (a new session
                    # has its history at hand, and the loop's first wait is its model call)
                history = known or await history_on_path(self._store, live.scope, live.session_id)
                runner = run_agent if request.agent_mode else run_chat
                await runner(ctx, history)
            reason = run.control.stop_reason
            outcome = f"stopped ({reason})" if reason is not None else "ended"
        except ModelError as exc:
            outcome, why = "failed", f": {exc}"  # the model server's reason, the key masked
            await self._fail(live, run, "llm_error", str(exc), exc.usage)
        except StorageError as exc:
            if not live.taken_over:  # else there is nothing to tell the store: see finally
                log.error("storage failed in session %s: %s", live.session_id, exc)
                outcome, why = "failed", ": storage_error"
                await self._fail(
                    live, run, "storage_error", "Your conversation could not be saved."
                )
        except Exception:
            log.exception("run %s failed", run.run_id)
            outcome, why = "failed", ": internal_error"
            await self._fail(live, run, "internal_error", "Something went wrong on the server.")
        finally:
            limit.cancel()
            run.control.detach()
            await self._finish(live, run)
            if live.taken_over:
                outcome, why = "failed", _TAKEN_OVER
            _log_end(run.run_id, outcome, why, time.monotonic() - started)
        if first and outcome == "ended" and self._titles is not None:
            self._titles.after_first_run(live, run.run_id)

    async def _begin(
        self, live: LiveSession, run: ActiveRun, request: RunRequest
    ) -> tuple[list[Message], str | None]:
        """Store the session (on its first run), the run's place in the run tree, the user's
        message and the status. Returns the conversation when it is known without reading it
        back (in a session this run created, the one message it just saved), and the run's
        parent: the run it follows on the conversation's path."""
        new = not live.stored
        title = first_words(request.content)
        parent = None if new else await self._parent(live, request.replaces)
        await live.ensure_stored(title)  # a new session is stored with its title: one write
        if not live.title:
            await live.set_title(title)
        if isinstance(self._store, RunTree):  # shown from now: the model reads its path
            await self._store.add_run(live.scope, live.session_id, run.run_id, parent, now_ms())
        message = Message("user", request.content, run_id=run.run_id)
        await live.save_messages([message])
        await live.publish([], status=SessionStatus.RUNNING, run_id=run.run_id)
        return ([message] if new else []), parent

    async def _parent(self, live: LiveSession, replaces: str | None) -> str | None:
        """The parent of a run that `replaces` a run of the shown path (its parent), or
        follows it (its last run); ProtocolError `unknown_run` when `replaces` is not shown."""
        tree = await load_tree(self._store, live.scope, live.session_id)
        if replaces is None:
            return tree.leaf()
        if replaces not in tree.path():
            raise ProtocolError(
                "unknown_run",
                f"replaces: {replaces!r} is not a run shown in this conversation; "
                "only a shown version of a turn can be replaced.",
            )
        return tree.nodes[replaces].parent_run_id

    async def _fail(
        self,
        live: LiveSession,
        run: ActiveRun,
        code: Any,
        message: str,
        usage: dict[str, float | int] | None = None,
    ) -> None:
        """Send the run's `error`; with the run's `usage` so far when the loop reported it (the
        calls before a model failure were paid for, and the session's usage counts them)."""
        self._metrics.of(live.scope.tenant_id)[Metric.run_failed(code)] += 1
        failed = Event(RunFailed(code, message, usage), live.session_id, run.run_id, now_ms())
        try:
            await live.publish([failed])
        except StorageError:
            run.told_unstored(failed)  # stored, with its `seq`, once the store is back
            live.deliver_unstored(failed)

    async def _finish(self, live: LiveSession, run: ActiveRun) -> None:
        """Send the run's one `response_complete`; the session turns idle (and releases the
        run) at that moment, so the session is never seen without a run but still running."""
        self._quota.release(live.scope.tenant_id)
        if live.taken_over:  # the process that took it over stored its end
            live.release_run(run)
            self._registry.forget(live.session_id, RECONNECT)  # its watchers read the store
            return
        end = Event(RunEnded(), live.session_id, run.run_id, now_ms())
        ridden_out = False  # the store stayed away past the tolerance
        try:
            await live.publish([end], status=SessionStatus.IDLE)
        except StorageError as exc:
            log.warning(
                "session %s: the end of run %s could not be stored (closed once the store "
                "takes writes again): %s",
                live.session_id,
                run.run_id,
                exc,
            )
            live.ended_unstored(run)
            if not isinstance(exc, PartlyStored):  # not stored, so not sent: send it anyway
                live.deliver_unstored(end)
            # The store still shows the run as active: close it there once it is back.
            self._repairs.defer(UnfinishedRun(live.scope, live.session_id, run.run_id), run.told)
            ridden_out = isinstance(live.broken or exc, StoreUnavailable)
        finally:
            live.run_ended(run)  # a chat sent on receiving response_complete may own it now
            if ridden_out:
                # A write that timed out may have been stored after all, and the run's close
                # will be: its watchers resume from the store (`after_seq`), where nothing
                # is missing, rather than see a later event of the session after a gap.
                self._registry.forget(live.session_id, RECONNECT)
            else:
                live.mend()
                self._registry.release(live)
        if self._store.shared:
            try:
                await shielded(self._quota.free_slot(live.session_id, run.run_id))
            except StorageError as exc:
                log.warning("controls of run %s stay stored: %s", run.run_id, exc)
