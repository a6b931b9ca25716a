"""The small interfaces the loop depends on. Adapters implement them; tests substitute them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agent.events import AgentEvent
from agent.messages import Message, ToolCall

__all__ = [
    "CallInfo",
    "ChatModel",
    "EventSink",
    "ModelTurn",
    "RetryNotice",
    "Thinking",
    "ToolChoice",
    "PromptProvider",
    "ToolContext",
    "ToolSpec",
    "Toolbox",
    "Transcript",
]


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """A transient failure of a model call that is about to be retried."""

    attempt: int  # the attempt about to start: 2..max_attempts
    max_attempts: int
    reason: str
    delay_s: float


@dataclass(frozen=True, slots=True)
class CallInfo:
    """Who is calling the model, for gateway headers and usage accounting; `on_retry` is
    awaited before each retry so the user can see it."""

    session_id: str
    run_id: str
    step: int
    phase: str
    on_retry: Callable[[RetryNotice], Awaitable[None]] | None = None


ToolChoice = Literal["auto", "none", "required"]


@dataclass(frozen=True, slots=True)
class Thinking:
    """A piece of a reasoning model's thinking, streamed apart from the reply's text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """The complete reply of one model call: the last item `ChatModel.stream` yields."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    cached_tokens: int = 0  # prompt tokens the server reused from its prefix cache
    estimated: bool = False  # the tokens are the agent's estimate: the server reported none


class ChatModel(Protocol):
    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec],
        call: CallInfo,
        tool_choice: ToolChoice = "auto",
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[str | Thinking | ModelTurn]:
        """Yield text deltas (and Thinking pieces) as they arrive, then exactly one ModelTurn.

        `tools` with `tool_choice="none"` are shown but may not be called: every phase sends
        the same tools so the prompt prefix stays cacheable. `response_format` (a JSON schema)
        asks a server that constrains decoding for a reply of that shape; a server that
        cannot is sent the call without it, and the reply is read as text. `max_tokens` and
        `temperature` are the caller's, used when the model's own settings set none. Raise
        ModelError when the call fails for good (ContextTooLong when the prompt does not
        fit). Cancelling the iteration must abort the underlying request.
        """
        ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about the call it serves."""

    tenant_id: str
    user_id: str
    session_id: str
    run_id: str
    extra: dict[str, Any] = field(default_factory=dict)


class Toolbox(Protocol):
    def specs(self, names: Sequence[str] | None) -> list[ToolSpec]:
        """The specs of the named tools (None: every enabled tool)."""
        ...

    async def call(self, name: str, arguments: dict[str, Any], context: ToolContext) -> Any:
        """Run a tool and return its JSON-serializable result.

        Raise ModelBehaviorError for an unknown tool or invalid arguments, ToolError when the
        tool fails; both messages are shown to the model.
        """
        ...


class EventSink(Protocol):
    async def emit(self, event: AgentEvent) -> None:
        """Persist and publish one event.

        The write must complete even if the caller is cancelled while awaiting it, and events
        must be stored and published in the order `emit` was called.
        """
        ...

    async def emit_all(self, events: Sequence[AgentEvent]) -> None:
        """Persist and publish several events in one write, with the same guarantees."""
        ...


class Transcript(Protocol):
    async def append(self, messages: Sequence[Message]) -> None:
        """Persist messages of the conversation, in order, with the same guarantees as emit."""
        ...


class PromptProvider(Protocol):
    def render(self, name: str, **values: object) -> str:
        """Render the template `name` (e.g. "agent_reason_prompt") with `values`."""
        ...
