"""run_agent: the strict reason → act → observe loop of docs/wire-protocol.md.

Every step has all three phases, in order. Reason and Observe stream one JSON object whose
shown field the user reads as it comes; Act is the only phase that may call tools, and is
asked as a plain tool loop asks (the conversation alone). Every call of a run shares one
prefix, so a provider's prompt cache reuses it: the same system message, the same tool list
(Reason sends it with `tool_choice: "none"`; Observe, which read the tools' descriptions as
results, sends none), then the task; what differs per phase (its instructions, the plan, a
note on failed calls) is the last, user-side message (docs/prompts.md). When Observe ends the
run, its `final_answer` is the answer, streamed as `AnswerDelta`s.

A run that wants to finish while failures are unresolved (or without any tool having done
what Reason said was needed) is checked by an isolated verify call first; a "not done"
verdict sends it into another step. Before each LLM call the run's budget is checked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from agent import clock
from agent.acting import RECALL_DETAILS_SPEC, REQUEST_INPUT, REQUEST_INPUT_SPEC, run_tool_calls
from agent.calling import call_model
from agent.echo import EchoGate, copied_from, own_words
from agent.events import (
    AnswerDelta,
    CompletionReason,
    FinishVerified,
    ObserveDelta,
    ObserveDone,
    PlanMade,
    ReasonDelta,
    ReasonDone,
    RunCompleted,
    RunStarted,
)
from agent.findings import (
    budget_answer,
    failures_unsaid,
    no_progress_answer,
    step_limit_answer,
    stuck_answer,
)
from agent.grounding import figures_grounded, figures_made_up, unchecked_figures
from agent.messages import Message, ToolCall
from agent.metrics import Metric
from agent.parsing import (
    OBSERVE_KEYS,
    REASON_KEYS,
    ControlStream,
    ReasonControl,
    observe_ends_run,
    read_loose_control,
    read_observe_control,
    read_reason_control,
    split_control,
)
from agent.ports import ToolSpec
from agent.research import research_first_task
from agent.run import RunContext, RunRecorder
from agent.stopping import stop_recorded
from agent.structured import PhaseStream, call_schema, observe_schema, reason_schema
from agent.textcalls import read_text_tool_calls
from agent.verify import needs_verification, verify_finish

__all__ = ["run_agent", "stream_text", "system_message"]


class _BudgetSpent(Exception):
    """The run's budget is used up: finish with what it has."""


async def run_agent(ctx: RunContext, history: Sequence[Message]) -> None:
    """Run the agent loop over `history` (which ends with the user's task) until it ends.

    Ends with `agent_completion`, or with `agent_stopped` after a stop or an unanswered
    question. Raises ModelError or StorageError when the run cannot go on.
    """
    recorder = RunRecorder(ctx, history)
    async with stop_recorded(ctx, recorder):
        await _steps(ctx, recorder)


async def _steps(ctx: RunContext, rec: RunRecorder) -> None:
    max_steps = ctx.limits.max_steps
    await ctx.sink.emit(RunStarted(max_steps))
    tools = [*ctx.tools.specs(ctx.tool_names), REQUEST_INPUT_SPEC]
    system = system_message(
        ctx, "agent_system", style=ctx.prompts.render(f"style_{ctx.limits.style}")
    )
    asked = [*_named_in_task(rec, tools), *_link_readers(rec, tools)]
    rec.expect_tools(t for t in asked if t != REQUEST_INPUT)  # a question is no result
    if ctx.research is not None:
        await research_first_task(ctx, rec, ctx.research)
    try:
        for step in range(1, max_steps + 1):
            await rec.start_step(step)
            control = await _reason(ctx, rec, step, system, tools)
            failed = _failed_last_step(rec, step)  # "I can answer" after errors: try again
            # an answer sent back for its figures: "I can answer" is that answer again
            due = failed or rec.call_wanted or rec.expected_tool_unused
            if control is None or not control.finish or due:
                named = _named(control, tools)
                plan = control.plan if control is not None else ""
                await _act(ctx, rec, step, system, tools, named, asked, plan)
            final_answer = await _observe(ctx, rec, step, system)
            if final_answer is None and _observed_again(rec, step):  # no progress: say so
                ctx.metrics[Metric.RUNS_STUCK] += 1
                await _complete(ctx, rec, step, no_progress_answer(rec), "stuck")
                return
            if final_answer is not None and await _may_finish(ctx, rec, step, final_answer, system):
                caveats = unchecked_figures(rec, final_answer, system)
                caveats += failures_unsaid(rec, final_answer)
                if caveats and rec.answer_streamed:  # the deltas add up to the answer
                    await ctx.sink.emit(AnswerDelta(step, caveats))
                final_answer += caveats
                await _complete(ctx, rec, step, final_answer, "finished")
                return
            if rec.ledger.stuck(step, ctx.limits.stuck_steps):  # no progress: say so, stop
                ctx.metrics[Metric.RUNS_STUCK] += 1
                await _complete(ctx, rec, step, stuck_answer(rec), "stuck")
                return
        _check_budget(rec)
        await _complete(ctx, rec, max_steps, await _summarize(ctx, rec, system, tools), "max_steps")
    except _BudgetSpent:
        ctx.metrics[Metric.RUNS_OVER_BUDGET] += 1
        await _complete(ctx, rec, rec.step, budget_answer(rec), "budget")


