"""What a run reports while it works: the internal event vocabulary.

These are not wire frames. `server/protocol.py` maps each one to the frame docs/wire-protocol.md
defines, so the loop can serve another transport unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "AgentEvent",
    "AnswerDelta",
    "ModelRetrying",
    "ThinkingDelta",
    "UserAnswered",
    "UserMessage",
    "ApprovalRequested",
    "ApprovalTimedOut",
    "ChatDelta",
    "CompletionReason",
    "ContextTrimmed",
    "ChatDone",
    "FinishVerified",
    "InputRequested",
    "InputTimedOut",
    "ObserveDelta",
    "ObserveDone",
    "PlanMade",
    "ReasonDelta",
    "ReasonDone",
    "ResearchDone",
    "RunCompleted",
    "RunStarted",
    "RunStopped",
    "StepStarted",
    "StopReason",
    "ToolCompleted",
    "ToolFailed",
    "ToolStarted",
]

CompletionReason = Literal["finished", "max_steps", "budget", "stuck"]
StopReason = Literal["user", "input_timeout", "shutdown", "interrupted", "run_timeout"]


@dataclass(frozen=True, slots=True)
class RunStarted:
    max_steps: int
    kind: Literal["run_started"] = "run_started"


@dataclass(frozen=True, slots=True)
class StepStarted:
    step: int
    kind: Literal["step_started"] = "step_started"


@dataclass(frozen=True, slots=True)
class ReasonDelta:
    step: int
    delta: str
    kind: Literal["reason_delta"] = "reason_delta"


@dataclass(frozen=True, slots=True)
class ReasonDone:
    step: int
    content: str
    kind: Literal["reason_done"] = "reason_done"


@dataclass(frozen=True, slots=True)
class ToolStarted:
    step: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    kind: Literal["tool_started"] = "tool_started"


@dataclass(frozen=True, slots=True)
class ToolCompleted:
    step: int
    call_id: str
    name: str
    result: Any
    duration_ms: int
    kind: Literal["tool_completed"] = "tool_completed"


@dataclass(frozen=True, slots=True)
class ToolFailed:
    step: int
    call_id: str
    name: str
    error: str
    kind: Literal["tool_failed"] = "tool_failed"


@dataclass(frozen=True, slots=True)
class InputRequested:
    step: int
    question: str
    call_id: str
    expires_at: int
    tool_name: str = "request_input"  # the call that asks: the model's own question, or a tool
    kind: Literal["input_requested"] = "input_requested"


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    step: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    expires_at: int
    kind: Literal["approval_requested"] = "approval_requested"


@dataclass(frozen=True, slots=True)
class ApprovalTimedOut:
    step: int
    call_id: str
    kind: Literal["approval_timed_out"] = "approval_timed_out"


@dataclass(frozen=True, slots=True)
class InputTimedOut:
    step: int
    kind: Literal["input_timed_out"] = "input_timed_out"


@dataclass(frozen=True, slots=True)
class ObserveDelta:
    step: int
    delta: str
    kind: Literal["observe_delta"] = "observe_delta"


@dataclass(frozen=True, slots=True)
class ObserveDone:
    step: int
    content: str
    kind: Literal["observe_done"] = "observe_done"


@dataclass(frozen=True, slots=True)
class RunStopped:
    step: int
    reason: StopReason
    usage: dict[str, float | int]
    kind: Literal["run_stopped"] = "run_stopped"


@dataclass(frozen=True, slots=True)
class ContextTrimmed:
    step: int
    phase: str
    tokens: int
    budget: int
    exact: bool
    compressed: tuple[dict[str, Any], ...]
    dropped_messages: int
    collapsed_steps: int
    dropped_steps: int = 0  # steps of the run left out (their summaries too)
    kind: Literal["context_trimmed"] = "context_trimmed"


@dataclass(frozen=True, slots=True)
class ResearchDone:
    query: str
    summary: str
    sources: tuple[str, ...]
    kind: Literal["research_done"] = "research_done"


@dataclass(frozen=True, slots=True)
class PlanMade:
    step: int
    plan: tuple[str, ...]
    kind: Literal["plan_made"] = "plan_made"


@dataclass(frozen=True, slots=True)
class FinishVerified:
    step: int
    done: bool
    reason: str
    kind: Literal["finish_verified"] = "finish_verified"


@dataclass(frozen=True, slots=True)
class RunCompleted:
    steps: int
    final_answer: str
    stop_reason: CompletionReason
    usage: dict[str, float | int]
    kind: Literal["run_completed"] = "run_completed"


@dataclass(frozen=True, slots=True)
class ChatDelta:
    delta: str
    kind: Literal["chat_delta"] = "chat_delta"


@dataclass(frozen=True, slots=True)
class UserMessage:
    """The user's chat message that starts the run: its first event, so a replay alone
    rebuilds the conversation. `client_id` echoes the optional id the client gave it."""

    content: str
    agent_mode: bool
    origin: Literal["chat", "retry", "continue"] = "chat"
    client_id: str | None = None
    parent_run_id: str | None = None  # the run before it on the conversation's path
    replaces: str | None = None  # the run whose turn it is a new version of
    versioned: bool = False  # the run has a place in a run tree (its parent may be None)
    kind: Literal["user_message"] = "user_message"


@dataclass(frozen=True, slots=True)
class UserAnswered:
    """An answer to the pending question was accepted (every tab learns of it)."""

    step: int
    call_id: str
    content: str
    kind: Literal["user_answered"] = "user_answered"


@dataclass(frozen=True, slots=True)
class AnswerDelta:
    """A piece of the final answer as the model writes it (a draft until the run completes:
    a verification that finds the task unfinished discards it)."""

    step: int
    delta: str
    kind: Literal["answer_delta"] = "answer_delta"


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A reasoning model's thinking (reasoning_content or <think> text): shown, never sent
    back to the model, never parsed for control blocks."""

    step: int
    phase: str
    delta: str
    kind: Literal["thinking_delta"] = "thinking_delta"


@dataclass(frozen=True, slots=True)
class ModelRetrying:
    """A model call failed transiently and will be tried again after `delay_ms`."""

    step: int
    phase: str
    attempt: int  # the attempt about to start, 2..max_attempts
    max_attempts: int
    reason: str
    delay_ms: int
    kind: Literal["model_retrying"] = "model_retrying"


@dataclass(frozen=True, slots=True)
class ChatDone:
    content: str
    usage: dict[str, Any] = field(default_factory=dict)  # tokens of the run, as on completion
    kind: Literal["chat_done"] = "chat_done"


AgentEvent = (
    RunStarted
    | StepStarted
    | ReasonDelta
    | ReasonDone
    | ToolStarted
    | ToolCompleted
    | ToolFailed
    | InputRequested
    | InputTimedOut
    | ApprovalRequested
    | ApprovalTimedOut
    | ObserveDelta
    | ObserveDone
    | RunStopped
    | PlanMade
    | FinishVerified
    | ContextTrimmed
    | ResearchDone
    | RunCompleted
    | ChatDelta
    | ChatDone
    | UserMessage
    | UserAnswered
    | AnswerDelta
    | ThinkingDelta
    | ModelRetrying
)
