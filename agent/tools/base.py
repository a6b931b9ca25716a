"""What a tool is: a name, a description, a pydantic argument model and a coroutine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agent.ports import ToolContext

__all__ = ["Tool"]


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable tool. `run` receives validated arguments and returns a JSON value."""

    name: str
    description: str
    arguments: type[BaseModel]
    run: Callable[[Any, ToolContext], Awaitable[Any]]
