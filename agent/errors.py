"""Errors of the agent core.

AgentError
├── ModelError          the LLM still failed after the retry policy gave up; ends the run
├── ModelBehaviorError  the LLM answered, but wrongly (unknown tool, malformed arguments);
│                       fed back to the model as a tool error, never ends the run
├── ToolError           a tool refused or failed; fed back to the model
└── StorageError        the store could not read or write; ends the run
"""

from __future__ import annotations

__all__ = ["AgentError", "ModelBehaviorError", "ModelError", "StorageError", "ToolError"]


class AgentError(Exception):
    """Root of every error the agent core raises on purpose."""


class ModelError(AgentError):
    """The LLM call failed for good (after retries, or a non-retryable status)."""


class ModelBehaviorError(AgentError):
    """The LLM produced something the loop cannot act on; the text is shown to the model."""


class ToolError(AgentError):
    """A tool could not do its job; the message is the tool result the model sees."""


class StorageError(AgentError):
    """The conversation store failed; the run cannot continue without losing data."""
