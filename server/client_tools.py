"""Tools the client runs (AG-UI's frontend tools): offered to the model like ours; a call
pauses the run with the `request_input` pause (the call's id, as MCP elicitation does) until
the client sends the result, which becomes the call's result. From /ws such a call shows as
`tool_start` and then a question that any client may answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from agent.errors import ToolError
from agent.ports import Toolbox, ToolContext, ToolSpec

__all__ = ["ClientToolbox", "client_tool_question"]


def client_tool_question(name: str, arguments: dict[str, Any]) -> str:
    args = orjson.dumps(arguments).decode()
    return f"Run the application's tool {name} with {args} and reply with its result."


class ClientToolbox:
    """Our toolbox plus one run's client tools (a Toolbox)."""

    def __init__(self, base: Toolbox, client: Sequence[ToolSpec]) -> None:
        self._base = base
        self._client = {spec.name: spec for spec in client}

    def specs(self, names: Sequence[str] | None) -> list[ToolSpec]:
        ours = [n for n in names if n not in self._client] if names is not None else None
        return [*self._base.specs(ours), *self._client.values()]

    async def call(self, name: str, arguments: dict[str, Any], context: ToolContext) -> Any:
        if name not in self._client:
            return await self._base.call(name, arguments, context)
        ask = context.extra.get("ask")
        if ask is None:
            raise ToolError(f"{name} runs in the application, which cannot be reached now.")
        result = await ask(client_tool_question(name, arguments))
        if result is None:
            raise ToolError(f"The application did not return the result of {name} in time.")
        return result
