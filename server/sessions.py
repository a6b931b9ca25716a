"""SessionHub: the one object the endpoints talk to about sessions and runs.

It wires the parts together and passes each call to the part that owns it:

- `SessionRegistry` (session_registry.py): the sessions held in memory;
- `RunDriver` (run_driver.py): starting, retrying and ending runs;
- `RunControls` (run_controls.py): stop, answer and approval decisions;
- `RunQuota` (run_quota.py): each tenant's concurrent-run limit;
- `RunRecovery` (run_recovery.py): runs left open by a dead process or a failed store;
- `TenantMetrics` (tenant_metrics.py): run counters per tenant;
- `StoredSessions` (stored_sessions.py): the stored sessions as the endpoints read them
  (`stored`), their only way to the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from agent.context import ContextWindow
from agent.metrics import Metrics
from agent.ports import ChatModel, PromptProvider, ToolSpec
from agent.run import Search
from agent.tools.catalog import ToolCatalog
from server import remote
from server.live import LiveSession
from server.protocol import AgentControlFrame, ChatFrame, ProtocolError
from server.relay import StoreRelay
from server.run_answers import AnswersToCome
from server.run_context import RunContexts
from server.run_controls import RunControls
from server.run_driver import RunDriver
from server.run_quota import RunQuota
from server.run_recovery import RunRecovery
from server.run_request import Origin
from server.session_registry import SessionRegistry
from server.settings import Settings
from server.storage.base import DeleteOutcome, Scope, Store
from server.storage_quota import StorageQuota
from server.stored_sessions import StoredSessions
from server.tenant_metrics import TenantMetrics
from server.titles import SessionTitles
from server.version_switch import select_version
from server.versions import load_tree

__all__ = ["SessionHub"]

GOING_AWAY = 1001
ABANDON_WAIT_S = 10.0  # how long a new message waits for the paused run it replaces to end


class SessionHub:
    """Own every live session, every run, and the per-tenant run limit."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        model: ChatModel,
        tools: ToolCatalog,
        prompts: PromptProvider,
        context: ContextWindow | None = None,
        research: Search | None = None,
    ) -> None:
        """`tools` offers each tenant its tools (MCP servers come and go); `context` bounds
        the prompt; `research` runs before a session's first task (agent.pre_task_research)."""
        agent, storage = settings.agent, settings.storage
        self.session_defaults: dict[str, Any] = {  # in every `session` frame
            "model": settings.llm.model,
            "defaults": {
                "agent_mode": agent.default_mode,
                "max_steps": agent.default_max_steps,
                "max_steps_limit": agent.max_steps_limit,
                "style": agent.style,
            },
        }
        self._store = store
        self.stored = StoredSessions(store)
        """The stored sessions, their messages and events: the endpoints' way to the store."""
        lease_ms = int(storage.run_lease_s * 1000)
        # The configured limits of every run; each run's steps and style come from its request.
        limits = agent.limits(
            budget=settings.budget, approval_timeout_s=settings.tools.approval_timeout_s
        )
        live: dict[str, LiveSession] = {}
        # Shared store: follow other processes' runs and take controls for ours (relay.py).
        self._relay = (
            StoreRelay(
                store,
                live,
                remote.apply_control,
                storage.poll_interval_s,
                gone=lambda sid, code: self._registry.forget(sid, code),  # made below
            )
            if store.shared
            else None
        )
        self._metrics = TenantMetrics()
        self._quota = RunQuota(
            store, agent.max_concurrent_runs_per_tenant, settings.run_starts_per_minute
        )
        contexts = RunContexts(
            model=model,
            tools=tools,
            tools_for=tools.known,
            prompts=prompts,
            metrics=self._metrics,
            context=context,
            research=research if agent.pre_task_research else None,
            needs_approval=tools.needs_approval,
        )
        self._recovery = RunRecovery(
            store=store,
            sessions=live,
            context=contexts.build,
            release_run=self._quota.free_slot,
            relay=self._relay,
            lease_ms=lease_ms,
            limits=limits,
        )
        self._registry = SessionRegistry(store, self._recovery, sessions=live, lease_ms=lease_ms)
        self._runs = RunDriver(
            store=store,
            registry=self._registry,
            quota=self._quota,
            repairs=self._recovery,
            context=contexts.build,
            metrics=self._metrics,
            settings=agent,
            tools_for=tools.known,
            limits=limits,
            titles=SessionTitles(store, model) if agent.session_titles else None,
        )
        self._controls = RunControls(store)
        self._storage = StorageQuota(store, storage.max_bytes_per_tenant)

    # -- sessions ----------------------------------------------------------------------------

    async def open(
        self, scope: Scope, session_id: str | None, *, create: bool = False
    ) -> tuple[LiveSession, bool]:
        """Return (live session, resumed); see SessionRegistry.open."""
        return await self._registry.open(scope, session_id, create=create)

    def release(self, live: LiveSession) -> None:
        """Forget the session when nobody watches it and no run works on it."""
        self._registry.release(live)

    @property
    def sessions(self) -> Mapping[str, LiveSession]:
        """The sessions held in memory, by id (read only; diagnostics)."""
        return self._registry.sessions

    def run_active(self, session_id: str) -> bool:
        """True while a run of this session is working in this process."""
        return self._registry.run_active(session_id)

    async def delete(self, scope: Scope, session_id: str, close_code: int) -> DeleteOutcome:
        """Delete an idle session (SessionRegistry.delete); once it is gone, forget it here
        and close its watchers with `close_code`. A chat for it meanwhile is refused
        (`run_in_progress`)."""
        outcome = await self._registry.delete(scope, session_id)
        if outcome == "deleted":
            self._registry.forget(session_id, close_code)
        return outcome

    def live_count(self, tenant: str | None = None) -> int:
        """Sessions held in memory (watched or running), of one tenant or (None) of all."""
        return self._registry.live_count(tenant)

    async def wait_empty(self) -> None:
        """Return once no session is held in memory (leak checks, tests)."""
        await self._registry.wait_empty()

    # -- runs --------------------------------------------------------------------------------

    async def start_run(
        self,
        live: LiveSession,
        frame: ChatFrame,
        origin: Origin = "chat",
        client_tools: Sequence[ToolSpec] = (),
    ) -> str:
        """Start a run for `frame`; see RunDriver.start_run. A tenant at her storage quota
        starts none (`check_storage`)."""
        self._refuse_if_deleting(live)
        await self._storage.check(live.scope)
        return await self._runs.start_run(live, frame, origin, client_tools)

    def check_run(self, scope: Scope, frame: ChatFrame, client_tools: Sequence[ToolSpec]) -> None:
        """Raise the ProtocolError `start_run` would raise for `frame` itself (its tools, its
        step cap), before anything is stored for it; see RunDriver.check_run."""
        self._runs.check_run(scope, frame, client_tools)

    async def rerun(self, live: LiveSession, frame: AgentControlFrame) -> str:
        """`retry` or `continue` the session's last run; see RunDriver.rerun."""
        self._refuse_if_deleting(live)
        await self._storage.check(live.scope)
        return await self._runs.rerun(live, frame)

    async def check_storage(self, scope: Scope) -> None:
        """Raise ProtocolError("storage_quota_exceeded") when the tenant's stored bytes have
        reached `storage.max_bytes_per_tenant` (server/storage_quota.py)."""
        await self._storage.check(scope)

    def _refuse_if_deleting(self, live: LiveSession) -> None:
        if self._registry.deleting(live.session_id):
            raise ProtocolError("run_in_progress", "This conversation is being deleted.")

    async def select_version(
        self, live: LiveSession, run_id: str, frame_id: str | None = None
    ) -> None:
        """Show another version of a turn (server/version_switch.py)."""
        self._refuse_if_deleting(live)
        await select_version(self._store, live, run_id, frame_id)

    async def active_path(self, live: LiveSession) -> list[str]:
        """The runs the session shows, first first (server/versions.py)."""
        if not live.stored:
            return []
        return (await load_tree(self._store, live.scope, live.session_id)).path()

    async def stop(self, live: LiveSession) -> None:
        """Stop the session's run, here or (shared store) in the process that owns it."""
        await self._controls.stop(live)

    async def abandon(self, live: LiveSession, timeout_s: float = ABANDON_WAIT_S) -> None:
        """Stop the session's run (paused on a question nobody will answer) and wait, at most
        `timeout_s`, until it has ended, so that a new one may start."""
        run = live.run
        if run is None:
            return
        await self.stop(live)
        if run.task is not None:
            await asyncio.wait({run.task}, timeout=timeout_s)

    async def answer(
        self, live: LiveSession, content: str, tool_call_id: str | None = None
    ) -> None:
        """Answer the pending question; see RunControls.answer."""
        await self._controls.answer(live, content, tool_call_id)

    def answer_when_asked(self, live: LiveSession, run_id: str, answers: dict[str, str]) -> None:
        """Answer the questions of run `run_id` named in `answers` (by call) as it asks them
        (server/run_answers.py); the session is held until then, or until the run ends."""
        AnswersToCome(live, run_id, answers, self.answer, self.release)

    async def decide(
        self, live: LiveSession, tool_call_id: str, approve: bool, reason: str | None
    ) -> None:
        """Approve or deny the call waiting for approval; ProtocolError says what is wrong."""
        await self._controls.decide(live, tool_call_id, approve, reason)

    def active_runs(self, tenant: str | None = None) -> int:
        """Runs currently working, of one tenant or (None) across tenants."""
        return self._quota.active_runs(tenant)

    def metrics(self, tenant: str | None = None) -> Metrics:
        """Run counters (GET /metrics) of one tenant, or (None) summed over all tenants."""
        return self._metrics.snapshot(tenant)

    # -- lifecycle ---------------------------------------------------------------------------

    async def recover(self) -> int:
        """Close runs a dead process left open; return how many (RunRecovery.recover)."""
        return await self._recovery.recover()

    def start_upkeep(self) -> None:
        """Renew run leases, recover dead processes' runs and settle queued repairs."""
        self._recovery.start_upkeep()

    async def stop_upkeep(self) -> None:
        await self._recovery.stop_upkeep()

    async def shutdown(self, timeout_s: float) -> None:
        """Stop every run ("shutdown"), wait (bounded) until each has stored its stop, then
        let every connection send what it has queued and close with 1001 (going away)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await self._runs.stop_all(timeout_s)
        await self._registry.close_all(GOING_AWAY, deadline - loop.time())
