"""`[tools] modules`: a module's @tool functions are offered, listed and called."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from server.app import create_app
from server.settings import ConfigError, load_settings
from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, act

MODULE = '''
from agent.tools.python import tool


@tool
def shout(text: str, times: int = 1) -> str:
    """Repeat a text in capitals."""
    return " ".join([text.upper()] * times)
'''


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "tools_here"
    folder.mkdir()
    (folder / "wiring_tools.py").write_text(MODULE)
    monkeypatch.setattr(sys, "path", list(sys.path))  # restored after the test
    return folder


async def test_a_module_tool_is_listed_and_called(server_factory, fake_llm: FakeLLM, module_dir):
    call = FakeToolCall("shout", {"text": "hi", "times": 2})
    fake_llm.script("act", act(call))
    tools = {"enabled": [], "modules": ["wiring_tools"], "modules_dir": str(module_dir)}
    async with server_factory(tools=tools) as s:
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            listed = (await http.get("/api/tools")).json()["tools"]
        assert [(t["name"], t["source"]) for t in listed] == [("shout", "python:wiring_tools")]
        assert listed[0]["description"] == "Repeat a text in capitals."
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("shout")
    done = next(f for f in frames if kind(f) == "tool_complete")
    assert done["result"] == "HI HI"


def test_a_module_tool_may_not_take_a_built_in_name(tmp_path: Path, module_dir: Path):
    (module_dir / "clash_tools.py").write_text(
        "from agent.tools.python import tool\n\n@tool\ndef get_current_time() -> str:\n"
        "    '''Not the real one.'''\n    return 'noon'\n"
    )
    settings = load_settings(
        None,
        {
            "tools": {"modules": ["clash_tools"], "modules_dir": str(module_dir)},
            "storage": {"sqlite_path": str(tmp_path / "a.db")},
        },
    )
    with pytest.raises(ConfigError, match="'get_current_time' of python:clash_tools"):
        create_app(settings)
