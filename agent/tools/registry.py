"""ToolRegistry: the enabled tools, their schemas, and argument validation."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_json

from agent.errors import ModelBehaviorError
from agent.ports import ToolContext, ToolSpec
from agent.tools.base import Tool
from agent.validation import describe_errors

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """Hold tools by name; validate arguments before a tool ever sees them."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._specs: dict[str, ToolSpec] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self, names: Sequence[str] | None) -> list[ToolSpec]:
        chosen = (
            self._tools.values()
            if names is None
            else [self._tools[n] for n in names if n in self._tools]
        )
        return [self._spec(t) for t in chosen]

    def _spec(self, tool: Tool) -> ToolSpec:
        """Schemas never change: build each once (pydantic's schema generation is slow)."""
        spec = self._specs.get(tool.name)
        if spec is None:
            schema = _untitled(tool.arguments.model_json_schema())
            spec = ToolSpec(tool.name, tool.description, schema)
            self._specs[tool.name] = spec
        return spec

    async def call(self, name: str, arguments: dict[str, Any], context: ToolContext) -> Any:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            raise ModelBehaviorError(f"There is no tool named {name!r}. Available tools: {known}.")
        try:
            # Strict, in JSON mode: "5" is not 5 and 1 is not True, but an array still fills a
            # tuple and a string an enum, as the schema the model was shown says.
            given = _known_arguments(arguments, tool.arguments.model_fields)
            args = tool.arguments.model_validate_json(to_json(given), strict=True)
        except ValidationError as exc:
            problems = "; ".join(describe_errors(exc, root="arguments"))
            raise ModelBehaviorError(f"Invalid arguments for {name}: {problems}") from None
        return await tool.run(args, context)


# JSON Schema keywords, as a model may copy them from the schema into its arguments.
_SCHEMA_WORDS = frozenset(
    {"$schema", "additionalProperties", "description", "properties", "required", "title", "type"}
)
_MISSPELT = 0.75  # difflib's ratio from which an unknown key reads as a parameter misspelt


def _known_arguments(arguments: dict[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """The arguments without keys that name no parameter of the tool and spell none: schema
    keywords copied beside the values (Qwen2.5-0.5B called `lookup_contact` with
    `{"name": "Dana", "required": ["name"]}`) and parameters made up beside the right ones
    (`{"name": "Dana", "category": "profile", "keywords": [...]}`). Refused as unknown
    keys, such calls failed with the right values in hand, and the retry repeated them. A
    key close to a parameter's name (`timzone`, `zone`) is kept, and refused: it is that
    parameter misspelt, and running without it would answer another question."""
    known = list(fields)
    return {
        k: v
        for k, v in arguments.items()
        if k in known or (k not in _SCHEMA_WORDS and _spells_a_parameter(k, known))
    }


def _spells_a_parameter(key: str, known: list[str]) -> bool:
    """`timzone`, `zone` or `time_zone` for `timezone`: a parameter misspelt or shortened."""
    squeezed = key.replace("_", "").lower()
    return bool(difflib.get_close_matches(key, known, 1, _MISSPELT)) or any(
        squeezed in name.replace("_", "").lower() or name.replace("_", "").lower() in squeezed
        for name in known
    )


def _untitled(schema: Any) -> Any:
    """The schema without pydantic's `title` keywords ("CurrentTimeArgs", "Timezone"): they
    tell the model nothing the names do not, and small models copy them into the arguments.
    A property that is itself called `title` is kept."""
    if isinstance(schema, list):
        return [_untitled(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: _untitled(sub) for name, sub in value.items()}
        else:
            out[key] = _untitled(value)
    return out
