"""What every run shares: its collaborators, its conversation, and a clean stop.

`RunRecorder` owns the run's state and keeps just enough bookkeeping that a run cut short at
any await still leaves a conversation an LLM API accepts: the text streamed so far is stored,
every tool call the model made gets a result, every `tool_start` gets its `tool_error`, and a
note tells the model later that the run was stopped. agent/stopping.py decides when.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agent.budget import Budget
from agent.clock import now_ms as wall_clock_ms
from agent.context import ContextWindow, EarlierTurns
from agent.control import RunControl
from agent.events import (
    AgentEvent,
    ContextTrimmed,
    ModelRetrying,
    RunStopped,
    StepStarted,
    StopReason,
    ToolFailed,
    ToolStarted,
)
from agent.history import build_messages
from agent.ledger import CallLedger
from agent.messages import Message, ToolCall, Usage
from agent.metrics import Metric, Metrics
from agent.own_tools import OWN_TOOL_SPECS
from agent.ports import (
    CallInfo,
    ChatModel,
    EventSink,
    ModelTurn,
    PromptProvider,
    RetryNotice,
    Toolbox,
    ToolContext,
    Transcript,
)

Search = Callable[[str, ToolContext], Awaitable[Any]]

__all__ = [
    "RunContext",
    "RunInterrupted",
    "RunLimits",
    "RunRecorder",
    "Search",
    "Style",
    "stop_note",
]

_STOP_NOTES: dict[StopReason, str] = {
    "user": "The user stopped the previous run at step {step}, before it finished.",
    "input_timeout": "The previous run ended at step {step}: the user did not answer the question.",
    "shutdown": "The previous run was ended at step {step} because the server shut down.",
    "interrupted": "The previous run was cut off at step {step}: the server running it stopped.",
    "run_timeout": "The previous run was ended at step {step}: it ran longer than its time limit.",
}


def stop_note(reason: StopReason, step: int, run_id: str, *, stepless: bool = False) -> Message:
    """The note that tells the model, on the next run, how this one ended. A `stepless` run
    (chat mode: a reply, maybe with tools) has begun even at step 0."""
    text = _STOP_NOTES[reason].format(step=step)
    if stepless:
        text = text.replace(" at step 0,", "").replace(" at step 0", "")
    elif not step:  # stopped before the loop began
        text = text.replace("at step 0, before it finished", "before it began")
        text = text.replace("at step 0", "before it began")
    return Message("system", text, phase="stop", run_id=run_id)


_CUT_SHORT: dict[StopReason, str] = {
    "user": "Not completed: the user stopped the run before this call finished.",
    "input_timeout": "Not completed: the run ended because the user did not answer.",
    "shutdown": "Not completed: the server shut down before this call finished.",
    "interrupted": "Not completed: the server running this call stopped before it finished.",
    "run_timeout": "Not completed: the run reached its time limit before this call finished.",
}


Style = Literal["balanced", "tool_first", "direct"]

_PLAN_ITEM_CHARS = 200


@dataclass(frozen=True, slots=True)
class RunLimits:
    """How one run may behave: its limits, budget, planning rhythm and reasoning style."""

    max_steps: int = 10
    request_input_timeout_s: float = 300.0
    tool_timeout_s: float = 30.0
    tool_result_max_bytes: int = 262_144  # a tool's result or error as JSON; longer is cut
    reply_max_chars: int = 200_000  # of one model reply's text; the call is closed there
    chat_tool_rounds: int = 5
    budget: Budget = field(default_factory=Budget)
    plan_every: int = 0  # 0: no rolling plan
    style: Style = "balanced"
    max_verifications: int = 1
    stuck_steps: int = 3  # steps in a row that only repeat failed calls end the run; 0: never
    control_retries: int = 2
    approval_timeout_s: float = 300.0


@dataclass(slots=True)
class RunContext:
    """Everything one run needs, injected by the transport."""

    session_id: str
    run_id: str
    tenant_id: str
    user_id: str
    model: ChatModel
    tools: Toolbox
    prompts: PromptProvider
    sink: EventSink
    transcript: Transcript
    control: RunControl
    limits: RunLimits = field(default_factory=RunLimits)
    tool_names: Sequence[str] | None = None
    now_ms: Callable[[], int] = wall_clock_ms
    metrics: Metrics = field(default_factory=Metrics)  # shared across runs by the host
    context: ContextWindow | None = None  # None: no token budget, every message is sent
    research: Search | None = None  # a web search before the session's first task
    needs_approval: Callable[[str], bool] | None = None  # tool name -> ask the user first

    def call(self, step: int, phase: str) -> CallInfo:
        """Who makes this model call; its retries are shown to the user as they happen."""

        async def on_retry(notice: RetryNotice) -> None:
            delay_ms = int(notice.delay_s * 1000)
            await self.sink.emit(
                ModelRetrying(
                    step, phase, notice.attempt, notice.max_attempts, notice.reason, delay_ms
                )
            )

        return CallInfo(self.session_id, self.run_id, step, phase, on_retry)


class RunInterrupted(Exception):
    """Raised inside a run to end it the way a stop does (e.g. an unanswered question)."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason)
        self.reason = reason


