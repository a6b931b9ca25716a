"""call_model: one model call of a run, drained in one place.

Every phase (Reason, Act, Observe, summarize, repair, chat) calls the model the same way: the
text goes to the caller's `on_text`, a reasoning model's thinking becomes `ThinkingDelta`
events (never text, never sent back), usage is counted, and a prompt the server refuses as
too long for its context window is compacted once to the window the server named (or half the
current one) and sent again. A second refusal ends the run with an error that says what to do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from agent.errors import ContextTooLong, ModelError
from agent.events import ThinkingDelta
from agent.messages import Message
from agent.metrics import Metric
from agent.ports import ModelTurn, Thinking, ToolChoice, ToolSpec
from agent.run import RunContext, RunRecorder
from agent.tracing import model_call_span, record_turn

__all__ = ["call_model"]

TextSink = Callable[[str], Awaitable[None]]


async def call_model(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    phase: str,
    build: Callable[[], Awaitable[list[Message]]],
    *,
    tools: Sequence[ToolSpec] = (),
    tool_choice: ToolChoice = "auto",
    on_text: TextSink | None = None,
) -> ModelTurn:
    """Build the messages with `build`, make the call, and return the whole turn."""
    try:
        return await _drain(ctx, rec, step, phase, await build(), tools, tool_choice, on_text)
    except ContextTooLong as exc:
        if not rec.shrink_window(exc.window_tokens):
            raise ModelError(_too_small(exc.window_tokens)) from exc
        ctx.metrics[Metric.CONTEXT_OVERFLOW_RETRIES] += 1
    try:
        return await _drain(ctx, rec, step, phase, await build(), tools, tool_choice, on_text)
    except ContextTooLong as exc:
        raise ModelError(_too_small(exc.window_tokens or rec.window_tokens)) from exc


async def _drain(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    phase: str,
    messages: list[Message],
    tools: Sequence[ToolSpec],
    tool_choice: ToolChoice,
    on_text: TextSink | None,
) -> ModelTurn:
    turn = ModelTurn("")
    model = getattr(ctx.model, "model_name", None)  # optional: not part of the port
    with model_call_span(
        model if isinstance(model, str) else None,
        session_id=ctx.session_id,
        run_id=ctx.run_id,
        step=step,
        phase=phase,
    ) as span:
        stream = ctx.model.stream(
            messages, tools=tools, call=ctx.call(step, phase), tool_choice=tool_choice
        )
        async for item in stream:
            if isinstance(item, str):
                if on_text is not None:
                    await on_text(item)
            elif isinstance(item, Thinking):
                if item.text:
                    await ctx.sink.emit(ThinkingDelta(step, phase, item.text))
            else:
                turn = item
        record_turn(span, turn)
    rec.count(phase, turn)
    return turn


def _too_small(window: int | None) -> str:
    size = f" ({window} tokens)" if window else ""
    return (
        f"The conversation does not fit the model's context window{size}, even shortened. "
        "Give the model server a larger context (llama.cpp: --ctx-size; Ollama: num_ctx), "
        "or start a new chat."
    )
