"""What users see never leaks internals: no control blocks, tracebacks or internal ids."""

from __future__ import annotations

import re

from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason
from tests.fakes.tools import echo_tool

USER_FACING = ("delta", "content", "final_answer", "error", "message", "question", "reason")
LEAKS = [
    re.compile(r"```"),
    re.compile(r'\{\s*"(plan|finish|should_continue|final_answer|observation)"'),
    re.compile(r"Traceback|File \"/|line \d+, in "),
    re.compile(r"call_[0-9a-f]{6,}"),
    re.compile(r"\b[0-9a-f]{32}\b"),
    re.compile(r"Error\(|Exception\b"),
]


def _leaks(frames: list[dict]) -> list[str]:
    found = []
    for frame in frames:
        for field in USER_FACING:
            value = frame.get(field)
            if isinstance(value, str):
                found += [f"{kind(frame)}.{field}: {value!r}" for p in LEAKS if p.search(value)]
    return found


async def test_rendered_events_of_a_messy_run_leak_nothing(server_factory, fake_llm: FakeLLM):
    fake_llm.script(
        "reason",
        reason("Let me try that."),
        Reply(chunks=['Second try.\n```json\n{"plan": "again", ', '"finish": fa']),
    )
    fake_llm.script(
        "act",
        act(
            FakeToolCall("echo", {"text": "crash"}),
            FakeToolCall("echo", '{"text": '),
            FakeToolCall("nope", {}),
        ),
    )
    fake_llm.script(
        "observe",
        observe("Some calls failed."),
        observe("I tried twice.", final="I could not finish: the echo tool broke."),
    )
    fake_llm.script("verify", Reply(chunks=['ok {"done": true, "reason": "It says so."}']))
    async with server_factory(extra_tools=[echo_tool], tools={"enabled": ["echo"]}) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("please echo", agent_max_steps=2)
            frames += await c.run("and stop", agent_mode=False)
            await c.send({"type": "chat", "content": "stop me"})
            await c.until("agent_start")
            await c.send({"type": "agent_control", "action": "stop"})
            frames += await c.until("response_complete")
    assert [f["type"] for f in frames if f["type"] == "tool_error"] == ["tool_error"] * 3
    assert _leaks(frames) == []


async def test_llm_failure_notices_are_plain(server, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(status=500), Reply(status=500))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("hi")
    error = frames[-2]
    assert error["code"] == "llm_error"
    assert error["message"].startswith("The language model")
    assert _leaks(frames) == []
