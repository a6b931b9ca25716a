"""run_agent: the strict reason → act → observe loop of PROTOCOL.md.

Every step has all three phases, in order. Reason and Observe stream plain text that ends with
a JSON control block (cut out before the user sees it); Act is the only phase that offers tools.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from agent.acting import REQUEST_INPUT_SPEC, run_tool_calls
from agent.events import (
    ObserveDelta,
    ObserveDone,
    ReasonDelta,
    ReasonDone,
    RunCompleted,
    RunStarted,
    StepStarted,
)
from agent.history import build_messages
from agent.messages import Message
from agent.parsing import (
    OBSERVE_KEYS,
    REASON_KEYS,
    ControlStream,
    read_observe_control,
    read_reason_control,
)
from agent.ports import ModelTurn, ToolSpec
from agent.run import RunContext, RunRecorder, run_guarded

__all__ = ["run_agent", "stream_text"]


async def run_agent(ctx: RunContext, history: Sequence[Message]) -> None:
    """Run the agent loop over `history` (which ends with the user's task) until it ends.

    Ends with `agent_completion`, or with `agent_stopped` after a stop or an unanswered
    question. Raises ModelError or StorageError when the run cannot go on.
    """
    recorder = RunRecorder(ctx, history)
    await run_guarded(ctx, recorder, _steps(ctx, recorder))


async def _steps(ctx: RunContext, rec: RunRecorder) -> None:
    max_steps = ctx.limits.max_steps
    await ctx.sink.emit(RunStarted(max_steps))
    tools = [*ctx.tools.specs(ctx.tool_names), REQUEST_INPUT_SPEC]
    for step in range(1, max_steps + 1):
        rec.step = step
        await ctx.sink.emit(StepStarted(step))
        finish = await _reason(ctx, rec, step, tools)
        await _act(ctx, rec, step, tools, skip=finish)
        final_answer = await _observe(ctx, rec, step)
        if final_answer is not None:
            await _complete(ctx, rec, step, final_answer, "finished")
            return
    await _complete(ctx, rec, max_steps, await _summarize(ctx, rec), "max_steps")


async def _reason(ctx: RunContext, rec: RunRecorder, step: int, tools: list[ToolSpec]) -> bool:
    """Stream the Reason phase; return True when the model says it can finish now."""
    names = ", ".join(t.name for t in tools)
    system = _system(ctx, "agent_reason_prompt", step=step, tools=names)
    stream = ControlStream(REASON_KEYS)
    content = await stream_text(ctx, rec, step, "reason", system, stream)
    await rec.commit_stream(Message("assistant", content, phase="reason", run_id=ctx.run_id))
    await ctx.sink.emit(ReasonDone(step, content))
    control = read_reason_control(stream.control)
    return control is not None and control.finish


async def _act(
    ctx: RunContext, rec: RunRecorder, step: int, tools: list[ToolSpec], *, skip: bool
) -> None:
    """Let the model call tools, unless Reason already decided to finish."""
    if skip:
        return
    system = _system(ctx, "agent_act_prompt", step=step)
    turn = await _complete_turn(ctx, rec, step, "act", system, tools)
    if not turn.tool_calls and not turn.content.strip():
        return
    await rec.add(
        Message(
            "assistant", turn.content, tool_calls=turn.tool_calls, phase="act", run_id=ctx.run_id
        )
    )
    if turn.tool_calls:
        await run_tool_calls(ctx, rec, step, turn.tool_calls)


async def _observe(ctx: RunContext, rec: RunRecorder, step: int) -> str | None:
    """Stream the Observe phase; return the final answer when the run should end."""
    system = _system(ctx, "agent_observe_prompt", step=step)
    stream = ControlStream(OBSERVE_KEYS)
    content = await stream_text(ctx, rec, step, "observe", system, stream)
    control = read_observe_control(stream.control)
    if not content and control is not None:
        content = control.observation
    await rec.commit_stream(Message("assistant", content, phase="observe", run_id=ctx.run_id))
    await ctx.sink.emit(ObserveDone(step, content))
    if control is None or control.should_continue:
        return None
    return control.final_answer.strip() or content


async def _summarize(ctx: RunContext, rec: RunRecorder) -> str:
    system = _system(ctx, "agent_summarize_prompt", step=rec.step)
    turn = await _complete_turn(ctx, rec, rec.step, "summarize", system, ())
    return turn.content.strip() or (
        f"I reached the limit of {ctx.limits.max_steps} steps before finishing this task."
    )


async def _complete(
    ctx: RunContext,
    rec: RunRecorder,
    steps: int,
    final_answer: str,
    stop_reason: Literal["finished", "max_steps"],
) -> None:
    await rec.add(Message("assistant", final_answer, phase="final", run_id=ctx.run_id))
    await ctx.sink.emit(RunCompleted(steps, final_answer, stop_reason, rec.usage.as_dict()))


def _system(ctx: RunContext, prompt: str, *, step: int, **values: object) -> str:
    base = ctx.prompts.render("system", today=datetime.now(UTC).date().isoformat())
    phase = ctx.prompts.render(prompt, step=step, max_steps=ctx.limits.max_steps, **values)
    return f"{base}\n\n{phase}"


async def stream_text(
    ctx: RunContext, rec: RunRecorder, step: int, phase: str, system: str, stream: ControlStream
) -> str:
    """Stream a tool-free call through `stream`, emitting the shown text as deltas.

    The recorder stays in streaming state: the caller ends it with `commit_stream`.
    """
    make_delta = ReasonDelta if phase == "reason" else ObserveDelta
    messages = build_messages(system, rec.conversation, ctx.run_id)
    rec.begin_stream(phase)
    turn: ModelTurn | None = None
    async for item in ctx.model.stream(messages, tools=(), call=ctx.call(step, phase)):
        if isinstance(item, str):
            shown = stream.feed(item)
            if shown:
                rec.streamed.append(shown)
                await ctx.sink.emit(make_delta(step, shown))
        else:
            turn = item
    rest = stream.finish()
    if rest:
        rec.streamed.append(rest)
        await ctx.sink.emit(make_delta(step, rest))
    if turn is not None:
        rec.count(phase, turn.prompt_tokens, turn.completion_tokens)
    return stream.content


async def _complete_turn(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    phase: str,
    system: str,
    tools: Sequence[ToolSpec],
) -> ModelTurn:
    """Make one call whose text is not shown while it streams; return the whole turn."""
    messages = build_messages(system, rec.conversation, ctx.run_id)
    turn = ModelTurn("")
    async for item in ctx.model.stream(messages, tools=tools, call=ctx.call(step, phase)):
        if isinstance(item, ModelTurn):
            turn = item
    rec.count(phase, turn.prompt_tokens, turn.completion_tokens)
    return turn
