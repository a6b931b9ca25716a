"""A run's events (server/events.py: typed, as every transport gets them) translated into
AG-UI events: the one mapping table, listed by the frame `/ws` sends for each.

| our frame                                | AG-UI events                                      |
| ---------------------------------------- | ------------------------------------------------- |
| (stream opens)                           | RUN_STARTED (threadId the client's, runId run_id) |
| agent_turn_start                         | STEP_FINISHED (last step), STEP_STARTED "step N"  |
| agent_reason(_delta), agent_observe(_d.) | REASONING_START, REASONING_MESSAGE_START/CONTENT/ |
|                                          | END, REASONING_END: one message per phase         |
| agent_reasoning_delta (model thinking)   | the same, one message per step and phase          |
| agent_answer_delta                       | TEXT_MESSAGE_START (assistant), _CONTENT          |
| chat_delta / chat_response               | TEXT_MESSAGE_START / _CONTENT / _END              |
| tool_start                               | TEXT_MESSAGE_END of the text before it; TOOL_CALL_|
|                                          | START (parentMessageId that text), _ARGS, _END    |
| tool_complete / tool_error               | TOOL_CALL_RESULT (tool_error: "Error: ..."); none |
|                                          | for a client tool's result (the client sent it)   |
| agent_request_input / agent_tool_approval| CUSTOM, STEP_FINISHED, RUN_FINISHED "interrupt"   |
| agent_request_input of a client tool call| CUSTOM, STEP_FINISHED, RUN_FINISHED "success" with|
|                                          | pendingToolCallIds: every client call without a   |
|                                          | result (CUSTOM alone when the request has it)     |
| agent_verify (done: false)               | TEXT_MESSAGE_END (draft discarded), CUSTOM        |
| agent_completion                         | TEXT_MESSAGE_END, CUSTOM "agent_completion"       |
| agent_stopped                            | CUSTOM; then RUN_FINISHED "cancelled"             |
| error (llm/storage/internal)             | RUN_ERROR (code, message); the stream ends        |
| response_complete                        | RUN_FINISHED "success" (result: the answer...)    |
| anything else (plans, usage, context...) | CUSTOM, name = update_type (or type), value frame |

Every event carries the frame `/ws` sends for the event it came from as `rawEvent` (so `seq`
and every field survive). A message's id ends with the `seq` of the event that opened it:
unique in the thread, also across the streams of one run paused and resumed (a client merges
messages of one id).
Reason and Observe are reasoning messages, not text messages: AG-UI clients (CopilotKit's
chat among them) show reasoning apart from, and folded under, the assistant's reply, so only
the final answer reads as the reply, as in our own UI.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from agent.events import (
    AnswerDelta,
    ApprovalRequested,
    ChatDelta,
    ChatDone,
    FinishVerified,
    InputRequested,
    ObserveDelta,
    ObserveDone,
    ReasonDelta,
    ReasonDone,
    RunCompleted,
    RunStopped,
    StepStarted,
    ThinkingDelta,
    ToolCompleted,
    ToolFailed,
    ToolStarted,
)
from server.events import Event, RunEnded, RunFailed

__all__ = ["INPUT_REASON", "APPROVAL_REASON", "Translator", "step_name"]

INPUT_REASON = "input_required"
APPROVAL_REASON = "tool_approval"


def step_name(step: int) -> str:
    return f"step {step}"


def _iso(epoch_ms: Any) -> str | None:
    if not isinstance(epoch_ms, int):
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat().replace("+00:00", "Z")


class Translator:
    """Turn one run's frames into AG-UI events, keeping what is open so every run closes
    cleanly. Call `start` first; the stream is over once `done` is True."""

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        client_tools: frozenset[str] = frozenset(),
        *,
        client_calls: tuple[str, ...] = (),
        resolved: frozenset[str] = frozenset(),
        brought: frozenset[str] = frozenset(),
    ) -> None:
        """`client_calls`: calls of client tools made before this stream (the client's
        messages have them); `resolved`: calls whose results the client's messages have;
        `brought`: those this request brought (answered as their calls ask)."""
        self.thread_id = thread_id
        self.run_id = run_id
        self._client_tools = client_tools
        # Calls of client tools, which the client runs, in order (a dict: an ordered set).
        self._client_calls: dict[str, None] = dict.fromkeys(client_calls)
        self._brought = brought
        self._resolved = set(resolved)  # calls with a result: the client's, or shown here
        self.done = False
        self._step: int | None = None
        self._reasoning: tuple[str, str] | None = None  # the open reasoning: (key, id)
        self._answer: str | None = None  # the open assistant text message's id
        self._opened = 0  # messages opened by frames without a seq (tests)
        self._was_stopped = False
        self._result: dict[str, Any] | None = None

    def start(self, step: int | None = None) -> list[BaseEvent]:
        """RUN_STARTED, and STEP_STARTED again when resuming a run paused inside `step`."""
        events: list[BaseEvent] = [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)]
        if step:
            self._step = step
            events.append(StepStartedEvent(step_name=step_name(step)))
        return events

    def translate(self, at: Event) -> list[BaseEvent]:
        """The AG-UI events for one event of this run (none once the stream is done)."""
        if self.done:
            return []
        handler = _HANDLERS.get(type(at.event))
        events = handler(self, at.event, at) if handler is not None else self._custom(at)
        frame: dict[str, Any] | None = None
        for event in events:
            if event.raw_event is None and not isinstance(event, (RunStartedEvent,)):
                frame = frame or at.frame()  # the frame `/ws` sends for it
                event.raw_event = frame
        return events

    # -- pieces ---------------------------------------------------------------------------

    def _custom(self, at: Event) -> list[BaseEvent]:
        return [CustomEvent(name=at.wire_kind or "unknown", value=at.frame())]

    def _message_id(self, kind: str, at: Event) -> str:
        """A new message's id, unique in the thread: the seq of the event that opens it."""
        seq: int | str | None = at.seq
        if seq is None:
            self._opened += 1
            seq = f"n{self._opened}"
        return f"{self.run_id}-{kind}-{seq}"

    def _close_reasoning(self) -> list[BaseEvent]:
        if self._reasoning is None:
            return []
        _, message_id = self._reasoning
        self._reasoning = None
        return [
            ReasoningMessageEndEvent(message_id=message_id),
            ReasoningEndEvent(message_id=message_id),
        ]

    def _open_reasoning(self, key: str, at: Event) -> tuple[str, list[BaseEvent]]:
        """The id of the reasoning message `key` names (a step's phase), opened if need be."""
        if self._reasoning is not None and self._reasoning[0] == key:
            return self._reasoning[1], []
        events = self._close_reasoning()
        message_id = self._message_id(key, at)
        self._reasoning = (key, message_id)
        events += [
            ReasoningStartEvent(message_id=message_id),
            ReasoningMessageStartEvent(message_id=message_id),
        ]
        return message_id, events

    def _close_answer(self) -> list[BaseEvent]:
        if self._answer is None:
            return []
        message_id, self._answer = self._answer, None
        return [TextMessageEndEvent(message_id=message_id)]

    def _append_answer(self, delta: str, at: Event) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        if self._answer is None:
            self._answer = self._message_id("answer", at)
            events.append(TextMessageStartEvent(message_id=self._answer, role="assistant"))
        events.append(TextMessageContentEvent(message_id=self._answer, delta=delta))
        return events

    def _close_all(self) -> list[BaseEvent]:
        events = self._close_reasoning() + self._close_answer()
        if self._step is not None:
            events.append(StepFinishedEvent(step_name=step_name(self._step)))
            self._step = None
        return events

    def _finish(self, outcome: Any, result: Any = None) -> list[BaseEvent]:
        self.done = True
        events = self._close_all()
        events.append(
            RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, result=result
            )
        )
        return events

    # -- handlers: one per kind of event, by its class ------------------------------------

    def _turn_start(self, happened: StepStarted, at: Event) -> list[BaseEvent]:
        events = self._close_all()
        self._step = happened.step
        events.append(StepStartedEvent(step_name=step_name(self._step)))
        return events

    def _reasoning_text(self, happened: _Reasoning, at: Event) -> list[BaseEvent]:
        phase = "reason" if isinstance(happened, ReasonDelta | ReasonDone) else "observe"
        key = f"{happened.step}-{phase}"
        is_open = self._reasoning is not None and self._reasoning[0] == key
        if isinstance(happened, ReasonDelta | ObserveDelta):
            message_id, events = self._open_reasoning(key, at)
            events.append(ReasoningMessageContentEvent(message_id=message_id, delta=happened.delta))
            return events
        events = []
        if not is_open and happened.content:  # nothing was streamed
            message_id, events = self._open_reasoning(key, at)
            events.append(
                ReasoningMessageContentEvent(message_id=message_id, delta=happened.content)
            )
            is_open = True
        return events + (self._close_reasoning() if is_open else [])

    def _thinking(self, happened: ThinkingDelta, at: Event) -> list[BaseEvent]:
        key = f"{happened.step}-thinking-{happened.phase}"
        message_id, events = self._open_reasoning(key, at)
        events.append(ReasoningMessageContentEvent(message_id=message_id, delta=happened.delta))
        return events

    def _answer_delta(self, happened: AnswerDelta | ChatDelta, at: Event) -> list[BaseEvent]:
        return self._append_answer(happened.delta, at)

    def _chat_response(self, happened: ChatDone, at: Event) -> list[BaseEvent]:
        return self._close_answer()  # its content is its deltas', all sent as they came

    def _tool_start(self, happened: ToolStarted, at: Event) -> list[BaseEvent]:
        """The text before a call is its assistant message (chat mode): it ends here, and the
        call names it as its parent, as the client's own message list has it."""
        call_id = happened.call_id
        if happened.name in self._client_tools:
            self._client_calls[call_id] = None
        parent = self._answer
        events = self._close_reasoning() + self._close_answer()
        events += [
            ToolCallStartEvent(
                tool_call_id=call_id, tool_call_name=happened.name, parent_message_id=parent
            ),
            ToolCallArgsEvent(
                tool_call_id=call_id, delta=orjson.dumps(happened.arguments).decode()
            ),
            ToolCallEndEvent(tool_call_id=call_id),
        ]
        return events

    def _tool_result(self, happened: ToolCompleted | ToolFailed, at: Event) -> list[BaseEvent]:
        call_id = happened.call_id
        self._resolved.add(call_id)
        if isinstance(happened, ToolFailed):
            content = f"Error: {happened.error}"
        elif call_id in self._client_calls:
            return []  # the client's own result: its messages have it already
        else:
            result = happened.result
            content = result if isinstance(result, str) else orjson.dumps(result).decode()
        return [
            ToolCallResultEvent(
                message_id=f"{call_id}-result", tool_call_id=call_id, content=content, role="tool"
            )
        ]

    def _interrupt(
        self, happened: InputRequested | ApprovalRequested, at: Event
    ) -> list[BaseEvent]:
        step, call_id = happened.step, happened.call_id
        asker = happened.tool_name if isinstance(happened, InputRequested) else happened.name
        # Known as the client's from its `tool_start`, or (shown by an earlier stream the
        # client's messages left out) from the tool that asks.
        if call_id in self._client_calls or asker in self._client_tools:
            # AG-UI's frontend-tool flow: the run pauses until the client sends results.
            if call_id in self._brought:
                return self._custom(at)  # its result came with the request: no pause
            self._client_calls[call_id] = None
            self._resolved.discard(call_id)  # a model server's id used again: this call waits
            pending = [c for c in self._client_calls if c not in self._resolved]
            outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=pending)
            return self._custom(at) + self._finish(outcome)
        if isinstance(happened, InputRequested):
            interrupt = Interrupt(
                id=call_id,
                reason=INPUT_REASON,
                message=happened.question,
                expires_at=_iso(happened.expires_at),
                response_schema={"type": "string"},
                metadata={"step": step},
            )
        else:
            interrupt = Interrupt(
                id=call_id,
                reason=APPROVAL_REASON,
                message=f"Allow the call to {happened.name}?",
                tool_call_id=call_id,
                expires_at=_iso(happened.expires_at),
                response_schema={
                    "type": "object",
                    "properties": {"approve": {"type": "boolean"}, "reason": {"type": "string"}},
                    "required": ["approve"],
                },
                metadata={"step": step, "tool_name": happened.name},
            )
        events = self._custom(at)
        return events + self._finish(RunFinishedInterruptOutcome(interrupts=[interrupt]))

    def _verify(self, happened: FinishVerified, at: Event) -> list[BaseEvent]:
        # A check that finds the task unfinished discards the draft answer: close it here, the
        # next draft is a new message.
        events = [] if happened.done else self._close_answer()
        return events + self._custom(at)

    def _completion(self, happened: RunCompleted, at: Event) -> list[BaseEvent]:
        self._result = {
            "final_answer": happened.final_answer,
            "stop_reason": happened.stop_reason,
            "steps": happened.steps,
            "usage": happened.usage,
        }
        events = self._close_reasoning()
        if self._answer is None and happened.final_answer:
            events += self._append_answer(happened.final_answer, at)
        return events + self._close_answer() + self._custom(at)

    def _stopped(self, happened: RunStopped, at: Event) -> list[BaseEvent]:
        self._was_stopped = True
        return self._custom(at)

    def _error(self, happened: RunFailed, at: Event) -> list[BaseEvent]:
        self.done = True
        return [RunErrorEvent(message=happened.message, code=happened.code)]

    def _complete(self, happened: RunEnded, at: Event) -> list[BaseEvent]:
        if self._was_stopped:
            return self._finish(RunFinishedCancelledOutcome())
        return self._finish(RunFinishedSuccessOutcome(), self._result)


_Reasoning = ReasonDelta | ReasonDone | ObserveDelta | ObserveDone
_HANDLERS: dict[type[Any], Callable[[Translator, Any, Event], list[BaseEvent]]] = {
    StepStarted: Translator._turn_start,
    ReasonDelta: Translator._reasoning_text,
    ReasonDone: Translator._reasoning_text,
    ObserveDelta: Translator._reasoning_text,
    ObserveDone: Translator._reasoning_text,
    ThinkingDelta: Translator._thinking,
    AnswerDelta: Translator._answer_delta,
    ChatDelta: Translator._answer_delta,
    ChatDone: Translator._chat_response,
    ToolStarted: Translator._tool_start,
    ToolCompleted: Translator._tool_result,
    ToolFailed: Translator._tool_result,
    InputRequested: Translator._interrupt,
    ApprovalRequested: Translator._interrupt,
    FinishVerified: Translator._verify,
    RunCompleted: Translator._completion,
    RunStopped: Translator._stopped,
    RunFailed: Translator._error,
    RunEnded: Translator._complete,
}
