"""run_agent: the strict reason → act → observe loop of PROTOCOL.md.

Every step has all three phases, in order. Reason and Observe stream plain text that ends with
a JSON control block (cut out before the user sees it); Act is the only phase that offers tools.
Each phase builds its own message list (docs/prompts.md): one system message with the phase's
instructions and, when calls failed, an unmissable note about them.

A run that wants to finish while failures are unresolved (or without any tool having done
what Reason said was needed) is checked by an isolated verify call first; a "not done"
verdict sends it into another step. Before each LLM call the run's budget is checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from agent.acting import RECALL_DETAILS_SPEC, REQUEST_INPUT, REQUEST_INPUT_SPEC, run_tool_calls
from agent.events import (
    CompletionReason,
    FinishVerified,
    ObserveDelta,
    ObserveDone,
    PlanMade,
    ReasonDelta,
    ReasonDone,
    RunCompleted,
    RunStarted,
    StepStarted,
)
from agent.messages import Message
from agent.parsing import (
    OBSERVE_KEYS,
    REASON_KEYS,
    ControlStream,
    read_observe_control,
    read_reason_control,
    split_control,
)
from agent.ports import ModelTurn, ToolSpec
from agent.research import research_first_task
from agent.run import RunContext, RunRecorder, run_guarded
from agent.verify import needs_verification, verify_finish

__all__ = ["run_agent", "stream_text"]


class _BudgetSpent(Exception):
    """The run's budget is used up: finish with what it has."""


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
    if ctx.research is not None:
        await research_first_task(ctx, rec, ctx.research)
    try:
        for step in range(1, max_steps + 1):
            rec.step = step
            await ctx.sink.emit(StepStarted(step))
            finish = await _reason(ctx, rec, step, tools)
            await _act(ctx, rec, step, tools, skip=finish)
            final_answer = await _observe(ctx, rec, step)
            if final_answer is not None and await _may_finish(ctx, rec, step, final_answer):
                await _complete(ctx, rec, step, final_answer, "finished")
                return
        _check_budget(rec)
        await _complete(ctx, rec, max_steps, await _summarize(ctx, rec), "max_steps")
    except _BudgetSpent:
        ctx.metrics["runs_over_budget"] += 1
        await _complete(ctx, rec, rec.step, _budget_answer(rec), "budget")


async def _reason(ctx: RunContext, rec: RunRecorder, step: int, tools: list[ToolSpec]) -> bool:
    """Stream the Reason phase; return True when the model says it can finish now."""
    _check_budget(rec)
    planning = _planning_due(ctx, rec, step)
    names = ", ".join(t.name for t in tools)
    extra = ctx.prompts.render("agent_plan_prompt") if planning else ""
    system = _system(
        ctx,
        rec,
        "agent_reason_prompt",
        step=step,
        tools=names,
        extra=extra,
        style_guidance=ctx.prompts.render(f"style_{ctx.limits.style}"),
    )
    keys = REASON_KEYS | {"plan_steps"}
    content, block = await _stream_phase(ctx, rec, step, "reason", system, keys)
    await rec.commit_stream(Message("assistant", content, phase="reason", run_id=ctx.run_id))
    await ctx.sink.emit(ReasonDone(step, content))
    control = read_reason_control(block)
    if control is not None:
        rec.expected_tools.update(t for t in control.tools_to_consider if t != REQUEST_INPUT)
    plan = _plan_steps(block) if planning else ()
    if plan:
        rec.plan = plan
        await ctx.sink.emit(PlanMade(step, plan))
    return control is not None and control.finish


async def _act(
    ctx: RunContext, rec: RunRecorder, step: int, tools: list[ToolSpec], *, skip: bool
) -> None:
    """Let the model call tools, unless Reason already decided to finish.

    Act sees the conversation plus a state message (the plan and every call so far) that is
    added for this call only; its reply is kept as the model's plan of action.
    """
    if skip:
        return
    _check_budget(rec)
    system = _system(ctx, rec, "agent_act_prompt", step=step)
    state = Message("user", _state(ctx, rec, step))
    messages = await rec.messages(step, "act", system, [state])
    if rec.results_cut:  # something was cut to fit: let the model read more of it
        tools = [*tools, RECALL_DETAILS_SPEC]
    turn = await _complete_turn(ctx, rec, step, "act", messages, tools)
    if not turn.tool_calls and not turn.content.strip():
        return
    await rec.add(
        Message(
            "assistant",
            turn.content,
            tool_calls=turn.tool_calls,
            phase="act",
            run_id=ctx.run_id,
        )
    )
    if turn.tool_calls:
        await run_tool_calls(ctx, rec, step, turn.tool_calls)


async def _observe(ctx: RunContext, rec: RunRecorder, step: int) -> str | None:
    """Stream the Observe phase; return the final answer when the model wants to end."""
    _check_budget(rec)
    system = _system(ctx, rec, "agent_observe_prompt", step=step)
    content, block = await _stream_phase(ctx, rec, step, "observe", system, OBSERVE_KEYS)
    control = read_observe_control(block)
    if not content and control is not None:
        content = control.observation
    await rec.commit_stream(Message("assistant", content, phase="observe", run_id=ctx.run_id))
    await ctx.sink.emit(ObserveDone(step, content))
    if control is None or control.should_continue:
        return None
    return control.final_answer.strip() or content


