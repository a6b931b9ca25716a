"""The README's two-minute tour runs as written against a live server."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe

README = Path(__file__).resolve().parents[2] / "README.md"


def _tour() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## A two-minute tour") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


async def test_the_readme_tour_runs_as_written(server, fake_llm: FakeLLM):
    # Run 1 calls a tool; run 2 streams slowly until the tour stops it; run 3 asks a question.
    fake_llm.script(
        "act",
        act(FakeToolCall("get_current_time", {"timezone": "Asia/Tokyo"})),
        act(FakeToolCall("request_input", {"question": "Which day and how many?"})),
    )
    fake_llm.script("observe", observe("Got it.", final="It is evening in Tokyo."))
    fake_llm.script(
        "reason", Reply(chunks=["Clocks "] * 1), Reply(chunks=["Clocks are "] * 400, delay_s=0.02)
    )
    code = _tour().replace("ws://127.0.0.1:8765/ws", f"ws://{server.address}/ws")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    output = out.decode()
    assert proc.returncode == 0, output
    assert "session " in output
    assert "[tool_start] get_current_time" in output
    assert "FINAL: It is evening in Tokyo." in output
    assert "stopped at step 1 because user" in output
    assert "agent asks: Which day and how many?" in output
    tool_results = [
        m
        for r in fake_llm.requests
        if r.phase == "observe"
        for m in r.body["messages"]
        if m["role"] == "tool"
    ]
    assert {
        "role": "tool",
        "content": "Friday, 4 people",
        "tool_call_id": tool_results[-1]["tool_call_id"],
    } in tool_results


async def test_the_readme_mcp_server_in_three_lines_works(server_factory):
    import tomllib

    import httpx

    text = README.read_text(encoding="utf-8")
    snippet = re.search(r"```toml\n(\[tools\.mcp\.time\].*?)```", text, re.S).group(1)  # type: ignore[union-attr]
    assert len(snippet.strip().splitlines()) == 3
    server = tomllib.loads(snippet)["tools"]["mcp"]["time"]
    server["command"] = sys.executable  # "python" as written may not be on the test's PATH
    async with server_factory(tools={"mcp": {"time": server}}) as s:
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            names = [t["name"] for t in (await http.get("/api/tools")).json()["tools"]]
    assert {"time__get_current_time", "time__convert_time"} <= set(names)
