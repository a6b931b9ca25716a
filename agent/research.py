"""Pre-task research: one web search before a session's first task, kept as background.

The summary is stored as a note on the session, so every later Reason prompt of the session
includes it, and it is shown as an `agent_research` event. A failing search never blocks the
task: the run simply starts without background.
"""

from __future__ import annotations

import logging

from agent.events import ResearchDone
from agent.messages import Message
from agent.metrics import Metric
from agent.ports import ToolContext
from agent.run import RunContext, RunRecorder, Search

__all__ = ["Search", "research_first_task"]

log = logging.getLogger(__name__)
_MAX_RESULTS = 5


async def research_first_task(ctx: RunContext, rec: RunRecorder, search: Search) -> None:
    """Search once for the task when it is the session's first; store and show the result."""
    if any(m.role == "user" and m.run_id != ctx.run_id for m in rec.conversation):
        return
    task = rec.task()
    query = " ".join(task.split())[:200]
    try:
        found = await search(
            query, ToolContext(ctx.tenant_id, ctx.user_id, ctx.session_id, ctx.run_id)
        )
        results = [r for r in found.get("results", []) if isinstance(r, dict)][:_MAX_RESULTS]
    except Exception as exc:  # noqa: BLE001 - background is optional; the task goes on
        ctx.metrics[Metric.RESEARCH_FAILURES] += 1
        log.info("pre-task research failed: %s", exc)
        return
    if not results:
        return
    lines = [
        f"- {r.get('title', '')}: {r.get('snippet', '')} ({r.get('url', '')})" for r in results
    ]
    summary = f"Background from a web search for {query!r}, before starting:\n" + "\n".join(lines)
    await rec.add(Message("system", summary, phase="research", run_id=ctx.run_id))
    sources = tuple(str(r.get("url", "")) for r in results)
    await ctx.sink.emit(ResearchDone(query, summary, sources))
