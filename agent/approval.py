"""Approval before risky calls: the run pauses until the user approves or denies each one.

Like `request_input`: an `ApprovalRequested` event, then a wait of at most
`RunLimits.approval_timeout_s`. Approved calls run as usual; a denied call is not run and its
result says the user declined (the run goes on); no decision in time ends the run as an
unanswered question does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.control import PendingApproval
from agent.events import ApprovalRequested, ApprovalTimedOut
from agent.messages import ToolCall
from agent.run import RunContext, RunInterrupted

__all__ = ["DECLINED", "approve_calls"]

DECLINED = "The user declined:"  # how a declined call's error begins: the user's choice

Parsed = tuple[dict[str, Any], str | None]


async def approve_calls(
    ctx: RunContext, step: int, calls: Sequence[ToolCall], parsed: dict[str, Parsed]
) -> None:
    """Ask, one call at a time in the model's order, for every call that needs approval;
    a denial becomes that call's problem in `parsed`, so it is reported and not run."""
    if ctx.needs_approval is None:
        return
    for call in calls:
        args, problem = parsed[call.id]
        if problem is None and ctx.needs_approval(call.name):
            parsed[call.id] = (args, await _ask(ctx, step, call, args))


async def _ask(ctx: RunContext, step: int, call: ToolCall, args: dict[str, Any]) -> str | None:
    timeout = ctx.limits.approval_timeout_s
    pending = PendingApproval(call.name, args, call.id, step, ctx.now_ms() + int(timeout * 1000))
    ctx.control.pose_approval(pending)  # decidable from the moment it is announced
    try:
        await ctx.sink.emit(ApprovalRequested(step, call.id, call.name, args, pending.expires_at))
    except BaseException:
        ctx.control.withdraw_approval()
        raise
    decision = await ctx.control.await_decision(timeout)
    if decision is None:
        await ctx.sink.emit(ApprovalTimedOut(step, call.id))
        raise RunInterrupted("input_timeout")
    if decision.approve:
        return None
    return f"{DECLINED} {decision.reason.strip() or 'no reason given'}."