def _observed_again(rec: RunRecorder, step: int) -> bool:
    """A step that called nothing and observed, word for word, what the step before it
    observed has made no progress, and the next one would make none either (a small model
    says "continue" with the answer in hand, step after step, until max_steps). Nothing
    observed twice counts too: Qwen2.5-0.5B read the instructions back (never shown) for
    ten steps after a failed call, and its step-limit answer then looped."""
    if step < 2 or any(r.step == step for r in rec.ledger.records):
        return False
    seen = [
        " ".join(m.content.split()).lower()
        for m in rec.conversation
        if m.run_id == rec.ctx.run_id and m.phase == "observe"
    ]
    return len(seen) >= 2 and seen[-1] == seen[-2]


async def _reason(
    ctx: RunContext, rec: RunRecorder, step: int, system: str, tools: list[ToolSpec]
) -> ReasonControl | None:
    """Stream the Reason phase; return its block (`finish`: the model can answer now)."""
    _check_budget(rec)
    planning = _planning_due(ctx, rec, step)
    instruction = _instruction(
        ctx,
        rec,
        "agent_reason_prompt",
        step=step,
        tools=", ".join(t.name for t in tools),
        extra=ctx.prompts.render("agent_plan_prompt") if planning else "",
    )
    schema = reason_schema(
        [t.name for t in tools], plan_steps=planning, may_finish=not _first_look(rec, tools)
    )
    content, block, _ = await _stream_phase(
        ctx, rec, step, "reason", system, instruction, tools, schema, REASON_KEYS | {"plan_steps"}
    )
    control = read_reason_control(block)
    if not content and control is not None:  # only the block: its plan is what the user reads
        content = own_words(
            control.plan, *_ours(rec, system, [instruction]), descriptions=_described(tools)
        )
    await rec.commit_stream(Message("assistant", content, phase="reason", run_id=ctx.run_id))
    await ctx.sink.emit(ReasonDone(step, content))
    if control is not None:
        rec.expect_tools(t for t in _named(control, tools) if t != REQUEST_INPUT)
    plan = _plan_steps(block) if planning else ()
    if plan:
        rec.adopt_plan(plan)
        await ctx.sink.emit(PlanMade(step, plan))
    return control


def _named_in_task(rec: RunRecorder, tools: Sequence[ToolSpec]) -> list[str]:
    """The offered tools the user's task names. Until one call succeeds the run acts even
    when Reason says it can answer now (small models would answer without the tool the user
    asked for), and a finish is checked. Only names no sentence uses as a plain word count
    (`get_current_time`, `web.fetch`, not `search`)."""
    task = rec.task()
    named = (t.name for t in tools if not t.name.isalpha())
    present = [name for name in named if name in task]  # a substring search: cheap on any task
    if not present:
        return []
    words = {word.strip(".-") for word in _IDENTIFIER.findall(task)}
    return [name for name in present if name in words]


_IDENTIFIER = re.compile(r"[A-Za-z0-9_.\-]+")
_LINK = re.compile(r"\bhttps?://\S", re.IGNORECASE)


