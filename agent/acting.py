"""Carry out the tool calls of one model turn.

Order on the wire, for a turn with calls c1..cn:
1. `tool_start` for every ordinary call, in the model's order; then they all run concurrently;
2. `tool_complete`/`tool_error` for each as soon as it finishes (calls that finish together
   in the model's order), its result stored with it: a fast call never shows as running
   while a slow one works, and a stop meanwhile keeps the result it showed;
3. then each `request_input` call, one question at a time, in the model's order.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.approval import approve_calls
from agent.bounded import bounded
from agent.context import RECALL_DETAILS
from agent.elicitation import make_ask, put_question
from agent.errors import ModelBehaviorError, ToolError
from agent.events import (
    ToolCompleted,
    ToolFailed,
)
from agent.messages import Message, ToolCall
from agent.metrics import Metric
from agent.own_tools import RECALL_DETAILS_SPEC, REQUEST_INPUT, REQUEST_INPUT_SPEC
from agent.ports import ToolContext
from agent.recall import recall, result_text
from agent.run import RunContext, RunInterrupted, RunRecorder
from agent.tracing import record_tool_failure, tool_call_span

__all__ = ["RECALL_DETAILS_SPEC", "REQUEST_INPUT", "REQUEST_INPUT_SPEC", "run_tool_calls"]

log = logging.getLogger(__name__)

# Arguments nested deeper are refused: orjson, which stores and sends them, stops at 255.
_MAX_DEPTH = 64

# Why a call may name a tool the run did not offer: the model knows it from earlier turns.
_NOT_OFFERED = "it was not chosen for this conversation, or its MCP server is not running."


@dataclass(frozen=True, slots=True)
class _Outcome:
    ok: bool
    value: Any  # the result when ok, else the error text
    duration_ms: int


async def run_tool_calls(
    ctx: RunContext, rec: RunRecorder, step: int, calls: Sequence[ToolCall]
) -> None:
    """Run every call of the turn and store one tool message per call, each as it ends."""
    ordinary = [c for c in calls if c.name != REQUEST_INPUT]
    questions = [c for c in calls if c.name == REQUEST_INPUT]
    most = ctx.limits.tool_result_max_bytes
    parsed = {c.id: _parse_arguments(c.arguments, most) for c in calls}
    for call in ordinary:  # before any approval is asked: a tool not offered is never shown
        parsed[call.id] = _refuse_unoffered(ctx, call, parsed[call.id])
    for call in ordinary:
        await rec.open_call(step, call, parsed[call.id][0])
    await approve_calls(ctx, step, ordinary, parsed)  # risky calls wait for the user's yes
    tasks = [
        asyncio.create_task(_execute(ctx, rec, call, _refuse_repeat(rec, call, parsed[call.id])))
        for call in ordinary
    ]
    for call, task in zip(ordinary, tasks, strict=True):
        task.add_done_callback(functools.partial(_hold_end, ctx, rec, step, call))
    order = {task: i for i, task in enumerate(tasks)}
    running = set(tasks)
    try:
        while running:
            ended, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(ended, key=order.__getitem__):
                call = ordinary[order[task]]
                await _finish_call(ctx, rec, step, call, task.result())
    finally:
        await _cancel_all(tasks)
    for call in questions:
        await _ask(ctx, rec, step, call, parsed[call.id])


def _refuse_unoffered(
    ctx: RunContext, call: ToolCall, parsed: tuple[dict[str, Any], str | None]
) -> tuple[dict[str, Any], str | None]:
    """A call of a tool not offered for this run (`chat.tools`, the tenant's tools) becomes a
    problem: a model repeating a call it saw earlier, or naming another tenant's MCP tool,
    must neither reach the tool nor have its call shown to the user for approval."""
    args, problem = parsed
    offered = ctx.tool_names is None or call.name in ctx.tool_names
    if (
        problem is None
        and not offered
        and not (call.name == RECALL_DETAILS and ctx.context is not None)
    ):
        problem = f"{call.name} is not available now: {_NOT_OFFERED}"
    return args, problem


def _refuse_repeat(
    rec: RunRecorder, call: ToolCall, parsed: tuple[dict[str, Any], str | None]
) -> tuple[dict[str, Any], str | None]:
    """Turn an identical repeat of a call that already failed REPEAT_LIMIT times into a
    problem, so it is not run again (the model is looping)."""
    args, problem = parsed
    refusal = rec.ledger.refusal(call.name, args) if problem is None else None
    if refusal is not None:
        rec.ctx.metrics[Metric.REPEATED_FAILING_CALLS_REFUSED] += 1
        problem = refusal
    return args, problem


async def _finish_call(
    ctx: RunContext, rec: RunRecorder, step: int, call: ToolCall, outcome: _Outcome
) -> None:
    rec.close_call(call.id)
    rec.ledger.record(
        step,
        call.name,
        _parse_arguments(call.arguments, ctx.limits.tool_result_max_bytes)[0],
        outcome.ok,
        outcome.value,
    )
    event, message = _shown_end(ctx, step, call, outcome)
    await ctx.sink.emit(event)
    await rec.add(message)


def _shown_end(
    ctx: RunContext, step: int, call: ToolCall, outcome: _Outcome
) -> tuple[ToolCompleted | ToolFailed, Message]:
    """The event and the stored result that show how `call` ended."""
    if outcome.ok:
        content = result_text(outcome.value)
        return (
            ToolCompleted(step, call.id, call.name, outcome.value, outcome.duration_ms),
            Message.tool_result(call, content, status="ok", run_id=ctx.run_id),
        )
    return (
        ToolFailed(step, call.id, call.name, outcome.value),
        Message.tool_result(
            call,
            f"The tool call failed: {outcome.value}",
            status="error",
            error=outcome.value,
            run_id=ctx.run_id,
        ),
    )


def _hold_end(
    ctx: RunContext, rec: RunRecorder, step: int, call: ToolCall, task: asyncio.Task[_Outcome]
) -> None:
    """A call ended: until its end is shown (after the calls before it), a stop shows it.
    What a stop would show is built only if one comes."""
    if not task.cancelled() and task.exception() is None:
        rec.hold_end(call.id, functools.partial(_shown_end, ctx, step, call, task.result()))


async def _execute(
    ctx: RunContext, rec: RunRecorder, call: ToolCall, parsed: tuple[dict[str, Any], str | None]
) -> _Outcome:
    with tool_call_span(call.name, call.id, run_id=ctx.run_id, step=rec.step) as span:
        outcome = await _run_tool(ctx, rec, call, parsed)
        if not outcome.ok:
            record_tool_failure(span, str(outcome.value), "tool_error")
        return outcome


async def _run_tool(
    ctx: RunContext, rec: RunRecorder, call: ToolCall, parsed: tuple[dict[str, Any], str | None]
) -> _Outcome:
    args, problem = parsed
    started = time.perf_counter()
    if problem is not None:
        return _Outcome(False, problem, 0)
    if call.name == RECALL_DETAILS and ctx.context is not None:
        return _recall(ctx, rec, args)
    try:
        async with asyncio.timeout(ctx.limits.tool_timeout_s) as deadline:
            ask = make_ask(ctx, rec.step, call, deadline)  # a tool may ask the person (MCP)
            context = ToolContext(
                ctx.tenant_id, ctx.user_id, ctx.session_id, ctx.run_id, {"ask": ask}
            )
            result = await ctx.tools.call(call.name, args, context)
        # A result the wire cannot carry is the tool's failure, not the run's.
        result = bounded(result, ctx.limits.tool_result_max_bytes)
    except (ToolError, ModelBehaviorError) as exc:
        error = bounded(str(exc), ctx.limits.tool_result_max_bytes)
        return _Outcome(False, error, _ms_since(started))
    except TimeoutError:
        limit = ctx.limits.tool_timeout_s
        return _Outcome(
            False, f"{call.name} did not finish within {limit:g} s.", _ms_since(started)
        )
    except Exception as exc:  # noqa: BLE001 - a broken tool must not end the run
        # The model sees only the exception's type; the operator needs the traceback.
        log.exception("tool %s (call %s, run %s) failed", call.name, call.id, ctx.run_id)
        return _Outcome(
            False, f"{call.name} failed unexpectedly ({type(exc).__name__}).", _ms_since(started)
        )
    return _Outcome(True, result, _ms_since(started))


async def _ask(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    call: ToolCall,
    parsed: tuple[dict[str, Any], str | None],
) -> None:
    args, problem = parsed
    question = args.get("question")
    if problem is None and not args:  # a bare `request_input`: the model meant to ask
        question = _fallback_question(rec, ctx.run_id)
    if problem is not None or not isinstance(question, str) or not question.strip():
        error = problem or 'request_input needs {"question": "<a non-empty question>"}.'
        await rec.open_call(step, call, args)  # shown like any call the model got wrong
        rec.close_call(call.id)
        await ctx.sink.emit(ToolFailed(step, call.id, call.name, error))
        rec.ledger.record(step, call.name, args, False, error)
        await rec.add(
            Message.tool_result(
                call,
                f"The tool call failed: {error}",
                status="error",
                error=error,
                run_id=ctx.run_id,
            )
        )
        return
    answer = await put_question(ctx, step, call, question.strip())
    if answer is None:
        await rec.add(
            Message.tool_result(
                call,
                "The user did not answer the question in time.",
                status="timeout",
                error="no answer",
                run_id=ctx.run_id,
            )
        )
        raise RunInterrupted("input_timeout")
    rec.ledger.record(step, call.name, args, True, "the person answered")
    await rec.add(Message.tool_result(call, answer, status="ok", run_id=ctx.run_id))


def _fallback_question(rec: RunRecorder, run_id: str) -> str:
    """A question-less `request_input` (small models write just the name): ask what this
    step's reasoning said it needs, so the person can still answer."""
    for message in reversed(rec.conversation):
        if message.run_id == run_id and message.phase == "reason" and message.content.strip():
            return f"I need a bit more information from you. {message.content.strip()}"
        if message.run_id != run_id:
            break
    return "I need a bit more information from you: could you tell me more?"


def _recall(ctx: RunContext, rec: RunRecorder, args: dict[str, Any]) -> _Outcome:
    result_id, focus, offset = args.get("result_id"), args.get("focus"), args.get("offset", 0)
    if (
        not isinstance(result_id, str)
        or (focus is not None and not isinstance(focus, str))
        or not isinstance(offset, int)
        or isinstance(offset, bool)
        or offset < 0
    ):
        return _Outcome(False, _RECALL_USAGE, 0)
    context = ctx.context
    assert context is not None  # recall_details is offered only with a token budget
    try:
        piece = recall(
            rec.conversation,
            result_id,
            lambda text: context.piece(text, rec.window_tokens),
            focus=focus,
            offset=offset,
        )
    except LookupError as exc:
        return _Outcome(False, str(exc), 0)
    return _Outcome(True, piece, 0)


_RECALL_USAGE = (
    'recall_details needs {"result_id": "...", "focus": "...", "offset": 0}: result_id a '
    "string, focus an optional string, offset an optional whole number of at least 0."
)


def _parse_arguments(raw: str, most: int) -> tuple[dict[str, Any], str | None]:
    """Return (arguments object, problem or None). Empty text means no arguments; more than
    `most` bytes is refused like invalid JSON (the `tool_start` that shows them would be a
    frame too large for a client, as a result that long would be)."""
    size = len(raw.encode("utf-8", "surrogatepass")) if len(raw) * 4 > most else 0
    if size > most:
        return {}, f"The arguments are {size} bytes long; at most {most} are accepted."
    if not raw.strip():
        return {}, None
    deep = f"The arguments are nested more than {_MAX_DEPTH} levels deep."
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"The arguments are not valid JSON ({exc.msg} at position {exc.pos})."
    except RecursionError:  # thousands of levels: the parser's own recursion gives out
        return {}, deep
    if not isinstance(value, dict):
        return {}, f"The arguments must be a JSON object, got {type(value).__name__}."
    if _deeper_than(value, _MAX_DEPTH):  # fewer, but too many for the store's JSON writer
        return {}, deep
    return value, None


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and objects more than `limit` levels (no recursion)."""
    level: list[tuple[Any, int]] = [(value, 1)]
    while level:
        item, depth = level.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            level.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            level.extend((v, depth + 1) for v in item if isinstance(v, dict | list))
    return False


async def _cancel_all(tasks: Sequence[asyncio.Task[_Outcome]]) -> None:
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=1.0)


def _ms_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)
