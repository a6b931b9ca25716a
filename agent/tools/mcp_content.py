"""MCP content in our terms: tool results as one JSON value for the tool message (nothing
dropped silently), and elicitation forms filled from a person's free-text answer."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mcp_types as types

__all__ = ["Ask", "describe_result", "elicit", "fill_form"]

Ask = Callable[[str], Awaitable[str | None]]
"""Ask the person a question mid-call; None when they did not answer in time."""


async def elicit(ask: Ask | None, params: types.ElicitRequestParams) -> types.ElicitResult:
    """Answer a server's elicitation through `ask`: declined when nobody can be asked,
    cancelled when the person did not answer in time."""
    import mcp_types as types  # the MCP types load with the SDK, once a server is configured

    url = getattr(params, "url", None)
    if url:  # URL mode: the person completes it in a browser; nothing to fill in
        if ask is None:
            return types.ElicitResult(action="decline")
        message = getattr(params, "message", "") or "Please open this link."
        done = await ask(f"{message}\nOpen {url} and answer when you are done.")
        return types.ElicitResult(action="cancel" if done is None else "accept")
    schema = getattr(params, "requested_schema", None) or {}
    if ask is None:
        return types.ElicitResult(action="decline")
    answer = await ask(_question(getattr(params, "message", "") or "", schema))
    if answer is None:
        return types.ElicitResult(action="cancel")
    return types.ElicitResult(action="accept", content=fill_form(schema, answer))


def _question(message: str, schema: dict[str, Any]) -> str:
    """The server's message, and what the answer fills in."""
    fields = _fields(schema)
    if not fields:
        return message or "The tool needs your confirmation."
    first = fields[0]
    hint = f"Your answer fills {first!r}"
    if len(fields) > 1:
        hint += f"; to fill several fields, answer with JSON (fields: {', '.join(fields)})"
    return f"{message or 'The tool needs more information.'}\n({hint}.)"


def _fields(schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return []
    required = [n for n in schema.get("required", []) if n in properties]
    return [*required, *(n for n in properties if n not in required)]


def fill_form(schema: dict[str, Any], answer: str) -> dict[str, Any]:
    """Put a free-text answer into the requested form: its first (required) field, converted
    for a number or boolean field, or every field when the answer is a JSON object."""
    try:
        parsed = json.loads(answer)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return parsed
    fields = _fields(schema)
    if not fields:
        return {}
    prop = schema["properties"][fields[0]]
    kind = prop.get("type") if isinstance(prop, dict) else None
    value: Any = answer
    if kind in ("number", "integer") and isinstance(parsed, (int, float)):
        value = parsed
    elif kind == "boolean":
        value = answer.strip().lower() in ("yes", "y", "true", "1", "ok")
    return {fields[0]: value}


def describe_result(result: types.CallToolResult) -> Any:
    """The tool message of a result: the text (or text and structured content), with every
    non-text block described rather than dropped."""
    import mcp_types as types  # the MCP types load with the SDK, once a server is configured

    texts: list[str] = []
    attachments: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, (types.ImageContent, types.AudioContent)):
            attachments.append(
                {"type": block.type, "mime_type": block.mime_type, "bytes": _size(block.data)}
            )
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            item: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
            if resource.mime_type:
                item["mime_type"] = resource.mime_type
            if isinstance(resource, types.TextResourceContents):
                item["text"] = resource.text
            else:
                item["bytes"] = _size(resource.blob)
            attachments.append(item)
        elif isinstance(block, types.ResourceLink):
            link = {"type": "resource_link", "uri": str(block.uri), "name": block.name}
            attachments.append(link)
        else:
            attachments.append({"type": str(getattr(block, "type", "unknown"))})
    text = "\n".join(texts)
    structured = result.structured_content
    if structured is not None and _same_json(text, structured):
        text = ""  # the text is the structured content again (a common convention)
    if structured is None and not attachments:
        return text
    value: dict[str, Any] = {}
    if text:
        value["text"] = text
    if structured is not None:
        value["structured"] = structured
    if attachments:
        value["attachments"] = attachments
    return value


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def _size(data: str) -> int:
    """Decoded size of base64 data, without decoding it all when it is well formed."""
    padding = data.count("=", -2) if data else 0
    if len(data) % 4 == 0:
        return len(data) * 3 // 4 - padding
    return len(base64.b64decode(data + "=" * (-len(data) % 4)))