def _link_readers(rec: RunRecorder, tools: Sequence[ToolSpec]) -> list[str]:
    """The offered tools that read a link (a `url` or `urls` parameter), when the user's task
    holds one: a page the person points at is read, not guessed. Qwen2.5-0.5B answered "When
    does the library open? See http://…" with opening hours of its own, in Act and Observe
    alike, without a call."""
    if not _LINK.search(rec.task()):
        return []
    return [t.name for t in tools if _reads_links(t)]


def _links_in_sight(rec: RunRecorder, tools: list[ToolSpec]) -> list[ToolSpec]:
    """The tools Act may be asked for by schema: a tool that reads links only when a link is
    in sight (the person's messages or a result hold one). Asked by schema, a model must
    write some call, and a link it has to make up is a guess: Qwen2.5-0.5B, asked Oslo's
    weather with `get_weather` offered, fetched api.openweathermap.org with YOUR_API_KEY in
    the URL. A native call may still read any link the model knows."""
    if any(_LINK.search(m.content) for m in rec.conversation if m.role in ("user", "tool")):
        return tools
    return [t for t in tools if not _reads_links(t)]


def _reads_links(tool: ToolSpec) -> bool:
    return bool({"url", "urls"} & set(tool.parameters.get("properties") or {}))


def _named(control: ReasonControl | None, tools: Sequence[ToolSpec]) -> list[str]:
    """The offered tools that Reason's block named, in its order. A list of most of the
    offered tools (a small model copies the whole list it was given) chooses nothing."""
    offered = {t.name for t in tools}
    named = list(
        dict.fromkeys(t for t in (control.tools_to_consider if control else ()) if t in offered)
    )
    return [] if len(named) >= 4 and len(named) * 2 > len(offered) else named


async def _act(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    system: str,
    tools: list[ToolSpec],
    named: Sequence[str],
    asked: Sequence[str] = (),
    plan: str = "",
) -> None:
    """Let the model call tools.

    Act is asked as a plain tool loop asks: the conversation with the task, the calls and
    their results, and no instructions of ours (agent/history.py), so that the last thing the
    model reads is the task or a result. Small models choose the right tool from that form,
    the one they were trained on, far more often than from a request with our directives, a
    plan or a JSON schema in it (docs/models.md). Calls written as text are read like native
    ones (agent/textcalls.py).

    When that reply calls nothing although a call is wanted (Reason named a tool, the user's
    message names one no call has used, or the reply is a call that could not be read, cut
    off or malformed), the call is asked for again as JSON of the call schema
    (agent/structured.py), where the server takes a `response_format`: it can then only
    write an offered tool with arguments of its schema, or "none". The text of a reply
    without a call is kept, for Observe to read; beside a call, or when it is an unreadable
    call, it is dropped (a small model's "I will look it up in the address book", and the
    JSON of a call cut short, were read back as findings).
    """
    _check_budget(rec)
    if rec.results_cut:  # something was cut to fit: let the model read more of it
        tools = [*tools, RECALL_DETAILS_SPEC]
    tools = _asked_first(rec, tools, asked)
    sent_back = rec.take_call_wanted()
    by_schema = getattr(ctx.model, "structured_output", False)  # optional
    calls: tuple[ToolCall, ...] = ()
    content = ""
    if not (sent_back and by_schema):  # the plain request has no room for why: by schema
        calls, content = await _call_natively(ctx, rec, step, system, tools)
    if _sprayed(calls, tools):  # the tool list called through is no choice: ask by schema
        ctx.metrics[Metric.SPRAYED_CALLS_DROPPED] += len(calls)
        calls, content = (), ""
    attempted = not calls and _call_attempt(content, tools)
    made_up = not calls and not attempted and figures_made_up(ctx, rec, content, system)
    if calls or attempted or made_up:  # the call is the act: the rest only misleads Observe
        content = ""
    if made_up:
        ctx.metrics[Metric.ACT_TEXTS_UNGROUNDED] += 1
    wanted = (
        sent_back
        or bool(named)
        or bool(_unused(rec, named, asked))
        or attempted
        or made_up
        or _failed_last_step(rec, step)
    )
    if not calls and wanted and by_schema:
        state = _state(ctx, rec, step, named, asked, plan)
        instruction = _instruction(ctx, rec, "agent_act_prompt", step=step, state=state)
        offered = _links_in_sight(rec, tools)
        calls = await _call_by_schema(ctx, rec, step, system, instruction, offered)
        content = "" if calls else content  # a call replaces what was said instead of one
    if not calls and not content.strip():
        return
    await rec.add(Message("assistant", content, tool_calls=calls, phase="act", run_id=ctx.run_id))
    if calls:
        await run_tool_calls(ctx, rec, step, calls)


