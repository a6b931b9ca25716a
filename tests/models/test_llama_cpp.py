"""Runs against a real model server: llama.cpp's `llama-server` with Qwen2.5-Coder-0.5B-Instruct
and its own chat template (`--jinja`), the strictest common OpenAI-compatible server.

The model is small and runs on CPU, so these tests are few and each proves one thing a user
meets: an agent run that really calls a tool completes, a stop lands in the middle of a real
stream, a question asked through `request_input` is answered, a chat-mode turn works, and no
request the server sends is refused. The server runs as a user would run it: the shipped
config, the real date, and only the settings the README gives for a model on a CPU
(`llm.timeout_s`). What the model answers varies from run to run: the tests assert what the
server guarantees, and docs/eval.md measures how often the answers are right.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from bench.eval.record import echoes
from tests.conftest import Running, ServerFactory
from tests.fakes.client import kind
from tests.fakes.llama_cpp import LlamaServer, qwen_model, shared_server

pytestmark = pytest.mark.slow

_TIMEOUT = 240.0  # a whole run on CPU: several calls of a 0.5B model


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    """The session's server when the pytest controller runs one, else one for this module."""
    shared = shared_server()
    if shared is not None:
        try:
            yield shared
        finally:
            shared.close()
        return
    with LlamaServer(qwen_model()) as server:
        yield server


# What the README tells a user of a model on a CPU to set, besides where the model is.
_README_LLM = {"timeout_s": 300}


@pytest.fixture
async def real(server_factory: ServerFactory, llama: LlamaServer) -> AsyncIterator[Running]:
    llama.mark = len(llama.log())
    llm = {"base_url": llama.base_url, "model": "qwen", **_README_LLM}
    async with server_factory(llm=llm) as running:
        yield running


def _refused(llama: LlamaServer) -> list[str]:
    """Lines of the model server's log, since this test began, where it refused a request."""
    return [
        line
        for line in llama.log()[llama.mark :].splitlines()
        if "400" in line and ("error" in line.lower() or "status" in line.lower())
    ]


def _errors(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == "error"]


async def test_an_agent_run_calls_a_real_tool_and_completes(real: Running, llama: LlamaServer):
    async with await real.client() as c:
        await c.recv()
        await c.send(
            {
                "type": "chat",
                "content": "What time is it in Tokyo right now? Use the get_current_time tool.",
                "agent_max_steps": 1,  # one step proves it; a second one doubles the test's time
            }
        )
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] != "response_complete":
            frames += await c.until(
                lambda f: kind(f) in ("agent_request_input", "response_complete"), _TIMEOUT
            )
            if kind(frames[-1]) == "agent_request_input":  # a small model may ask: answer it
                await c.send({"type": "agent_user_input", "content": "I mean Tokyo, Japan."})
    assert _errors(frames) == [], [e["message"] for e in _errors(frames)]
    calls = [f for f in frames if f["type"] == "tool_start"]
    assert calls and calls[0]["tool_name"] == "get_current_time", [
        {k: v for k, v in f.items() if k not in ("session_id", "run_id", "ts", "type")}
        for f in frames
        if not kind(f).endswith("_delta")
    ]
    # Every call went through at once: none needed a retry (a stale kept-alive connection
    # is sent again by the transport, not reported as the model server's failure).
    assert not [f for f in frames if kind(f) == "agent_llm_retry"]
    # every call ended (the model's arguments may be wrong: then it is a tool_error it reads)
    ended = {f["tool_call_id"] for f in frames if f["type"] in ("tool_complete", "tool_error")}
    assert {f["tool_call_id"] for f in calls} <= ended
    completion = [f for f in frames if kind(f) == "agent_completion"]
    assert completion, [kind(f) for f in frames if not kind(f).endswith("_delta")]
    answer = completion[0]["final_answer"]
    assert answer.strip() and "```json" not in answer
    # Nothing the person reads is a sentence of our own prompts (docs/eval.md counts these).
    shown = [f.get("content") or f.get("delta") or "" for f in frames if kind(f) in _SHOWN]
    assert echoes([*shown, answer]) == []
    assert _refused(llama) == []


_SHOWN = (
    "agent_reason",
    "agent_reason_delta",
    "agent_observe",
    "agent_observe_delta",
    "agent_answer_delta",
)


async def test_stop_lands_in_the_middle_of_a_real_stream(real: Running, llama: LlamaServer):
    async with await real.client() as c:
        await c.recv()
        await c.send(
            {
                "type": "chat",
                "content": "Write a long story about a lighthouse keeper.",
                "tools": [],  # the prompt the question test sends: the model server reuses it
            }
        )
        await c.until(lambda f: kind(f) in ("agent_reason_delta", "agent_reasoning_delta"), 120)
        await c.send({"type": "agent_control", "action": "stop"})
        rest = await c.until("response_complete", 30)
    stopped = [f for f in rest if kind(f) == "agent_stopped"]
    assert stopped and stopped[0]["reason"] == "user"
    assert stopped[0]["usage"]["llm_calls"] >= 1  # the call the stop cut short is counted
    assert _errors(rest) == []


