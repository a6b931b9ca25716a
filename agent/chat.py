"""run_chat: plain streaming chat (agent_mode false), with the enabled tools still usable.

The model may call tools for up to `chat_tool_rounds` rounds; their events carry step 0. Every
streamed text delta goes out as `chat_delta`; `chat_response` carries their concatenation. A
round whose reply begins like a tool call written as text is held back until it is read
(textcalls.CallTextHold): a call is never shown as the reply.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.acting import run_tool_calls
from agent.calling import call_model
from agent.events import ChatDelta, ChatDone
from agent.loop import system_message
from agent.messages import Message
from agent.ports import ModelTurn, ToolSpec
from agent.run import RunContext, RunRecorder
from agent.stopping import stop_recorded
from agent.textcalls import CallTextHold, read_text_tool_calls

__all__ = ["run_chat"]


async def run_chat(ctx: RunContext, history: Sequence[Message]) -> None:
    """Answer the last user message of `history`, streaming; ends with `chat_response`."""
    recorder = RunRecorder(ctx, history, stepless=True)
    async with stop_recorded(ctx, recorder):
        await _rounds(ctx, recorder)


async def _rounds(ctx: RunContext, rec: RunRecorder) -> None:
    system = system_message(ctx, "chat_prompt")
    tools = ctx.tools.specs(ctx.tool_names)
    shown: list[str] = []
    for round_no in range(ctx.limits.chat_tool_rounds + 1):
        last_round = round_no == ctx.limits.chat_tool_rounds
        reads_calls = bool(tools) and not last_round  # may a call be written as text?
        hold = CallTextHold([t.name for t in tools]) if reads_calls else None
        turn = await _stream_round(ctx, rec, system, tools, shown, hold, last_round=last_round)
        calls, content = rec.own_call_ids(turn.tool_calls), turn.content
        if not calls and reads_calls:
            calls, content = read_text_tool_calls(content, {t.name for t in tools})
        if hold is not None:
            await _show(ctx, rec, shown, hold.settle(content if calls else None))
        await rec.commit_stream(
            Message("assistant", content, tool_calls=calls, phase="chat", run_id=ctx.run_id)
        )
        if not calls:
            break
        await run_tool_calls(ctx, rec, 0, calls)
    await ctx.sink.emit(ChatDone("".join(shown), rec.usage_report()))


async def _stream_round(
    ctx: RunContext,
    rec: RunRecorder,
    system: str,
    tools: Sequence[ToolSpec],
    shown: list[str],
    hold: CallTextHold | None,
    *,
    last_round: bool,
) -> ModelTurn:
    """One streamed round; the last one shows the tools but may not call them."""
    rec.begin_stream("chat")

    async def show(piece: str) -> None:
        await _show(ctx, rec, shown, hold.feed(piece) if hold is not None else piece)

    return await call_model(
        ctx,
        rec,
        0,
        "chat",
        lambda: rec.messages(0, "chat", system),
        tools=tools,
        tool_choice="none" if last_round else "auto",
        on_text=show,
    )


async def _show(ctx: RunContext, rec: RunRecorder, shown: list[str], piece: str) -> None:
    if piece:
        rec.add_streamed(piece)
        shown.append(piece)
        await ctx.sink.emit(ChatDelta(piece))
