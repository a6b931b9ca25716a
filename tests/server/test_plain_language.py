"""What users see never leaks internals: no control blocks, tracebacks or internal ids."""

from __future__ import annotations

import re

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason, text
from tests.fakes.servers import serve
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


def _broken_web() -> Starlette:
    """A SearXNG that answers HTTP 500 and a site whose every page is missing."""

    async def search(request: Request) -> Response:
        return JSONResponse({"error": "down"}, status_code=500)

    async def page(request: Request) -> Response:
        return PlainTextResponse("no such page", status_code=404)

    return Starlette(routes=[Route("/search", search), Route("/{path:path}", page)])


def _failing_web_steps(base: str, step: int) -> Reply:
    return act(
        FakeToolCall("web_search", {"query": f"opening hours museum {step}"}),
        FakeToolCall("web_fetch", {"urls": [f"{base}/museum/{step}"]}),
    )


@pytest.mark.parametrize("ending", ["budget", "max_steps"])
async def test_server_written_answers_say_what_failed_in_everyday_words(
    server_factory, fake_llm: FakeLLM, ending: str
):
    async with serve(_broken_web()) as address:
        base = f"http://{address}"
        steps = iter(range(1, 10))
        fake_llm.script("act", *(lambda body: _failing_web_steps(base, next(steps)),) * 4)
        fake_llm.script("observe", *(observe("Nothing useful yet."),) * 4)
        fake_llm.script("summarize", text(""))  # the summary call writes nothing
        options = {
            "tools": {
                "enabled": ["web_search", "web_fetch"],
                "web_search": {"provider": "searxng", "base_url": base},
                "web_fetch": {"allow_hosts": ["127.0.0.1"], "max_retries": 0},
            },
            "agent": {"max_run_tokens": 90 if ending == "budget" else 0, "stuck_steps": 0},
        }
        async with server_factory(**options) as s:
            async with await s.client() as c:
                await c.recv()
                frames = await c.run("When is the museum open?", agent_max_steps=2)
    completion = frames[-2]
    assert completion["stop_reason"] == ending
    answer = completion["final_answer"]
    # The technical detail is in the events, where the UI shows it on request...
    errors = [f["error"] for f in frames if kind(f) == "tool_error"]
    assert len(errors) == 4 and any("HTTP 500" in e for e in errors)
    assert any("404" in e for e in errors)
    # ...and the answer says, once each, what could not be done, in everyday words.
    assert "Nothing useful yet." in answer
    assert answer.count("search the web") == 1 and answer.count("open some of the web") == 1
    for technical in ("web_search", "web_fetch", "searxng", "SearXNG", "HTTP", "500", "404"):
        assert technical not in answer, (technical, answer)
