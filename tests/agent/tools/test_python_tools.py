"""Python tools: schemas from type hints, sync functions off the event loop, cancellation,
and modules named in config."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from agent.errors import ModelBehaviorError
from agent.ports import ToolContext
from agent.tools.python import load_tool_modules, tool, tool_of
from agent.tools.registry import ToolRegistry

CONTEXT = ToolContext("acme", "alice", "s1", "r1")


@tool
def word_count(text: str, unique: bool = False) -> int:
    """Count the words of a text.

    Longer explanation that is not part of the description."""
    words = text.split()
    return len(set(words) if unique else words)


@tool(name="whoami")
async def who(context: ToolContext, shout: bool = False) -> str:
    """Say who is calling."""
    name = f"{context.user_id}@{context.tenant_id}"
    return name.upper() if shout else name


class Point(BaseModel):
    x: float
    y: float


@tool
def norm(point: Point) -> float:
    """Length of a vector."""
    return float((point.x**2 + point.y**2) ** 0.5)


def test_the_schema_comes_from_the_type_hints_and_the_docstring():
    spec = ToolRegistry([tool_of(word_count)]).specs(None)[0]
    assert spec.name == "word_count"
    assert spec.description == "Count the words of a text."
    assert spec.parameters["properties"]["text"]["type"] == "string"
    assert spec.parameters["properties"]["unique"]["default"] is False
    assert spec.parameters["required"] == ["text"]
    assert spec.parameters["additionalProperties"] is False
    # The context parameter is not shown to the model; a single model parameter is the schema.
    assert "context" not in ToolRegistry([tool_of(who)]).specs(None)[0].parameters["properties"]
    assert set(ToolRegistry([tool_of(norm)]).specs(None)[0].parameters["required"]) == {"x", "y"}


async def test_calls_are_validated_strictly_and_receive_their_context():
    registry = ToolRegistry([tool_of(word_count), tool_of(who), tool_of(norm)])
    assert await registry.call("word_count", {"text": "a b a", "unique": True}, CONTEXT) == 2
    assert await registry.call("whoami", {"shout": True}, CONTEXT) == "ALICE@ACME"
    assert await registry.call("norm", {"x": 3, "y": 4}, CONTEXT) == 5.0
    with pytest.raises(ModelBehaviorError, match="text"):
        await registry.call("word_count", {"txt": "a"}, CONTEXT)


async def test_sync_tools_run_off_the_event_loop_and_a_cancel_does_not_wait_for_them():
    release = threading.Event()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    seen: list[str] = []

    @tool
    def blocking(label: str) -> str:
        """Block until released."""
        seen.append(threading.current_thread().name)
        loop.call_soon_threadsafe(started.set)
        release.wait(5)
        return label

    registry = ToolRegistry([tool_of(blocking)])
    task = asyncio.create_task(registry.call("blocking", {"label": "x"}, CONTEXT))
    await asyncio.wait_for(started.wait(), 2)  # the loop stays free while the thread blocks
    assert seen[0] != threading.current_thread().name
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()


async def test_async_tools_are_cancelled():
    cancelled, started = asyncio.Event(), asyncio.Event()

    @tool
    async def forever() -> None:
        """Never finish."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.create_task(ToolRegistry([tool_of(forever)]).call("forever", {}, CONTEXT))
    await asyncio.wait_for(started.wait(), 2)
    task.cancel()
    await asyncio.wait_for(cancelled.wait(), 2)


def test_modules_are_loaded_and_bad_ones_are_named(tmp_path: Path, monkeypatch):
    (tmp_path / "my_tools.py").write_text(
        "from agent.tools.python import tool\n\n"
        "@tool\ndef shout(text: str) -> str:\n    '''Upper-case a text.'''\n"
        "    return text.upper()\n\n"
        "def helper() -> None:\n    pass\n"
    )
    (tmp_path / "no_tools.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    tools, sources = load_tool_modules(("my_tools",))
    assert [t.name for t in tools] == ["shout"] and sources == {"shout": "python:my_tools"}
    with pytest.raises(ValueError, match="'no_tools' has no function decorated with @tool"):
        load_tool_modules(("no_tools",))
    with pytest.raises(ValueError, match="cannot import 'missing_module'"):
        load_tool_modules(("missing_module",))


def test_a_parameter_without_a_hint_is_refused():
    with pytest.raises(TypeError, match="needs a type hint"):

        @tool
        def bad(x) -> None:  # type: ignore[no-untyped-def]
            """No hint."""
