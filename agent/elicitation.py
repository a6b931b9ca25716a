"""A tool asking the person mid-call (MCP elicitation) goes through the `request_input` pause:
the same `agent_request_input` event (with the call's id), the same `agent_user_input` answer,
the same timeout, the same stop. The call's own time limit is suspended while it waits.

A run asks one question at a time (`put_question`): calls that run concurrently and ask at
once (two frontend tools of one turn, two MCP tools eliciting) take turns, each question
published and timed only once the one before it is answered, so an answer always reaches the
question it was given for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from agent.bounded import bounded
from agent.control import PendingQuestion
from agent.events import InputRequested, InputTimedOut, UserAnswered
from agent.messages import ToolCall
from agent.run import RunContext

__all__ = ["make_ask", "put_question"]


def make_ask(
    ctx: RunContext, step: int, call: ToolCall, deadline: asyncio.Timeout
) -> Callable[[str], Awaitable[str | None]]:
    """The `ask` of one tool call's ToolContext.extra (agent.tools.mcp.Ask): put `question`
    to the person; None when they did not answer in time (the run is then ending)."""

    async def ask(question: str) -> str | None:
        question = bounded(question, ctx.limits.tool_result_max_bytes)  # the server's text
        loop = asyncio.get_running_loop()
        when = deadline.when()
        remaining = None if when is None else when - loop.time()
        deadline.reschedule(None)  # the person's time does not count against the tool
        answer = await put_question(ctx, step, call, question)
        if answer is None:
            ctx.control.request_stop("input_timeout")  # ends the run as an unanswered question
            return None
        if remaining is not None:
            deadline.reschedule(loop.time() + max(remaining, 0.0))
        return answer

    return ask


async def put_question(ctx: RunContext, step: int, call: ToolCall, question: str) -> str | None:
    """Publish `question` for `call` once no other question of the run is open,
    and wait for its answer (shown as `agent_user_answer`, cut like a result); None when
    `agent.request_input_timeout_s` passes first (shown as its timeout)."""
    async with ctx.control.asking:
        timeout = ctx.limits.request_input_timeout_s
        pending = PendingQuestion(question, call.id, step, ctx.now_ms() + int(timeout * 1000))
        ctx.control.pose(pending)
        try:
            asked = InputRequested(step, question, call.id, pending.expires_at, call.name)
            await ctx.sink.emit(asked)
        except BaseException:
            ctx.control.withdraw()
            raise
        answer = await ctx.control.await_answer(timeout)
        if answer is None:
            await ctx.sink.emit(InputTimedOut(step))
            return None
        shown = str(bounded(answer, ctx.limits.tool_result_max_bytes))  # text stays text
        await ctx.sink.emit(UserAnswered(step, call.id, shown))
        return shown