async def _call_by_schema(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    system: str,
    instruction: Message,
    tools: list[ToolSpec],
) -> tuple[ToolCall, ...]:
    """Act's call asked for as JSON of the call schema."""
    ask = Message("user", ctx.prompts.render("agent_act_json_prompt"), phase="instruction")
    turn = await call_model(
        ctx,
        rec,
        step,
        "act",
        lambda: rec.messages(step, "act", system, [instruction, ask]),
        tools=tools,
        tool_choice="none",
        response_format=call_schema(tools),
    )
    # a server that ignores the format may still answer with a native call
    calls = rec.own_call_ids(turn.tool_calls)
    calls = calls or read_text_tool_calls(turn.content, {t.name for t in tools})[0]
    ctx.metrics[Metric.SCHEMA_TOOL_CALLS] += len(calls)
    return calls


async def _call_natively(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    system: str,
    tools: list[ToolSpec],
) -> tuple[tuple[ToolCall, ...], str]:
    """Act's call as a tool call of the API (or written as text), asked of the conversation
    alone: (the calls, its text)."""
    turn = await call_model(
        ctx,
        rec,
        step,
        "act",
        lambda: rec.messages(step, "act", system, own_thinking=False),
        tools=tools,  # not "required": llama.cpp then pads the call with newlines
    )
    calls, content = rec.own_call_ids(turn.tool_calls), turn.content
    ctx.metrics[Metric.NATIVE_TOOL_CALLS] += len(calls)
    if not calls:
        calls, content = read_text_tool_calls(content, {t.name for t in tools})
        ctx.metrics[Metric.TEXT_TOOL_CALLS] += len(calls)
    return calls, content


def _asked_first(rec: RunRecorder, tools: list[ToolSpec], asked: Sequence[str]) -> list[ToolSpec]:
    """Until a tool the person's message asks for (by its name, or by a link to read) has
    been used, Act is offered those tools alone (and `request_input`): the person chose
    them. Qwen2.5-0.5B, asked what a linked page says, called the clock instead and then
    answered from its own idea of the page."""
    pending = set(_unused(rec, (), asked))
    if not pending:
        return tools
    return [t for t in tools if t.name in pending or t.name == REQUEST_INPUT]


def _sprayed(calls: Sequence[ToolCall], tools: Sequence[ToolSpec]) -> bool:
    """One reply calling most of the offered tools, one each, has called the list through
    (Qwen2.5-0.5B called all eight of `make eval` at once, `memory_save` of made-up facts
    among them): like such a list in Reason's block (`_named`), it chooses nothing."""
    names = {c.name for c in calls}
    return len(names) >= 4 and len(names) * 2 > len({t.name for t in tools})


def _call_attempt(text: str, tools: Sequence[ToolSpec]) -> bool:
    """Text that names an offered tool beside a brace: a call written out that could not be
    read (cut off at the token bound, or malformed), not words for the person."""
    return "{" in text and any(t.name in text for t in tools)


def _failed_last_step(rec: RunRecorder, step: int) -> bool:
    """The step before this one ended with calls that failed, and none has succeeded since:
    a corrected call is wanted, as a plain tool loop's model reads the error and calls
    again. Qwen2.5-0.5B asked for "Asia/London", read that the zone is unknown, and called
    nothing more; the run ended stuck."""
    return any(r.step == step - 1 for r in rec.ledger.unresolved_failures())


def _first_look(rec: RunRecorder, tools: Sequence[ToolSpec]) -> bool:
    """No tool has been called in this run yet (a question to the person included).
    Until then Reason's schema does not let it finish (small models "finish" with an answer
    made up instead of looked up): whether a tool is needed is Act's to decide, with the
    tools in hand, and Act may answer "none"."""
    return not rec.ledger.records and bool(tools)


