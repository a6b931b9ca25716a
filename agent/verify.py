"""verify_finish: a separate, isolated check before a run may claim it is done.

The verifier sees only the task, what the tool calls returned or how they failed, and the
proposed final answer: no conversation history and no earlier reasoning, so the agent's own
story cannot sway it.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.calling import call_model
from agent.echo import copied_from
from agent.messages import Message
from agent.metrics import Metric
from agent.parsing import split_control
from agent.run import RunContext, RunRecorder

__all__ = ["Verdict", "needs_verification", "verify_finish"]

VERIFY_KEYS = frozenset({"done", "reason"})


@dataclass(frozen=True, slots=True)
class Verdict:
    done: bool
    reason: str


def needs_verification(rec: RunRecorder) -> bool:
    """Finishing is suspect when failures are unresolved, or when the task or Reason named
    tools to use and no tool call succeeded at all."""
    if rec.verifications >= rec.ctx.limits.max_verifications:
        return False
    if rec.ledger.unresolved_failures():
        return True
    return rec.expected_tool_unused


async def verify_finish(ctx: RunContext, rec: RunRecorder, step: int, answer: str) -> Verdict:
    """Ask the model, in a fresh context, whether `answer` really completes the task."""
    rec.count_verification()
    state = ctx.prompts.render(
        "agent_verify_state",
        task=rec.task(),
        calls=rec.ledger.summary(),
        failures=rec.ledger.failure_list(),
        answer=answer,
    )
    messages = [
        Message("system", ctx.prompts.render("agent_verify_prompt")),
        Message("user", state),
    ]

    async def build() -> list[Message]:
        return messages

    turn = await call_model(ctx, rec, step, "verify", build)
    text, control = split_control(turn.content, VERIFY_KEYS)
    if control is None or not isinstance(control.get("done"), bool):
        ctx.metrics[Metric.VERIFY_UNREADABLE] += 1
        return Verdict(True, "The check could not be read, so the answer stands.")
    reason = control.get("reason")
    reason = reason if isinstance(reason, str) and reason else text
    if copied_from(reason, *(m.content for m in messages)):  # its instructions read back
        reason = _COPIED_REASON[control["done"]]
    return Verdict(control["done"], reason)


# What a verdict whose reason only reads the check's instructions back says instead.
_COPIED_REASON = {
    True: "The check found the answer complete.",
    False: "The check found the task not finished yet.",
}