async def test_a_question_is_asked_and_answered(real: Running, llama: LlamaServer):
    """The model asks, the answer goes back to it, and the run goes on with it; then a stop
    ends the run (the first test already proves a run completes; more steps of a 0.5B model
    prove nothing more and take the longest part of this module)."""
    async with await real.client() as c:
        await c.recv()
        await c.send(
            {
                "type": "chat",
                "content": (
                    "Tell me the time in my city. You do not know my city: ask me for it "
                    "first with the request_input tool."
                ),
                "agent_max_steps": 2,  # the model may plan in step 1 and ask in step 2
                "tools": [],  # only `request_input` is offered: the small model must ask
            }
        )
        asked = await c.until(
            lambda f: kind(f) in ("agent_request_input", "response_complete"), _TIMEOUT
        )
        assert kind(asked[-1]) == "agent_request_input", [kind(f) for f in asked]
        await c.send({"type": "agent_user_input", "content": "Paris"})
        rest = await c.until(lambda f: kind(f) in ("agent_observe", "response_complete"), _TIMEOUT)
        if kind(rest[-1]) != "response_complete":
            await c.send({"type": "agent_control", "action": "stop"})
            rest += await c.until("response_complete", 60)
    assert _errors(asked + rest) == [], [e["message"] for e in _errors(asked + rest)]
    answered = [i for i, f in enumerate(rest) if kind(f) == "agent_user_answer"]
    assert answered and rest[answered[0]]["content"] == "Paris"
    observed = [i for i, f in enumerate(rest) if kind(f) == "agent_observe"]
    assert observed and observed[0] > answered[0], [kind(f) for f in rest]  # it went on
    assert any(kind(f) in ("agent_completion", "agent_stopped") for f in rest)
    assert _refused(llama) == []


async def test_a_chat_mode_turn_streams_an_answer(real: Running, llama: LlamaServer):
    async with await real.client() as c:
        await c.recv()
        first = await c.run("What is the capital of France?", agent_mode=False, timeout=_TIMEOUT)
        second = await c.run("And of Italy?", agent_mode=False, timeout=_TIMEOUT)
    for frames in (first, second):
        assert _errors(frames) == []
        assert any(kind(f) == "chat_delta" for f in frames)
    answer = next(f for f in first if kind(f) == "chat_response")["content"]
    assert "Paris" in answer
    assert _refused(llama) == []


async def test_a_message_too_long_for_the_window_gets_a_clear_error(real: Running):
    long_message = "Summarize this: " + "the quick brown fox jumps over the lazy dog " * 700
    async with await real.client() as c:
        await c.recv()
        frames = await c.run(long_message, agent_max_steps=1, timeout=_TIMEOUT)
    errors = _errors(frames)
    assert [e["code"] for e in errors] == ["llm_error"]
    assert "context window" in errors[0]["message"] and "--ctx-size" in errors[0]["message"]


async def test_a_reply_past_its_limit_is_closed_and_the_model_server_stops(
    server_factory: ServerFactory, llama: LlamaServer
):
    """A reply that goes on past `agent.reply_max_chars` is closed there, and the model server
    cancels the generation."""
    llama.mark = len(llama.log())
    llm = {"base_url": llama.base_url, "model": "qwen", **_README_LLM}
    async with server_factory(llm=llm, agent={"reply_max_chars": 1000}) as running:
        async with await running.client() as c:
            await c.recv()
            frames = await c.run(
                "Write a long story about a lighthouse keeper.",
                agent_mode=False,
                tools=[],
                timeout=_TIMEOUT,
            )
    assert _errors(frames) == []
    answer = next(f for f in frames if kind(f) == "chat_response")["content"]
    assert answer.endswith(
        "[Cut here: the reply went on past 1,000 characters; the rest was not read.]"
    )
    assert "".join(f["delta"] for f in frames if kind(f) == "chat_delta") == answer
    # llama.cpp notices the closed stream at its next write and logs the cancelled task
    assert await asyncio.to_thread(_logged, llama, "stop: cancel task", 30)
    assert _refused(llama) == []


def _logged(llama: LlamaServer, text: str, timeout: float) -> bool:
    """Whether the model server's log shows `text` (since the test began) within `timeout`:
    it is another process's file, read until the line comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in llama.log()[llama.mark :]:
            return True
        time.sleep(0.1)
    return False