def _unused(rec: RunRecorder, named: Sequence[str], asked: Sequence[str]) -> list[str]:
    """The tools the user's task names that Reason left out and no call has used yet."""
    used = {record.name for record in rec.ledger.successes()}
    return [t for t in asked if t not in named and t not in used]


async def _observe(ctx: RunContext, rec: RunRecorder, step: int, system: str) -> str | None:
    """Stream the Observe phase; return the final answer when the model wants to end.

    Observe is sent no tools: it calls none, and with the tools' descriptions beside the
    results Qwen2.5-0.5B read a weather report out of a clock's answer (docs/models.md)."""
    _check_budget(rec)
    called = any(r.step == step for r in rec.ledger.records)
    # with nothing to read, "what the results say" had a small model make results up
    extra = "" if called else ctx.prompts.render("agent_observe_no_call")
    instruction = _instruction(ctx, rec, "agent_observe_prompt", step=step, extra=extra)
    content, block, answer = await _stream_phase(
        ctx, rec, step, "observe", system, instruction, [], observe_schema(), OBSERVE_KEYS
    )
    control = read_observe_control(block)
    prompt = _ours(rec, system, [instruction])
    if not content and control is not None:  # the observation: the answer's last resort
        # the instructions read back are not something the model found
        content = own_words(control.observation, *prompt)
    await rec.commit_stream(Message("assistant", content, phase="observe", run_id=ctx.run_id))
    await ctx.sink.emit(ObserveDone(step, content))
    if control is None or control.should_continue:
        return None
    final = answer or control.final_answer.strip()
    own = own_words(final, *prompt)  # as its gate let it stream
    if own or not final:
        return own or content or None  # nothing of its own to say: the run goes on
    # the instructions read back are no answer, and the run goes on
    if rec.answer_streamed:  # its first words passed the gate: the draft is withdrawn
        await ctx.sink.emit(FinishVerified(step, False, _COPIED_DRAFT))
        rec.discard_answer()
    return None


async def _may_finish(
    ctx: RunContext, rec: RunRecorder, step: int, answer: str, system: str
) -> bool:
    """Verify a suspect finish; a "not done" verdict becomes a note and the run goes on.
    An answer with figures no tool returned is sent back first (agent/grounding.py)."""
    if not await figures_grounded(ctx, rec, step, answer, system):
        return False
    if not needs_verification(rec):
        return True
    _check_budget(rec)
    verdict = await verify_finish(ctx, rec, step, answer)
    ctx.metrics[Metric.VERIFICATIONS] += 1
    await ctx.sink.emit(FinishVerified(step, verdict.done, verdict.reason))
    if verdict.done:
        return True
    ctx.metrics[Metric.VERIFICATIONS_NOT_DONE] += 1
    rec.discard_answer()  # the draft is not the answer: the run goes on
    note = ctx.prompts.render("agent_verify_note", reason=verdict.reason)
    await rec.add(Message("system", note, phase="verify", run_id=ctx.run_id))
    return False


def _ours(rec: RunRecorder, system: str, extra: Sequence[Message]) -> tuple[str, ...]:
    """Every text of ours a phase's call sent but the tools' descriptions (`_described`): the
    system message, its instructions, the notes the loop wrote into this run's conversation
    (a check's verdict, "continue the work…"). The model's to read, never to show as its own
    words: the streamed text and every fallback for it are held against the same texts."""
    run_id = rec.ctx.run_id
    notes = (m.content for m in rec.conversation if m.phase == "verify" and m.run_id == run_id)
    return (system, *(m.content for m in extra), *notes)


def _described(tools: Sequence[ToolSpec]) -> tuple[str, ...]:
    """The tools' descriptions, held against like `_ours`, their short sentences too."""
    return tuple(t.description for t in tools)


_COPIED_DRAFT = "The draft only repeated the instructions; the answer is built from the steps."


