"""run_chat: plain streaming chat (agent_mode false), with the enabled tools still usable.

The model may call tools for up to `chat_tool_rounds` rounds; their events carry step 0. Every
streamed text delta goes out as `chat_delta`; `chat_response` carries their concatenation.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from agent.acting import run_tool_calls
from agent.events import ChatDelta, ChatDone
from agent.messages import Message
from agent.ports import ModelTurn, ToolSpec
from agent.run import RunContext, RunRecorder, run_guarded

__all__ = ["run_chat"]


async def run_chat(ctx: RunContext, history: Sequence[Message]) -> None:
    """Answer the last user message of `history`, streaming; ends with `chat_response`."""
    recorder = RunRecorder(ctx, history)
    await run_guarded(ctx, recorder, _rounds(ctx, recorder))


async def _rounds(ctx: RunContext, rec: RunRecorder) -> None:
    base = ctx.prompts.render("system", today=datetime.now(UTC).date().isoformat())
    system = f"{base}\n\n{ctx.prompts.render('chat_prompt')}"
    tools = ctx.tools.specs(ctx.tool_names)
    shown: list[str] = []
    for round_no in range(ctx.limits.chat_tool_rounds + 1):
        offered = tools if round_no < ctx.limits.chat_tool_rounds else []
        turn = await _stream_round(ctx, rec, system, offered, shown)
        await rec.commit_stream(
            Message(
                "assistant",
                turn.content,
                tool_calls=turn.tool_calls,
                phase="chat",
                run_id=ctx.run_id,
            )
        )
        if not turn.tool_calls:
            break
        await run_tool_calls(ctx, rec, 0, turn.tool_calls)
    await ctx.sink.emit(ChatDone("".join(shown)))


async def _stream_round(
    ctx: RunContext, rec: RunRecorder, system: str, tools: Sequence[ToolSpec], shown: list[str]
) -> ModelTurn:
    messages = await rec.messages(0, "chat", system)
    rec.begin_stream("chat")
    turn = ModelTurn("")
    async for item in ctx.model.stream(messages, tools=tools, call=ctx.call(0, "chat")):
        if isinstance(item, str):
            rec.streamed.append(item)
            shown.append(item)
            await ctx.sink.emit(ChatDelta(item))
        else:
            turn = item
    rec.count("chat", turn.prompt_tokens, turn.completion_tokens)
    return turn