async def _may_finish(ctx: RunContext, rec: RunRecorder, step: int, answer: str) -> bool:
    """Verify a suspect finish; a "not done" verdict becomes a note and the run goes on."""
    if not needs_verification(rec):
        return True
    _check_budget(rec)
    verdict = await verify_finish(ctx, rec, step, answer)
    ctx.metrics["verifications"] += 1
    await ctx.sink.emit(FinishVerified(step, verdict.done, verdict.reason))
    if verdict.done:
        return True
    ctx.metrics["verifications_not_done"] += 1
    note = (
        f"A check of the proposed answer found the task is not finished: {verdict.reason} "
        "Continue the work, or if it cannot be done, say plainly what failed."
    )
    await rec.add(Message("system", note, phase="verify", run_id=ctx.run_id))
    return False


async def _summarize(ctx: RunContext, rec: RunRecorder) -> str:
    system = _system(ctx, rec, "agent_summarize_prompt", step=rec.step)
    messages = await rec.messages(rec.step, "summarize", system)
    turn = await _complete_turn(ctx, rec, rec.step, "summarize", messages, ())
    return turn.content.strip() or (
        f"I reached the limit of {ctx.limits.max_steps} steps before finishing this task."
    )


async def _complete(
    ctx: RunContext,
    rec: RunRecorder,
    steps: int,
    final_answer: str,
    stop_reason: CompletionReason,
) -> None:
    await rec.add(Message("assistant", final_answer, phase="final", run_id=ctx.run_id))
    await ctx.sink.emit(RunCompleted(steps, final_answer, stop_reason, rec.usage_report()))


def _check_budget(rec: RunRecorder) -> None:
    if rec.over_budget():
        raise _BudgetSpent


def _budget_answer(rec: RunRecorder) -> str:
    """A final answer from what the run has, without spending another call."""
    found = next(
        (
            m.content
            for m in reversed(rec.conversation)
            if m.run_id == rec.ctx.run_id and m.phase == "observe" and m.content
        ),
        "",
    )
    answer = "I had to stop here because this task used up its budget."
    if found:
        answer += f" What I found so far: {found}"
    failures = rec.ledger.unresolved_failures()
    if failures:
        answer += " Not everything worked: " + "; ".join(
            f"{r.name} failed ({r.detail})" for r in failures
        )
    return answer


def _planning_due(ctx: RunContext, rec: RunRecorder, step: int) -> bool:
    every = ctx.limits.plan_every
    if every <= 0:
        return False
    failed_last_step = any(r.step == step - 1 for r in rec.ledger.unresolved_failures())
    return (step - 1) % every == 0 or failed_last_step


def _plan_steps(block: dict[str, object] | None) -> tuple[str, ...]:
    steps = (block or {}).get("plan_steps")
    if not isinstance(steps, list):
        return ()
    return tuple(s.strip() for s in steps if isinstance(s, str) and s.strip())[:8]


def _system(ctx: RunContext, rec: RunRecorder, prompt: str, *, step: int, **values: object) -> str:
    """The one system message of a phase: base rules, the phase, the plan, failures."""
    parts = [
        ctx.prompts.render("system", today=datetime.now(UTC).date().isoformat()),
        ctx.prompts.render(prompt, step=step, max_steps=ctx.limits.max_steps, **values),
    ]
    if rec.plan:
        parts.append(
            "## Your plan\n" + "\n".join(f"{i}. {item}" for i, item in enumerate(rec.plan, start=1))
        )
    note = rec.ledger.failure_note()
    if note:
        parts.append(note)
    return "\n\n".join(p for p in parts if p)


def _state(ctx: RunContext, rec: RunRecorder, step: int) -> str:
    plan = "; ".join(rec.plan) if rec.plan else "see your last message"
    return (
        f"[Current state] Step {step} of {ctx.limits.max_steps}. Plan: {plan}.\n"
        f"Tool calls so far in this task:\n{rec.ledger.summary()}"
    )


async def _stream_phase(
    ctx: RunContext, rec: RunRecorder, step: int, phase: str, system: str, keys: frozenset[str]
) -> tuple[str, dict[str, object] | None]:
    """Stream a Reason/Observe reply; if its control block is missing, ask for the block
    alone (up to `control_retries` times, not shown to the user), then fall back to text."""
    stream = ControlStream(keys)
    content = await stream_text(ctx, rec, step, phase, system, stream)
    block = stream.control
    for _ in range(ctx.limits.control_retries if block is None else 0):
        ctx.metrics["control_block_retries"] += 1
        _check_budget(rec)
        hint = ctx.prompts.render("control_block_hint", keys=", ".join(sorted(keys)))
        retry = [Message("assistant", content), Message("user", hint)]
        messages = await rec.messages(step, "repair", system, retry)
        turn = await _complete_turn(ctx, rec, step, "repair", messages, ())
        block = split_control(turn.content, keys)[1]
        if block is not None:
            break
    if block is None:
        ctx.metrics["control_block_fallbacks"] += 1
    return content, block


async def stream_text(
    ctx: RunContext, rec: RunRecorder, step: int, phase: str, system: str, stream: ControlStream
) -> str:
    """Stream a tool-free call through `stream`, emitting the shown text as deltas.

    The recorder stays in streaming state: the caller ends it with `commit_stream`.
    """
    make_delta = ReasonDelta if phase == "reason" else ObserveDelta
    messages = await rec.messages(step, phase, system)
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
    messages: list[Message],
    tools: Sequence[ToolSpec],
) -> ModelTurn:
    """Make one call whose text is not shown while it streams; return the whole turn."""
    turn = ModelTurn("")
    async for item in ctx.model.stream(messages, tools=tools, call=ctx.call(step, phase)):
        if isinstance(item, ModelTurn):
            turn = item
    rec.count(phase, turn.prompt_tokens, turn.completion_tokens)
    return turn
