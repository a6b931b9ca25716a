"""Wire frames (the dicts `/ws` sends) translated into AG-UI events: the one mapping table.

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

Every event carries the frame it came from as `rawEvent` (so `seq` and every field survive).
A message's id ends with the `seq` of the frame that opened it: unique in the thread, also
across the streams of one run paused and resumed (a client merges messages of one id).
Reason and Observe are reasoning messages, not text messages: AG-UI clients (CopilotKit's
chat among them) show reasoning apart from, and folded under, the assistant's reply, so only
the final answer reads as the reply, as in our own UI.
"""

from __future__ import annotations

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

__all__ = ["INPUT_REASON", "APPROVAL_REASON", "Translator", "step_name"]

INPUT_REASON = "input_required"
APPROVAL_REASON = "tool_approval"
_REASONING = {
    "agent_reason_delta": "reason",
    "agent_reason": "reason",
    "agent_observe_delta": "observe",
    "agent_observe": "observe",
}


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

    def translate(self, frame: dict[str, Any]) -> list[BaseEvent]:
        """The AG-UI events for one frame of this run (none once the stream is done)."""
        if self.done:
            return []
        kind = frame.get("type")
        update = frame.get("update_type")
        name = update if kind == "agent_update" else kind
        handler = _HANDLERS.get(str(name))
        events = handler(self, frame) if handler is not None else self._custom(frame)
        for event in events:
            if event.raw_event is None and not isinstance(event, (RunStartedEvent,)):
                event.raw_event = frame
        return events

    # -- pieces ---------------------------------------------------------------------------

    def _custom(self, frame: dict[str, Any]) -> list[BaseEvent]:
        name = frame.get("update_type") or frame.get("type") or "unknown"
        return [CustomEvent(name=str(name), value=frame)]

    def _message_id(self, kind: str, frame: dict[str, Any]) -> str:
        """A new message's id, unique in the thread: the seq of the frame that opens it."""
        seq = frame.get("seq")
        if not isinstance(seq, int):
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

    def _open_reasoning(self, key: str, frame: dict[str, Any]) -> tuple[str, list[BaseEvent]]:
        """The id of the reasoning message `key` names (a step's phase), opened if need be."""
        if self._reasoning is not None and self._reasoning[0] == key:
            return self._reasoning[1], []
        events = self._close_reasoning()
        message_id = self._message_id(key, frame)
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

    def _append_answer(self, delta: str, frame: dict[str, Any]) -> list[BaseEvent]:
        events: list[BaseEvent] = []
        if self._answer is None:
            self._answer = self._message_id("answer", frame)
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

    # -- handlers -------------------------------------------------------------------------

    def _turn_start(self, frame: dict[str, Any]) -> list[BaseEvent]:
        events = self._close_all()
        self._step = int(frame["step"])
        events.append(StepStartedEvent(step_name=step_name(self._step)))
        return events

    def _reasoning_text(self, frame: dict[str, Any]) -> list[BaseEvent]:
        key = f"{frame.get('step', 0)}-{_REASONING[frame['update_type']]}"
        is_open = self._reasoning is not None and self._reasoning[0] == key
        if frame["update_type"].endswith("_delta"):
            message_id, events = self._open_reasoning(key, frame)
            events.append(ReasoningMessageContentEvent(message_id=message_id, delta=frame["delta"]))
            return events
        events = []
        if not is_open and frame.get("content"):  # nothing was streamed
            message_id, events = self._open_reasoning(key, frame)
            events.append(
                ReasoningMessageContentEvent(message_id=message_id, delta=frame["content"])
            )
            is_open = True
        return events + (self._close_reasoning() if is_open else [])

    def _thinking(self, frame: dict[str, Any]) -> list[BaseEvent]:
        key = f"{frame.get('step', 0)}-thinking-{frame.get('phase', '')}"
        message_id, events = self._open_reasoning(key, frame)
        events.append(ReasoningMessageContentEvent(message_id=message_id, delta=frame["delta"]))
        return events

    def _answer_delta(self, frame: dict[str, Any]) -> list[BaseEvent]:
        return self._append_answer(str(frame["delta"]), frame)

    def _chat_response(self, frame: dict[str, Any]) -> list[BaseEvent]:
        return self._close_answer()  # its content is its deltas', all sent as they came

    def _tool_start(self, frame: dict[str, Any]) -> list[BaseEvent]:
        """The text before a call is its assistant message (chat mode): it ends here, and the
        call names it as its parent, as the client's own message list has it."""
        call_id = frame["tool_call_id"]
        if frame["tool_name"] in self._client_tools:
            self._client_calls[call_id] = None
        parent = self._answer
        events = self._close_reasoning() + self._close_answer()
        events += [
            ToolCallStartEvent(
                tool_call_id=call_id, tool_call_name=frame["tool_name"], parent_message_id=parent
            ),
            ToolCallArgsEvent(
                tool_call_id=call_id, delta=orjson.dumps(frame["arguments"]).decode()
            ),
            ToolCallEndEvent(tool_call_id=call_id),
        ]
        return events

    def _tool_result(self, frame: dict[str, Any]) -> list[BaseEvent]:
        call_id = frame["tool_call_id"]
        self._resolved.add(call_id)
        if call_id in self._client_calls and frame["type"] == "tool_complete":
            return []  # the client's own result: its messages have it already
        if frame["type"] == "tool_error":
            content = f"Error: {frame['error']}"
        else:
            result = frame.get("result")
            content = result if isinstance(result, str) else orjson.dumps(result).decode()
        return [
            ToolCallResultEvent(
                message_id=f"{call_id}-result", tool_call_id=call_id, content=content, role="tool"
            )
        ]

    def _interrupt(self, frame: dict[str, Any]) -> list[BaseEvent]:
        step = frame.get("step")
        call_id = frame["tool_call_id"]
        # Known as the client's from its `tool_start`, or (shown by an earlier stream the
        # client's messages left out) from the tool that asks.
        if call_id in self._client_calls or frame.get("tool_name") in self._client_tools:
            # AG-UI's frontend-tool flow: the run pauses until the client sends results.
            if call_id in self._brought:
                return self._custom(frame)  # its result came with the request: no pause
            self._client_calls[call_id] = None
            self._resolved.discard(call_id)  # a model server's id used again: this call waits
            pending = [c for c in self._client_calls if c not in self._resolved]
            outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=pending)
            return self._custom(frame) + self._finish(outcome)
        if frame["update_type"] == "agent_request_input":
            interrupt = Interrupt(
                id=frame["tool_call_id"],
                reason=INPUT_REASON,
                message=frame["question"],
                expires_at=_iso(frame.get("expires_at")),
                response_schema={"type": "string"},
                metadata={"step": step},
            )
        else:
            interrupt = Interrupt(
                id=frame["tool_call_id"],
                reason=APPROVAL_REASON,
                message=f"Allow the call to {frame['tool_name']}?",
                tool_call_id=frame["tool_call_id"],
                expires_at=_iso(frame.get("expires_at")),
                response_schema={
                    "type": "object",
                    "properties": {"approve": {"type": "boolean"}, "reason": {"type": "string"}},
                    "required": ["approve"],
                },
                metadata={"step": step, "tool_name": frame["tool_name"]},
            )
        events = self._custom(frame)
        return events + self._finish(RunFinishedInterruptOutcome(interrupts=[interrupt]))

    def _verify(self, frame: dict[str, Any]) -> list[BaseEvent]:
        # A check that finds the task unfinished discards the draft answer: close it here, the
        # next draft is a new message.
        events = [] if frame.get("done") else self._close_answer()
        return events + self._custom(frame)

    def _completion(self, frame: dict[str, Any]) -> list[BaseEvent]:
        self._result = {
            key: frame.get(key) for key in ("final_answer", "stop_reason", "steps", "usage")
        }
        events = self._close_reasoning()
        if self._answer is None and frame.get("final_answer"):
            events += self._append_answer(str(frame["final_answer"]), frame)
        return events + self._close_answer() + self._custom(frame)

    def _stopped(self, frame: dict[str, Any]) -> list[BaseEvent]:
        self._was_stopped = True
        return self._custom(frame)

    def _error(self, frame: dict[str, Any]) -> list[BaseEvent]:
        self.done = True
        return [RunErrorEvent(message=str(frame.get("message", "")), code=frame.get("code"))]

    def _complete(self, frame: dict[str, Any]) -> list[BaseEvent]:
        if self._was_stopped:
            return self._finish(RunFinishedCancelledOutcome())
        return self._finish(RunFinishedSuccessOutcome(), self._result)


_HANDLERS = {
    "agent_turn_start": Translator._turn_start,
    "agent_reason_delta": Translator._reasoning_text,
    "agent_reason": Translator._reasoning_text,
    "agent_observe_delta": Translator._reasoning_text,
    "agent_observe": Translator._reasoning_text,
    "agent_reasoning_delta": Translator._thinking,
    "agent_answer_delta": Translator._answer_delta,
    "chat_delta": Translator._answer_delta,
    "chat_response": Translator._chat_response,
    "tool_start": Translator._tool_start,
    "tool_complete": Translator._tool_result,
    "tool_error": Translator._tool_result,
    "agent_request_input": Translator._interrupt,
    "agent_tool_approval": Translator._interrupt,
    "agent_verify": Translator._verify,
    "agent_completion": Translator._completion,
    "agent_stopped": Translator._stopped,
    "error": Translator._error,
    "response_complete": Translator._complete,
}
