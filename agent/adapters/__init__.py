"""Adapters: the only modules that import an SDK."""

from agent.adapters.openai_chat import OpenAIChatModel

__all__ = ["OpenAIChatModel"]
