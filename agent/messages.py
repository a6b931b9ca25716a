"""The conversation as the loop sees it: messages, tool calls and token usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Message", "Role", "ToolCall", "Usage"]

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for; `arguments` is the raw JSON text the model wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of the conversation, in the shape chat-completion APIs expect.

    `phase` records which loop phase wrote an assistant message (reason, act, observe,
    final, chat, summarize); `status`/`error` describe a tool result that did not succeed.
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    phase: str | None = None
    status: str | None = None
    error: str | None = None
    run_id: str | None = None

    @classmethod
    def tool_result(
        cls, call: ToolCall, content: str, *, status: str, run_id: str, error: str | None = None
    ) -> Message:
        """The tool message that answers `call`."""
        return cls(
            "tool",
            content,
            tool_call_id=call.id,
            tool_name=call.name,
            status=status,
            error=error,
            run_id=run_id,
        )

    def to_openai(self) -> dict[str, Any]:
        """Render as a chat-completions message dict."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass(slots=True)
class Usage:
    """Token counts, summed over calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the model server reused from its prefix cache
    calls: int = 0
    estimated_calls: int = 0  # calls whose tokens were estimated (a reply closed early)
    by_phase: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(
        self, phase: str, prompt: int, completion: int, cached: int = 0, estimated: bool = False
    ) -> None:
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cached_tokens += cached
        self.calls += 1
        self.estimated_calls += estimated
        self.by_phase[phase] = self.by_phase.get(phase, 0) + prompt + completion

    def as_dict(self) -> dict[str, float | int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cached_tokens": self.cached_tokens,
            "llm_calls": self.calls,
            "estimated_calls": self.estimated_calls,
        }
