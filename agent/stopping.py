"""How a run cut short is closed: stopped while it works, or left open by a process that died.

Both end the same way, through `RunRecorder.record_stop`: a `tool_error` for every call shown
starting and not ending, `agent_stopped`, and the messages that keep the conversation valid
for the model (the text shown so far, a result for every call, a note on the stop).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from agent.acting import REQUEST_INPUT
from agent.errors import ModelError
from agent.events import RunStopped, StopReason
from agent.messages import Message, Usage
from agent.ports import ModelTurn
from agent.run import RunContext, RunInterrupted, RunRecorder, stop_note
from agent.tokens import EstimatedCounter, message_tokens

__all__ = ["close_interrupted", "stop_recorded"]


@asynccontextmanager
async def stop_recorded(
    ctx: RunContext, recorder: RunRecorder | None = None
) -> AsyncIterator[None]:
    """Turn a stop inside the block (a cancellation with a stop reason, or RunInterrupted)
    into a recorded stop, and end the block normally.

    With a `recorder`, it records what the run cut short; without one (the run had not begun)
    only `agent_stopped` at step 0. A cancellation without a stop reason is not ours (e.g. the
    event loop is closing): it propagates untouched. A ModelError propagates with the run's
    usage so far, which the run's `error` frame reports.
    """
    try:
        yield
    except ModelError as failed:
        if recorder is not None:
            failed.usage = recorder.usage_report()
        raise
    except asyncio.CancelledError:
        reason = ctx.control.stop_reason
        if reason is None:
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        await _record(ctx, recorder, reason)
    except RunInterrupted as interrupted:
        ctx.control.claim_stop(interrupted.reason)
        await _record(ctx, recorder, interrupted.reason)


async def _record(ctx: RunContext, recorder: RunRecorder | None, reason: StopReason) -> None:
    if recorder is None:  # before the loop began: still tell the next run's model
        await ctx.sink.emit(RunStopped(0, reason, Usage().as_dict()))
        await ctx.transcript.append([stop_note(reason, 0, ctx.run_id)])
    else:
        await recorder.record_stop(reason)


async def close_interrupted(
    ctx: RunContext,
    history: Sequence[Message],
    step: int,
    reason: StopReason = "interrupted",
    shown: tuple[str, str] | None = None,
) -> None:
    """Close the run `ctx.run_id`, which a dead process left open at `step`, as `interrupted`
    (or as `reason`: `user` when a stop was asked for that the dead process never read).
    `shown`: the phase that was streaming and the text it had shown, kept as a stop keeps it
    (unless its message was stored after all).

    `history` is the session's stored conversation. Every call of the run without a result
    there gets one; those the run had shown starting (every call but a question, which never
    shows `tool_start`) also get their `tool_error`.
    """
    recorder = RunRecorder(ctx, history)
    started = [c for c in recorder.unanswered_calls() if c.name != REQUEST_INPUT]
    recorder.continue_from(step, started)
    for phase, turn in _stored_calls(ctx.run_id, history):
        recorder.count(phase, turn)
    if shown is not None and not _stored_already(ctx.run_id, history, *shown):
        recorder.begin_stream(shown[0])
        recorder.add_streamed(shown[1])
    await recorder.record_stop(reason)


def _stored_already(run_id: str, history: Sequence[Message], phase: str, text: str) -> bool:
    """Was the streaming phase's message stored before the process died (its end event
    was not)?"""
    last = history[-1] if history else None
    return (
        last is not None
        and last.role == "assistant"
        and last.run_id == run_id
        and last.phase == phase
        and last.content.startswith(text.strip()[:200])
    )


def _stored_calls(run_id: str, history: Sequence[Message]) -> list[tuple[str, ModelTurn]]:
    """The model calls a dead run is known to have made, one per assistant message it stored,
    with tokens estimated (the usage the model server reported died with the process): the
    conversation before the message as the prompt, without the system prompt and the tool
    list, which were not stored, so a lower bound; the message as the completion."""
    counter = EstimatedCounter()
    calls: list[tuple[str, ModelTurn]] = []
    before = 0
    for message in history:
        size = message_tokens(counter, message)
        if message.role == "assistant" and message.run_id == run_id:
            turn = ModelTurn(message.content, message.tool_calls, before, size, estimated=True)
            calls.append((message.phase or "unknown", turn))
        before += size
    return calls