class RunRecorder:
    """The conversation of a run, plus what a stop must close.

    It is the one owner of the run's state: the loop says what happens (a step started, text
    was shown, a call started or ended, a model call was counted) and reads the rest back.
    """

    def __init__(
        self, ctx: RunContext, history: Sequence[Message], *, stepless: bool = False
    ) -> None:
        self._ctx = ctx
        self._stepless = stepless  # a chat-mode run: its stop is never "before it began"
        # Every tool call of the run and how it went; its lists fit the context budget.
        self._ledger = CallLedger(ctx.context.list_chars() if ctx.context else 0)
        self._conversation: list[Message] = list(history)
        self._usage = Usage()
        self._plan: tuple[str, ...] = ()
        self._expected_tools: set[str] = set()  # named by the task or by Reason's blocks
        self._verifications = 0
        self._figures_checked = False  # an answer's figures were held against what was read
        self._call_wanted = False  # the next Act asks for a call even if nothing named one
        self._withdrawn: set[int] = set()  # ids of this run's drafts the model no longer reads
        self._results_cut = False  # a tool result was cut to fit the context budget
        self._step = 0
        self._streaming: str | None = None  # the phase whose text is streaming now
        self._streamed: list[str] = []  # what that phase has shown so far
        self._answer_streamed = False  # answer deltas went out for the answer being written
        self._window_tokens: int | None = None  # the server's window, once said or refused
        self.window_asked = False  # the model server was asked for its window
        self._earlier = EarlierTurns()  # the turns before the run, built once for its calls
        self._tools_size: int | None = None  # tokens of the run's tool lists, once counted
        self._context_shown: tuple[object, ...] | None = None  # the last agent_context sent
        self._open_calls: dict[str, str] = {}  # tool_call_id -> name: tool_start, no end yet
        # Calls that ended while their end waits behind an earlier call (results are shown in
        # the model's order): what showing it will emit and store. A stop shows these.
        self._held: dict[str, Callable[[], tuple[AgentEvent, Message]]] = {}
        self._unanswered: dict[str, ToolCall] = {}  # calls made, no tool message stored yet
        self._call_ids = {c.id for m in self._conversation for c in m.tool_calls}  # see _track
        for message in self._conversation:  # a recovered run may have left calls open
            if message.run_id == ctx.run_id:
                self._track(message)

    # -- what the run has done so far ------------------------------------------------------

    @property
    def ctx(self) -> RunContext:
        return self._ctx

    @property
    def ledger(self) -> CallLedger:
        """Every tool call of the run and how it went; tools record their outcome in it."""
        return self._ledger

    @property
    def conversation(self) -> Sequence[Message]:
        return self._conversation

    @property
    def step(self) -> int:
        return self._step

    @property
    def plan(self) -> tuple[str, ...]:
        return self._plan

    @property
    def expected_tool_unused(self) -> bool:
        """Tools were expected (the user's task or Reason named them) and no call has
        succeeded yet: the run should act, and a finish now is suspect."""
        return bool(self._expected_tools) and not self._ledger.successes()

    @property
    def verifications(self) -> int:
        return self._verifications

    @property
    def results_cut(self) -> bool:
        return self._results_cut

    @property
    def window_tokens(self) -> int | None:
        return self._window_tokens

    @property
    def answer_streamed(self) -> bool:
        """True when the answer being completed has already gone out as `AnswerDelta`s."""
        return self._answer_streamed

    def task(self) -> str:
        """The user's message that started this run."""
        for message in reversed(self._conversation):
            if message.role == "user" and message.run_id == self._ctx.run_id:
                return message.content
        return ""

    def usage_report(self) -> dict[str, float | int]:
        return self._ctx.limits.budget.report(self._usage)

    def over_budget(self) -> bool:
        return self._ctx.limits.budget.exhausted(self._usage)

    # -- what happens ----------------------------------------------------------------------

    async def start_step(self, step: int) -> None:
        """Enter `step` and show it; a stop from here on is reported at this step."""
        self._step = step
        await self._ctx.sink.emit(StepStarted(step))

    def adopt_plan(self, plan: tuple[str, ...]) -> None:
        """Follow `plan` from now on. Every later instruction shows it, so each item keeps at
        most `_PLAN_ITEM_CHARS` characters: a model's long plan cannot outgrow the window."""
        self._plan = tuple(
            item if len(item) <= _PLAN_ITEM_CHARS else item[:_PLAN_ITEM_CHARS] + "…"
            for item in plan
        )

    def expect_tools(self, names: Iterable[str]) -> None:
        """The task or Reason named these tools: finishing without any call succeeding is
        suspect."""
        self._expected_tools.update(names)

    def count_verification(self) -> None:
        self._verifications += 1

    @property
    def figures_checked(self) -> bool:
        """An answer of this run was already sent back for figures no result gave."""
        return self._figures_checked

    def want_call(self) -> None:
        """An answer stated figures nothing the run read gave: the next Act asks for a call
        whether or not Reason names a tool. Once per run."""
        self._figures_checked = self._call_wanted = True

    def withdraw(self, drafts: Iterable[Message]) -> None:
        """These messages of the run (a draft sent back) stay stored, but no later call of
        the run reads them: a small model copies what it wrote before over what a tool
        returned since."""
        self._withdrawn.update(id(m) for m in drafts)

    @property
    def call_wanted(self) -> bool:
        """The next Act must ask for a call (see `want_call`), and so must run."""
        return self._call_wanted

    def take_call_wanted(self) -> bool:
        """Whether this Act must ask for a call (see `want_call`); asked once."""
        wanted, self._call_wanted = self._call_wanted, False
        return wanted

    def count(self, phase: str, turn: ModelTurn) -> None:
        """Add one model call's tokens to the run's usage."""
        self._usage.add(
            phase, turn.prompt_tokens, turn.completion_tokens, turn.cached_tokens, turn.estimated
        )

    async def add(self, message: Message) -> None:
        """Append to the conversation and persist it."""
        self._track(message)
        self._conversation.append(message)
        await self._ctx.transcript.append([message])

    def begin_stream(self, phase: str) -> None:
        """`phase` starts streaming text: a stop keeps what it shows; its answer is new."""
        self._streaming = phase
        self._streamed = []
        self._answer_streamed = False

    def add_streamed(self, text: str, *, answer: bool = False) -> None:
        """The streaming phase showed `text`; `answer`: as part of the final answer."""
        self._streamed.append(text)
        self._answer_streamed = self._answer_streamed or answer

    def discard_answer(self) -> None:
        """The answer streamed so far is not the one the run completes with: send it whole."""
        self._answer_streamed = False

    def end_stream(self) -> None:
        """The streaming phase is over and nothing of it needs keeping."""
        self._streaming = None
        self._streamed = []

    async def commit_stream(self, message: Message) -> None:
        """Store the finished phase's message; from here on a stop has nothing partial to keep."""
        self.end_stream()
        await self.add(message)

    async def open_call(self, step: int, call: ToolCall, arguments: dict[str, Any]) -> None:
        """Show that `call` started; until `close_call`, a stop reports it as failed."""
        self._open_calls[call.id] = call.name
        await self._ctx.sink.emit(ToolStarted(step, call.id, call.name, arguments))

    def close_call(self, call_id: str) -> None:
        """The call's end is being shown: a stop no longer reports it."""
        self._open_calls.pop(call_id, None)
        self._held.pop(call_id, None)

    def hold_end(self, call_id: str, shown: Callable[[], tuple[AgentEvent, Message]]) -> None:
        """The call ended, and its end waits to be shown: a stop shows it (what `shown`
        builds, only then) instead of reporting the call as not completed."""
        if call_id in self._open_calls:
            self._held[call_id] = shown

    def continue_from(self, step: int, started: Iterable[ToolCall]) -> None:
        """Take over a run another process began: it reached `step`, and showed `started`
        calls start without showing their end."""
        self._step = step
        self._open_calls = {call.id: call.name for call in started}

    def unanswered_calls(self) -> list[ToolCall]:
        """The run's tool calls that have no result in the conversation yet, in order."""
        return list(self._unanswered.values())

    def fit_window(self, server_window: int | None) -> None:
        """The model server said its window: later calls fit it when it is the smaller."""
        context = self._ctx.context
        if context is None or not server_window or server_window < 512:
            return
        current = self._window_tokens or context.window_tokens
        if server_window < current:
            self._window_tokens = server_window

    def shrink_window(self, server_window: int | None) -> bool:
        """After the server refused a prompt as too long: fit later calls into the window it
        named, or half the one used. False when there is no token budget to shrink."""
        context = self._ctx.context
        if context is None:
            return False
        current = self._window_tokens or context.window_tokens
        target = server_window if server_window and server_window < current else current // 2
        if target < 512:
            return False
        self._window_tokens = target
        self._ledger.room_chars = context.list_chars(target)
        return True

    async def messages(
        self,
        step: int,
        phase: str,
        system: str,
        extra: Sequence[Message] = (),
        *,
        own_thinking: bool = True,
    ) -> list[Message]:
        """The message list of one LLM call, fitted to the context budget (and said so).
        Without `own_thinking`, the run's reasoning and observations are left out
        (agent/history.py)."""
        ctx = self._ctx
        conversation = self._conversation
        if self._withdrawn:  # only this run's messages: the earlier turns keep their place
            conversation = [m for m in conversation if id(m) not in self._withdrawn]
        if ctx.context is None:
            built = build_messages(system, conversation, ctx.run_id, own_thinking=own_thinking)
            return [*built, *extra]
        messages, report = ctx.context.build(
            system,
            conversation,
            ctx.run_id,
            extra,
            window_tokens=self._window_tokens,
            earlier=self._earlier,
            tool_tokens=self._tool_tokens(ctx.context),
            own_thinking=own_thinking,
        )
        self._results_cut = self._results_cut or bool(report.compressed)
        shown = (
            tuple(item["result_id"] for item in report.compressed),
            report.dropped_messages,
            report.collapsed_steps,
            report.dropped_steps,
        )
        if report.changed and shown != self._context_shown:  # once per change, not per call
            self._context_shown = shown
            ctx.metrics[Metric.CONTEXT_TRIMS] += 1
            await ctx.sink.emit(
                ContextTrimmed(
                    step,
                    phase,
                    report.tokens,
                    report.budget,
                    report.exact,
                    tuple(report.compressed),
                    report.dropped_messages,
                    report.collapsed_steps,
                    report.dropped_steps,
                )
            )
        return messages

    def _tool_tokens(self, context: ContextWindow) -> int:
        """What the run's tool lists take of each call (the enabled tools and the loop's
        own, counted once per run): part of the request, so part of the budget."""
        if self._tools_size is None:
            specs = [*self._ctx.tools.specs(self._ctx.tool_names), *OWN_TOOL_SPECS]
            self._tools_size = context.tool_tokens(specs)
        return self._tools_size

    async def record_stop(self, reason: StopReason) -> None:
        """Close what the stop cut short: one write for the events (`tool_error` for every
        open call, then `agent_stopped`), then one for the messages (the text streamed so far,
        a result for every call, a note for the model). Two writes, so a stop is fast even
        when the store is busy."""
        ctx = self._ctx
        cut = _CUT_SHORT[reason]
        messages: list[Message] = []
        if self._streaming is not None:
            phase, text = self._streaming, "".join(self._streamed).strip()
            self.end_stream()
            if text:
                messages.append(
                    Message("assistant", text, phase=phase, status="stopped", run_id=ctx.run_id)
                )
        ended = {call_id: shown() for call_id, shown in self._held.items()}
        events: list[AgentEvent] = [  # in the model's order
            ended[call_id][0] if call_id in ended else ToolFailed(self._step, call_id, name, cut)
            for call_id, name in self._open_calls.items()
        ]
        messages += [
            ended[call.id][1]
            if call.id in ended
            else Message.tool_result(call, cut, status="stopped", error=cut, run_id=ctx.run_id)
            for call in self._unanswered.values()
        ]
        self._open_calls.clear()
        self._held.clear()
        messages.append(stop_note(reason, self._step, ctx.run_id, stepless=self._stepless))
        events.append(RunStopped(self._step, reason, self.usage_report()))
        for message in messages:
            self._track(message)
        self._conversation.extend(messages)
        await ctx.sink.emit_all(events)
        await ctx.transcript.append(messages)

    def own_call_ids(self, calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
        """`calls` with ids unique in the conversation: a model server that numbers its calls
        (`call_0` in every reply) or repeats an id in one reply would otherwise have two
        calls share one result, one approval and one question."""
        this_turn: set[str] = set()
        owned: list[ToolCall] = []
        for call in calls:
            if not call.id or call.id in self._call_ids or call.id in this_turn:
                call = replace(call, id=f"call_{uuid.uuid4().hex[:24]}")
            this_turn.add(call.id)
            owned.append(call)
        return tuple(owned)

    def _track(self, message: Message) -> None:
        if message.role == "tool" and message.tool_call_id:
            self._unanswered.pop(message.tool_call_id, None)
        if message.tool_calls:
            self._unanswered.update({c.id: c for c in message.tool_calls})
            self._call_ids.update(c.id for c in message.tool_calls)
