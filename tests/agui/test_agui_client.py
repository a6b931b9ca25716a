"""The AG-UI reference client (@ag-ui/client's HttpAgent, from npm) drives a run end to end,
with a question answered by resuming; @ag-ui/core's schemas and the SDK's own verifier check
every event. Skipped when node or the npm packages (scripts/test-deps.sh) are missing."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeLLM, FakeToolCall, act, observe, reason

NPM_DIR = Path(os.environ.get("AGENT_SERVER_NPM_CACHE", Path.home() / ".cache/agent-server/npm"))
SCRIPT = Path(__file__).with_name("client.mjs")


async def run_client(
    url: str, thread: str, question: str, answer: str, tools: list | None = None
) -> dict:
    node = shutil.which("node")
    if node is None or not (NPM_DIR / "node_modules/@ag-ui/client").is_dir():
        pytest.skip("node or @ag-ui/client is missing: run scripts/test-deps.sh")
    proc = await asyncio.create_subprocess_exec(
        node,
        str(SCRIPT),
        str(NPM_DIR),
        url,
        thread,
        question,
        answer,
        json.dumps(tools or []),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert out, err.decode()
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert proc.returncode == 0 and report["ok"], (report.get("error"), report.get("rejected"))
    return report


async def test_httpagent_runs_a_task_and_resumes_an_interrupt(server, fake_llm: FakeLLM):
    clock = FakeToolCall("get_current_time", {"timezone": "Europe/Lisbon"})
    ask = FakeToolCall("request_input", {"question": "Which city?"})
    fake_llm.script("reason", reason("I need the time and the city."))
    fake_llm.script("act", act(clock, ask))
    fake_llm.script(
        "observe",
        lambda body: observe(
            "Got it.", final="Lisbon it is" if "Lisbon" in json.dumps(body) else "?"
        ),
    )
    thread = uuid.uuid4().hex
    report = await run_client(f"http://{server.address}/agui", thread, "Plan my trip", "Lisbon")

    events = report["events"]
    first, second = events[: report["runs"][0]], events[report["runs"][0] :]
    assert [e["type"] for e in (first[0], first[-1])] == ["RUN_STARTED", "RUN_FINISHED"]
    assert first[0]["threadId"] == thread
    assert first[-1]["outcome"]["type"] == "interrupt"
    assert report["interrupts"][0]["id"] == ask.id
    assert report["interrupts"][0]["message"] == "Which city?"
    kinds = [e["type"] for e in first]
    assert kinds.count("TOOL_CALL_START") == 1 and "TOOL_CALL_RESULT" in kinds
    assert second[0]["type"] == "RUN_STARTED" and second[0]["runId"] == first[0]["runId"]
    assert second[-1]["type"] == "RUN_FINISHED" and second[-1]["outcome"]["type"] == "success"
    answer = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert answer == "Lisbon it is"
    # The client's own message list was built from our events: the answer is its last
    # assistant message, the tool call and its result are there.
    assistant = [m for m in report["messages"] if m["role"] == "assistant"]
    assert assistant[-1]["content"] == "Lisbon it is"
    tools = [m for m in report["messages"] if m["role"] == "tool"]
    assert any(m["toolCallId"] == clock.id for m in tools)


async def test_httpagent_runs_a_frontend_tool_and_sends_its_result(server, fake_llm: FakeLLM):
    show = FakeToolCall("show_map", {"city": "Lisbon"})
    fake_llm.script("reason", reason("I will show the map."))
    fake_llm.script("act", act(show))
    fake_llm.script(
        "observe",
        lambda body: observe("Shown.", final="on the map" if "pinned" in json.dumps(body) else "?"),
    )
    tool = {
        "name": "show_map",
        "description": "Show a city on the map in the page.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    thread = uuid.uuid4().hex
    report = await run_client(
        f"http://{server.address}/agui", thread, "Show me Lisbon", "pinned", [tool]
    )

    events = report["events"]
    assert len(report["runs"]) == 2 and not report["interrupts"]
    first, second = events[: report["runs"][0]], events[report["runs"][0] :]
    assert first[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [show.id]}
    start = next(e for e in first if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "show_map"
    assert second[0]["runId"] == first[0]["runId"]  # the paused run went on
    assert second[-1]["result"]["final_answer"] == "on the map"
    calls = [
        c for m in report["messages"] if m["role"] == "assistant" for c in m.get("toolCalls", [])
    ]
    assert [c["function"]["name"] for c in calls] == ["show_map"]
