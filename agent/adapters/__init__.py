"""Adapters: the only modules that import an SDK.

The names below are imported on first use (agent/lazy.py): the settings read ModelConfig
without loading the HTTP client."""

from typing import TYPE_CHECKING

from agent.lazy import lazy_exports

if TYPE_CHECKING:
    from agent.adapters.config import ModelConfig
    from agent.adapters.openai_chat import OpenAIChatModel

__all__ = ["ModelConfig", "OpenAIChatModel"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {"ModelConfig": "agent.adapters.config", "OpenAIChatModel": "agent.adapters.openai_chat"},
)
