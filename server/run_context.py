"""RunContexts: what each run works with (model, tools, prompts, sink, limits, counters).

Runs started by a client and runs closed by recovery get their context from the same place,
so both write through a RunSink and count into their tenant's metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from agent.context import ContextWindow
from agent.ports import ChatModel, PromptProvider, Toolbox, ToolSpec
from agent.run import RunContext, RunLimits, Search
from server.client_tools import ClientToolbox
from server.live import ActiveRun, LiveSession
from server.run_sink import RunSink
from server.tenant_metrics import TenantMetrics

__all__ = ["BuildContext", "RunContexts"]


class BuildContext(Protocol):
    def __call__(
        self,
        live: LiveSession,
        run: ActiveRun,
        limits: RunLimits,
        tools: tuple[str, ...] | None,
        client_tools: tuple[ToolSpec, ...] = (),
    ) -> RunContext:
        """The context of `run` in `live`: `tools` (None: every tool the tenant may use) and
        the client's own tools."""
        ...


class RunContexts:
    """Build RunContexts from the collaborators every run shares."""

    def __init__(
        self,
        *,
        model: ChatModel,
        tools: Toolbox,
        tools_for: Callable[[str], Sequence[str]],
        prompts: PromptProvider,
        metrics: TenantMetrics,
        context: ContextWindow | None = None,
        research: Search | None = None,
        needs_approval: Callable[[str], bool] | None = None,
    ) -> None:
        self._model = model
        self._tools = tools
        self._tools_for = tools_for
        self._prompts = prompts
        self._metrics = metrics
        self._context_window = context
        self._research = research
        self._needs_approval = needs_approval

    def build(
        self,
        live: LiveSession,
        run: ActiveRun,
        limits: RunLimits,
        tools: tuple[str, ...] | None,
        client_tools: tuple[ToolSpec, ...] = (),
    ) -> RunContext:
        sink = RunSink(live, run.run_id)
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
            metrics=self._metrics.of(live.scope.tenant_id),
            context=self._context_window,
            research=self._research,
            needs_approval=self._needs_approval,
        )