async def _summarize(ctx: RunContext, rec: RunRecorder, system: str, tools: list[ToolSpec]) -> str:
    """The extra call at max steps: the final answer, streamed as it is written. A control
    block the model writes anyway (small models copy the Observe format) is cut out."""
    step = rec.step
    instruction = _instruction(ctx, rec, "agent_summarize_prompt", step=step)
    stream = ControlStream(OBSERVE_KEYS)
    shown = await stream_text(ctx, rec, step, "summarize", system, [instruction], stream, tools)
    rec.end_stream()  # the answer is stored by _complete
    if not shown.strip():  # nothing, or its instructions read back (never shown)
        rec.discard_answer()  # the answer comes from the block or the fallback below
    control = read_observe_control(stream.control)
    answer = shown or (control.final_answer or control.observation if control else "")
    own = own_words(answer, *_ours(rec, system, [instruction]), descriptions=_described(tools))
    if own:
        return own
    if answer.strip():  # the prompt read back: the draft the client saw is withdrawn
        await ctx.sink.emit(FinishVerified(step, False, _COPIED_DRAFT))
        rec.discard_answer()
    return step_limit_answer(rec)


async def _complete(
    ctx: RunContext,
    rec: RunRecorder,
    steps: int,
    final_answer: str,
    stop_reason: CompletionReason,
) -> None:
    if not rec.answer_streamed:  # every answer arrives as deltas first, streamed or not
        await ctx.sink.emit(AnswerDelta(steps, final_answer))
    await rec.add(Message("assistant", final_answer, phase="final", run_id=ctx.run_id))
    await ctx.sink.emit(RunCompleted(steps, final_answer, stop_reason, rec.usage_report()))


def _check_budget(rec: RunRecorder) -> None:
    if rec.over_budget():
        raise _BudgetSpent


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


def system_message(ctx: RunContext, prompt: str, **values: object) -> str:
    """The one system message of a run: the same for every call, so it stays cacheable."""
    base = ctx.prompts.render("system", today=clock.today())
    return f"{base}\n\n{ctx.prompts.render(prompt, **values)}"


def _instruction(
    ctx: RunContext, rec: RunRecorder, prompt: str, *, step: int, **values: object
) -> Message:
    """The last, user-side message of a phase's call: its task, the plan, failed calls."""
    parts = [ctx.prompts.render(prompt, step=step, max_steps=ctx.limits.max_steps, **values)]
    if rec.plan:
        parts.append(
            "## Your plan\n" + "\n".join(f"{i}. {item}" for i, item in enumerate(rec.plan, start=1))
        )
    note = rec.ledger.failure_note()
    if note:
        parts.append(note)
    return Message("user", "\n\n".join(p for p in parts if p), phase="instruction")


def _state(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    named: Sequence[str],
    asked: Sequence[str],
    step_plan: str = "",
) -> str:
    """Act's state line: the request, the plan, the tools named or asked for, every call so
    far. The request is said again: a small model reads the last message most."""
    own = step_plan.strip()
    offered = [*ctx.tools.specs(ctx.tool_names), REQUEST_INPUT_SPEC]
    if own and copied_from(own, descriptions=_described(offered)):
        own = ""  # a tool's description read back is no plan
    plan = "; ".join(rec.plan) if rec.plan else (own or _reasoning_pointer(rec))
    request = " ".join(rec.task().split())
    request = request if len(request) <= 300 else request[:299] + "…"
    tools = f"Tools you named for this step: {', '.join(named)}.\n" if named else ""
    unused = _unused(rec, named, asked)
    if unused:  # Reason left them out (it may even have said it can answer without them)
        tools += f"Tools the user asked for: {', '.join(unused)}.\n"
    calls = f"\n{rec.ledger.summary()}" if rec.ledger.records else " none."
    return (
        f"[Current state] Step {step} of {ctx.limits.max_steps}. Request: {request}\n"
        f"Plan: {plan.rstrip('.')}.\n{tools}Tool calls so far in this task:{calls}"
    )


def _reasoning_pointer(rec: RunRecorder) -> str:
    """Without a plan, point at this step's reasoning, unless Reason wrote none (an empty
    message is left out of the call, so "your last message" would be the wrong one)."""
    last = rec.conversation[-1] if rec.conversation else None
    if last is not None and last.phase == "reason" and last.content.strip():
        return "see your last message"
    return "none written; choose the next action from the task"


