"""ToolRegistry validates arguments strictly, as docs/tools.md says: nothing is coerced."""

from __future__ import annotations

import enum
from datetime import date
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from agent.errors import ModelBehaviorError
from agent.ports import ToolContext
from agent.tools.base import Tool
from agent.tools.registry import ToolRegistry

CONTEXT = ToolContext("acme", "alice", "s1", "r1")


class Unit(enum.Enum):
    DAYS = "days"
    WEEKS = "weeks"


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int = 1
    ratio: float = 1.0
    loud: bool = False
    unit: Unit = Unit.DAYS
    pair: tuple[int, int] = (0, 0)
    day: date | None = None


async def _echo(args: Args, context: ToolContext) -> dict[str, Any]:
    return args.model_dump(mode="json")


REGISTRY = ToolRegistry([Tool("echo", "Echo the arguments.", Args, _echo)])


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"count": "5"}, "count"),
        ({"count": 5.5}, "count"),
        ({"loud": 1}, "loud"),
        ({"loud": "true"}, "loud"),
        ({"ratio": "0.5"}, "ratio"),
    ],
)
async def test_wrong_types_are_refused_not_coerced(arguments: dict[str, Any], field: str):
    with pytest.raises(ModelBehaviorError, match=rf"Invalid arguments for echo: {field}"):
        await REGISTRY.call("echo", arguments, CONTEXT)


async def test_json_shaped_values_still_fill_their_fields():
    arguments = {"count": 5, "ratio": 2, "loud": True, "unit": "weeks", "pair": [1, 2]}
    result = await REGISTRY.call("echo", {**arguments, "day": "2026-01-02"}, CONTEXT)
    assert result == {
        "count": 5,
        "ratio": 2.0,
        "loud": True,
        "unit": "weeks",
        "pair": [1, 2],
        "day": "2026-01-02",
    }


async def test_schema_keywords_copied_beside_the_values_are_dropped():
    result = await REGISTRY.call("echo", {"count": 3, "required": ["count"]}, CONTEXT)
    assert result["count"] == 3


class Titled(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str
    type: str = "note"


async def _titled(args: Titled, context: ToolContext) -> dict[str, Any]:
    return args.model_dump()


async def test_a_parameter_named_like_a_schema_keyword_is_kept():
    registry = ToolRegistry([Tool("note", "Write a note.", Titled, _titled)])
    result = await registry.call("note", {"title": "hi", "type": "todo"}, CONTEXT)
    assert result == {"title": "hi", "type": "todo"}
    with pytest.raises(ModelBehaviorError, match="Invalid arguments for note: titel: unknown key"):
        await registry.call("note", {"title": "hi", "required": 1, "titel": "x"}, CONTEXT)


async def test_a_parameter_made_up_beside_the_right_ones_is_left_out():
    registry = ToolRegistry([Tool("note", "Write a note.", Titled, _titled)])
    result = await registry.call(
        "note", {"title": "hi", "category": "profile", "keywords": ["a", "b"]}, CONTEXT
    )
    assert result == {"title": "hi", "type": "note"}


async def test_a_misspelt_parameter_is_refused_not_run_without():
    registry = ToolRegistry([Tool("note", "Write a note.", Titled, _titled)])
    with pytest.raises(ModelBehaviorError, match="typ: unknown key"):
        await registry.call("note", {"title": "hi", "typ": "todo"}, CONTEXT)
