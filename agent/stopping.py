"""How a run cut short is closed: stopped while it works, or left open by a process that died.

Both end the same way, through `RunRecorder.record_stop`: a `tool_error` for every call shown
starting and not ending, `agent_stopped`, and the messages that keep the conversation valid
for the model (the text shown so far, a result for every call, a note on the stop).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.acting import REQUEST_INPUT
from agent.messages import Message
from agent.run import RunContext, RunRecorder

__all__ = ["close_interrupted"]


async def close_interrupted(ctx: RunContext, history: Sequence[Message], step: int) -> None:
    """Close the run `ctx.run_id`, which a dead process left open at `step`, as `interrupted`.

    `history` is the session's stored conversation. Every call of the run without a result
    there gets one; those the run had shown starting (every call but a question, which never
    shows `tool_start`) also get their `tool_error`.
    """
    recorder = RunRecorder(ctx, history)
    started = [c for c in recorder.unanswered_calls() if c.name != REQUEST_INPUT]
    recorder.continue_from(step, started)
    await recorder.record_stop("interrupted")
