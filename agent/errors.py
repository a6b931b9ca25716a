"""Errors of the agent core.

AgentError
├── ModelError          the LLM still failed after the retry policy gave up; ends the run
│   └── ContextTooLong  the prompt does not fit the model's context window (compact, retry)
├── ModelBehaviorError  the LLM answered, but wrongly (unknown tool, malformed arguments);
│                       fed back to the model as a tool error, never ends the run
├── ToolError           a tool refused or failed; fed back to the model
└── StorageError        the store could not read or write; ends the run
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "ContextTooLong",
    "ModelBehaviorError",
    "ModelError",
    "StorageError",
    "ToolError",
]


class AgentError(Exception):
    """Root of every error the agent core raises on purpose."""


class ModelError(AgentError):
    """The LLM call failed for good (after retries, or a non-retryable status).

    `usage` is what the run had used when it failed (set as the error leaves the run, see
    `agent.stopping.stop_recorded`): the calls before the failure were paid for.
    """

    usage: dict[str, float | int] | None = None


class ContextTooLong(ModelError):
    """The model server refused the prompt as longer than its context window.

    `window_tokens` is the server's window when it said so (llama.cpp's `n_ctx`), else None.
    """

    def __init__(self, message: str, window_tokens: int | None = None) -> None:
        super().__init__(message)
        self.window_tokens = window_tokens


class ModelBehaviorError(AgentError):
    """The LLM produced something the loop cannot act on; the text is shown to the model."""


class ToolError(AgentError):
    """A tool could not do its job; the message is the tool result the model sees."""


class StorageError(AgentError):
    """The conversation store failed; the run cannot continue without losing data."""
