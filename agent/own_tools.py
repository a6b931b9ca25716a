"""The loop's own tools, offered next to the enabled ones: `request_input` (a question for the
person, never run as a tool) and `recall_details` (read more of a result cut to fit)."""

from __future__ import annotations

from agent.context import RECALL_DETAILS
from agent.ports import ToolSpec

__all__ = ["OWN_TOOL_SPECS", "RECALL_DETAILS_SPEC", "REQUEST_INPUT", "REQUEST_INPUT_SPEC"]

REQUEST_INPUT = "request_input"
REQUEST_INPUT_SPEC = ToolSpec(
    name=REQUEST_INPUT,
    description=(
        "Ask the user a question and wait for the answer. Use it only when you need "
        "information or a decision that only the user can give."
    ),
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "description": "One clear question."}},
        "required": ["question"],
        "additionalProperties": False,
    },
)


RECALL_DETAILS_SPEC = ToolSpec(
    name=RECALL_DETAILS,
    description=(
        "Read more of a tool result that was cut to fit (its result_id is in the cut "
        "marker), one piece at a time: from a character offset (the marker and each piece "
        "say where the next one starts), or with a focus only the passages about it."
    ),
    parameters={
        "type": "object",
        "properties": {
            "result_id": {"type": "string", "description": "The id named in the marker."},
            "focus": {"type": "string", "description": "Words to look for (optional)."},
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "Where to start reading, in characters (optional, default 0).",
            },
        },
        "required": ["result_id"],
        "additionalProperties": False,
    },
)

OWN_TOOL_SPECS = (REQUEST_INPUT_SPEC, RECALL_DETAILS_SPEC)
