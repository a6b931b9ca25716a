"""Python tools: plain functions, decorated once with `@tool`, become Tools.

The argument schema comes from the type hints (a pydantic model is built from the signature),
the description from the docstring. A parameter annotated `ToolContext` receives the call's
context and is not shown to the model; a function whose only other parameter is a pydantic
model takes that model as its arguments. Async functions are awaited (a stop cancels them);
sync functions run in a worker thread, so they never block the event loop (a stop abandons
them: the run does not wait for the thread).

    from agent.tools.python import tool

    @tool
    def word_count(text: str, unique: bool = False) -> int:
        '''Count the words of a text.'''
        words = text.split()
        return len(set(words) if unique else words)

`[tools] modules = ["my_tools"]` imports `my_tools` (from the config file's folder or the
Python path) and registers every function of it decorated with `@tool`.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, create_model

from agent.ports import ToolContext
from agent.tools.base import Tool

__all__ = ["load_tool_modules", "tool", "tool_of"]

F = TypeVar("F", bound=Callable[..., Any])
_ATTRIBUTE = "__agent_tool__"


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(*, name: str | None = None, description: str | None = None) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None, /, *, name: str | None = None, description: str | None = None
) -> F | Callable[[F], F]:
    """Mark `fn` as a tool (optionally renamed or re-described); `fn` itself is unchanged."""

    def mark(f: F) -> F:
        setattr(f, _ATTRIBUTE, make_tool(f, name=name, description=description))
        return f

    return mark if fn is None else mark(fn)


def tool_of(fn: Callable[..., Any]) -> Tool:
    """The Tool a decorated function became."""
    found = getattr(fn, _ATTRIBUTE, None)
    if not isinstance(found, Tool):
        raise TypeError(f"{fn!r} is not decorated with @tool")
    return found


def make_tool(
    fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> Tool:
    """Build the Tool of a function: schema from its hints, description from its docstring."""
    hints = get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())
    context_param = next((p.name for p in params if hints.get(p.name) is ToolContext), None)
    visible = [p for p in params if p.name != context_param]
    for param in visible:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__}: *args and **kwargs cannot have a schema")
        if param.name not in hints:
            raise TypeError(f"tool {fn.__name__}: parameter {param.name!r} needs a type hint")
    model_param: str | None = None
    hint = hints.get(visible[0].name) if len(visible) == 1 else None
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        model, model_param = hint, visible[0].name
    else:
        fields: dict[str, Any] = {
            p.name: (hints[p.name], ... if p.default is p.empty else Field(p.default))
            for p in visible
        }
        model = create_model(
            f"{fn.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
    doc = inspect.getdoc(fn) or ""
    text = description or doc.split("\n\n")[0].replace("\n", " ").strip() or fn.__name__
    is_async = inspect.iscoroutinefunction(fn)

    async def run(args: BaseModel, context: ToolContext) -> Any:
        kwargs: dict[str, Any] = (
            {model_param: args}
            if model_param
            else {k: getattr(args, k) for k in type(args).model_fields}
        )
        if context_param:
            kwargs[context_param] = context
        if is_async:
            return await fn(**kwargs)
        return await asyncio.to_thread(functools.partial(fn, **kwargs))

    return Tool(name or fn.__name__, text, model, run)


def load_tool_modules(modules: tuple[str, ...]) -> tuple[list[Tool], dict[str, str]]:
    """Import each module and collect its @tool functions; return (tools, name -> source).

    Raise ValueError naming the module when it cannot be imported or has no tool.
    """
    tools: list[Tool] = []
    sources: dict[str, str] = {}
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - reported as a configuration error
            raise ValueError(
                f"tools.modules: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
            ) from None
        found = [
            value
            for value in vars(module).values()
            if isinstance(getattr(value, _ATTRIBUTE, None), Tool)
        ]
        if not found:
            raise ValueError(f"tools.modules: {module_name!r} has no function decorated with @tool")
        for fn in found:
            made = tool_of(fn)
            tools.append(made)
            sources[made.name] = f"python:{module_name}"
    return tools, sources
