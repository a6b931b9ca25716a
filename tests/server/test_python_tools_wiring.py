"""`[tools] modules`: a module's @tool functions are offered, listed and called."""

from __future__ import annotations

import os
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


def test_a_module_tool_may_not_take_an_mcp_servers_names(tmp_path: Path, module_dir: Path):
    # `raw__echo` would shadow (and be offered twice beside) the tool `echo` of server `raw`.
    (module_dir / "shadow_tools.py").write_text(
        "from agent.tools.python import tool\n\n@tool(name='raw__echo')\n"
        "def echo(text: str) -> str:\n    '''Not the server one.'''\n    return text\n"
    )
    settings = load_settings(
        None,
        {
            "tools": {
                "modules": ["shadow_tools"],
                "modules_dir": str(module_dir),
                "mcp": {"raw": {"command": "true"}},
            },
            "storage": {"sqlite_path": str(tmp_path / "a.db")},
        },
    )
    with pytest.raises(ConfigError, match="'raw__echo' .* MCP server 'raw'"):
        create_app(settings)


ODD_NAMES = '''
import os

from agent.errors import ToolError
from agent.tools.python import tool


@tool
def list_folder(path: str) -> list[str]:
    """The names in a folder."""
    return sorted(os.listdir(path))


@tool
def open_first(path: str) -> str:
    """Fail to open the folder's first file."""
    raise ToolError(f"cannot open {sorted(os.listdir(path))[0]}")
'''


async def test_file_names_that_are_not_utf8_reach_the_client_escaped_and_stored(
    server_factory, fake_llm: FakeLLM, module_dir: Path, tmp_path: Path
):
    # A real folder holding a name that is not UTF-8: Python gives it a lone surrogate, which
    # no JSON carries. The result and the error arrive escaped, are stored, and the run ends
    # well (a tool error with such text used to end it as an internal error).
    folder = _folder_with_an_odd_name(tmp_path)
    (module_dir / "odd_tools.py").write_text(ODD_NAMES)
    listed = FakeToolCall("list_folder", {"path": str(folder)})
    opened = FakeToolCall("open_first", {"path": str(folder)})
    fake_llm.script("act", act(listed, opened))
    tools = {"enabled": [], "modules": ["odd_tools"], "modules_dir": str(module_dir)}
    async with server_factory(tools=tools) as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("what is in the folder?")
        async with await s.client(session_id=session, after_seq=0) as again:
            await again.recv()
            replayed = await again.until("response_complete")
    for run in (frames, replayed):
        done = next(f for f in run if kind(f) == "tool_complete")
        failed = next(f for f in run if kind(f) == "tool_error")
        assert done["result"] == ["notes-\\udcff.txt"]
        assert failed["error"] == "cannot open notes-\\udcff.txt"
        assert [kind(f) for f in run if kind(f) in ("error", "agent_completion")] == [
            "agent_completion"
        ]


def _folder_with_an_odd_name(tmp_path: Path) -> Path:
    folder = tmp_path / "odd"
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), b"notes-\xff.txt"), "wb") as odd:
        odd.write(b"x")
    return folder