async def _stream_phase(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    phase: str,
    system: str,
    instruction: Message,
    tools: list[ToolSpec],
    schema: dict[str, Any],
    keys: frozenset[str],
) -> tuple[str, dict[str, Any] | None, str]:
    """Stream a Reason/Observe reply, asked for as one JSON object of `schema`
    (agent/structured.py); if its control block is missing, ask for the block alone (up to
    `control_retries` times, not shown to the user), then fall back to text.
    Returns (the shown text, the block or None, the answer written after or in the block)."""
    if phase == "observe":
        stream = PhaseStream(
            keys, shown="observation", answer="final_answer", answer_after=observe_ends_run
        )
    else:
        stream = PhaseStream(keys, shown="thought")
    content = await stream_text(
        ctx, rec, step, phase, system, [instruction], stream, tools, response_format=schema
    )
    block = stream.control
    if block is None:  # `key: value` lines instead of JSON: small models do that
        content, block = read_loose_control(content, keys)
        ctx.metrics[Metric.CONTROL_BLOCK_LOOSE] += block is not None
    hint = ctx.prompts.render("control_block_hint", keys=", ".join(sorted(keys)))
    retry = [instruction, Message("assistant", content), Message("user", hint)]
    for _ in range(ctx.limits.control_retries if block is None else 0):
        ctx.metrics[Metric.CONTROL_BLOCK_RETRIES] += 1
        _check_budget(rec)
        turn = await call_model(
            ctx,
            rec,
            step,
            "repair",
            lambda: rec.messages(step, "repair", system, retry),
            tools=tools,
            tool_choice="none",
            response_format=schema,
        )
        block = split_control(turn.content, keys)[1] or read_loose_control(turn.content, keys)[1]
        if block is not None:
            break
    if block is None:
        ctx.metrics[Metric.CONTROL_BLOCK_FALLBACKS] += 1
    return content, block, stream.answer


async def stream_text(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    phase: str,
    system: str,
    extra: Sequence[Message],
    stream: ControlStream | PhaseStream,
    tools: Sequence[ToolSpec] = (),
    *,
    response_format: dict[str, Any] | None = None,
) -> str:
    """Stream a call that may not use tools through `stream`, emitting the shown text as
    deltas (and the answer after an answer-starting block as `AnswerDelta`s); everything the
    max-steps summary shows is answer.

    The recorder stays in streaming state: the caller ends it with `commit_stream`.
    """
    deltas = {"reason": ReasonDelta, "observe": ObserveDelta, "summarize": AnswerDelta}
    make_delta = deltas[phase]
    rec.begin_stream(phase)
    gate = EchoGate(*_ours(rec, system, extra), descriptions=_described(tools))
    answer_gate = gate.twin()  # the answer of a JSON object is held the same way

    def object_reply() -> bool:
        """The reply is one JSON object: its fields are the model's own writing."""
        return isinstance(stream, PhaseStream) and stream.is_object

    async def show(shown: str, *, ending: bool = False) -> None:
        """Emit text that may be shown (through the gate already), and answer text (through
        its own gate in a JSON object, released whole when the reply is `ending`)."""
        if shown:
            rec.add_streamed(shown, answer=make_delta is AnswerDelta)
            await ctx.sink.emit(make_delta(step, shown))
        answer = stream.take_answer()
        if object_reply():
            answer = answer_gate.feed(answer) + (answer_gate.finish() if ending else "")
        if answer:
            rec.add_streamed(answer, answer=True)
            await ctx.sink.emit(AnswerDelta(step, answer))

    def gated() -> EchoGate | None:
        """The gate, for what the model writes itself: a field of one JSON object, or the
        max-steps answer (prose a scripted reply is not held in)."""
        return gate if object_reply() or phase == "summarize" else None

    async def feed(piece: str) -> None:
        shown = stream.feed(piece)
        active = gated()
        await show(active.feed(shown) if active is not None else shown)

    await call_model(
        ctx,
        rec,
        step,
        phase,
        # Observe reads the results, not what was said before them: a small model's thought
        # ("it is 24°C in Oslo", before any call) was read back as the finding.
        lambda: rec.messages(step, phase, system, extra, own_thinking=phase != "observe"),
        tools=tools,
        tool_choice="none",
        response_format=response_format,
        on_text=feed,
        enough=lambda: stream.settled,
    )
    last = stream.finish()
    active = gated()
    if active is not None:
        last = active.feed(last) + active.finish()
    await show(last, ending=True)
    if active is not None and active.dropped:  # the instructions read back are not its words
        return active.shown.strip()
    return stream.content
