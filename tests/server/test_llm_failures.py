"""The LLM failing: retried when transient, reported as llm_error when it stays down."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from websockets.asyncio.client import connect

from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, Reply, observe, reason


async def test_transient_failures_are_retried(server_factory, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(status=429), Reply(status=503))
    fake_llm.script("observe", observe("ok", final="made it"))
    async with server_factory(llm={"max_retries": 2}) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("hi")
    assert frames[-2]["final_answer"] == "made it"
    assert fake_llm.phases()[:3] == ["reason", "reason", "reason"]
    retries = [f for f in frames if kind(f) == "agent_llm_retry"]  # shown as they happen
    assert [(r["attempt"], r["max_attempts"], r["phase"]) for r in retries] == [
        (2, 3, "reason"),
        (3, 3, "reason"),
    ]
    assert "busy" in retries[0]["reason"] and "503" in retries[1]["reason"]
    assert all(r["delay_ms"] >= 0 for r in retries)


async def test_a_busy_server_is_asked_again_when_it_says_not_before(
    server_factory, fake_llm: FakeLLM
):
    """A 429 or 503 with `Retry-After` is tried again after that wait, not the backoff's
    (an attempt before it is refused again); the retry frame says the wait."""
    busy = {"Retry-After": "1"}
    fake_llm.script("reason", Reply(status=429, headers=busy), Reply(status=503, headers=busy))
    async with server_factory(llm={"max_retries": 2}) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("hi", timeout=30)
    assert frames[-2]["type"] == "agent_update" and frames[-2]["update_type"] == "agent_completion"
    retries = [f for f in frames if kind(f) == "agent_llm_retry"]
    assert [r["delay_ms"] for r in retries] == [1000, 1000]
    assert retries[1]["ts"] - retries[0]["ts"] >= 900  # it waited: no sooner than it was told


async def test_a_persistent_failure_ends_the_run_with_llm_error(server, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(status=500), Reply(status=500))
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        frames = await c.run("hi")
        assert [kind(f) for f in frames] == [
            "agent_user_message",
            "agent_start",
            "agent_turn_start",
            "agent_llm_retry",
            "error",
            "response_complete",
        ]
        error = frames[4]
        assert error["code"] == "llm_error" and "500" in error["message"]
        assert error["session_id"] == session and error["seq"] == 5
        assert fake_llm.phases() == ["reason", "reason"]  # max_retries = 1 in tests
        again = await c.run("and now?")
        assert again[-2]["type"] == "agent_update"


async def test_a_failed_run_reports_what_it_used_and_the_session_counts_it(
    server, fake_llm: FakeLLM
):
    """The calls before a model failure were paid for: the `error` carries the run's usage
    and `/usage` counts the run (each fake call costs 10 + 5 tokens)."""
    fake_llm.script("observe", observe("Not done yet."))  # step 1 goes on to step 2 ...
    fake_llm.script("reason", reason(), Reply(status=500), Reply(status=500))  # ... and fails
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        frames = await c.run("hi")
    error = frames[-2]
    assert error["code"] == "llm_error"
    assert error["usage"]["llm_calls"] == 3 and error["usage"]["total_tokens"] == 45
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        usage = (await http.get(f"/api/sessions/{session}/usage")).json()
    assert usage["runs"] == 1 and usage["usage"]["llm_calls"] == 3
    assert usage["usage"]["total_tokens"] == 45


async def test_a_chat_run_failing_at_once_reports_no_calls(server, fake_llm: FakeLLM):
    fake_llm.script("chat", Reply(status=500), Reply(status=500))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("hi", agent_mode=False)
    assert frames[-2]["code"] == "llm_error" and frames[-2]["usage"]["llm_calls"] == 0


async def test_each_run_is_logged_as_it_starts_and_ends(
    server, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
):
    """One line when a run starts and one when it ends, with how; a failure says why."""
    fake_llm.script("chat", Reply(status=404, error={"message": "no model `x`"}))
    with caplog.at_level(logging.INFO, logger="server.run_driver"):
        async with await server.client() as c:
            session = (await c.recv())["session_id"]
            done = await c.run("one")
            failed = await c.run("two", agent_mode=False)
    ours = [r for r in caplog.records if r.name == "server.run_driver"]
    lines = [r.getMessage() for r in ours]
    first, second = done[0]["run_id"], failed[0]["run_id"]
    assert lines[0] == f"run {first} started in session {session} (agent mode, chat)"
    assert lines[1].startswith(f"run {first} ended after ")
    assert lines[2] == f"run {second} started in session {session} (chat mode, chat)"
    assert lines[3].startswith(f"run {second} failed after ")
    assert "s: The language model answered with an error (HTTP 404)" in lines[3]
    assert "no model `x`" in lines[3]
    assert [r.levelno for r in ours] == [logging.INFO] * 3 + [logging.WARNING]


async def test_client_errors_are_not_retried(server, fake_llm: FakeLLM):
    # The server's reason says what to fix, except a refused key's (it may quote the key).
    missing = {"message": "The model `gpt-9` does not exist.", "type": "invalid_request_error"}
    refused = {"message": "Incorrect API key provided: sk-abc***xyz.", "type": "auth"}
    fake_llm.script("reason", Reply(status=404, error=missing), Reply(status=401, error=refused))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("hi")
        assert frames[-2]["code"] == "llm_error"
        assert frames[-2]["message"] == (
            "The language model answered with an error (HTTP 404): "
            "The model `gpt-9` does not exist."
        )
        frames = await c.run("again")
    assert frames[-2]["message"] == "The language model answered with an error (HTTP 401)."
    assert fake_llm.phases() == ["reason", "reason"]


async def test_a_stream_cut_before_anything_was_shown_is_asked_again(
    server_factory, fake_llm: FakeLLM
):
    """Nothing of it reached the client, so nothing repeats: a break before the first chunk
    (a proxy's idle timeout while a slow model reads its prompt) is retried like a refused
    connection, within the same `max_retries`."""
    cut = Reply(chunks=["never shown"], drop_after=0)
    fake_llm.script("reason", cut, cut)
    async with server_factory(llm={"max_retries": 2}) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("hi")
            fake_llm.script("reason", cut, cut, cut)
            failed = await c.run("again")  # three breaks: the third attempt was the last
    assert frames[-2]["update_type"] == "agent_completion"
    retries = [f for f in frames if kind(f) == "agent_llm_retry"]
    assert [(r["attempt"], r["max_attempts"]) for r in retries] == [(2, 3), (3, 3)]
    assert retries[0]["reason"] == "the model server's reply broke off before its first text"
    assert not any(kind(f) == "agent_reason_delta" and "never" in f["delta"] for f in frames)
    assert failed[-2]["code"] == "llm_error"
    assert [(r["attempt"]) for r in failed if kind(r) == "agent_llm_retry"] == [2, 3]


async def test_a_stream_cut_mid_reply_is_an_llm_error_not_a_retry(server, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(chunks=["partial ", "answer"], drop_after=1))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("hi")
    assert [kind(f) for f in frames][-3:] == ["agent_reason_delta", "error", "response_complete"]
    assert frames[-2]["code"] == "llm_error"
    assert fake_llm.phases() == ["reason"]


async def test_an_unreachable_llm_is_reported_plainly(server_factory):
    async with server_factory(llm={"base_url": "http://127.0.0.1:9/v1", "max_retries": 0}) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("hi", agent_mode=False)
    assert frames[-2]["code"] == "llm_error"
    assert "could not be reached" in frames[-2]["message"]


async def test_a_failing_store_ends_the_run_with_storage_error(server_factory, fake_llm, tmp_path):
    import sqlite3

    fake_llm.script("reason", Reply(chunks=["a", "b"], hang_after=1))
    async with server_factory() as s:
        async with await s.client() as c:
            await c.recv()
            await c.send({"type": "chat", "content": "hi"})
            await c.until("agent_reason_delta")
            db = sqlite3.connect(tmp_path / "agent.db")
            db.execute("DROP TABLE events")  # every later event write fails
            db.close()
            await c.send({"type": "agent_control", "action": "stop"})
            frames = await c.until("response_complete")
            assert [kind(f) for f in frames] == ["error", "response_complete"]
            assert frames[0]["code"] == "storage_error"
            assert "seq" not in frames[0] and "seq" not in frames[1]
            assert "could not be saved" in frames[0]["message"]
            await c.send({"type": "agent_control", "action": "stop"})
            assert (await c.recv())["code"] == "no_active_run"  # the session is usable


async def test_an_unexpected_failure_is_internal_error_without_details(server_factory, fake_llm):
    from agent.prompts import FilePromptProvider

    class BrokenPrompts(FilePromptProvider):
        def render(self, name: str, **values: object) -> str:
            if name == "agent_observe_prompt":
                raise KeyError("secret internal detail")
            return super().render(name, **values)

    async with server_factory(prompts=BrokenPrompts()) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("hi")
    assert frames[-2]["code"] == "internal_error"
    assert "secret" not in frames[-2]["message"] and "KeyError" not in frames[-2]["message"]


async def test_a_runaway_reply_is_closed_and_every_frame_fits_a_default_client(
    server_factory, fake_llm: FakeLLM
):
    """A model that never stops (no output limit on its server) would make `chat_response`
    carry megabytes, and every replay of the session would close a default client with
    1009. The server closes the model's stream at `agent.reply_max_chars` instead."""
    # Text that never repeats itself (a loop is closed sooner: agent/repetition.py).
    chunks = [" ".join(f"w{i}-{j}" for j in range(500)) + " " for i in range(400)]
    fake_llm.script("chat", Reply(chunks=chunks, delay_s=0.001))
    async with server_factory(agent={"reply_max_chars": 100_000}) as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("write", agent_mode=False, timeout=30)
        await fake_llm.wait_disconnects(1)  # the stream was closed, not read to its end
        url = f"ws://{s.address}/ws?session_id={session}&after_seq=0"
        async with connect(url) as default:  # websockets' own limit: 1 MiB
            replayed = [json.loads(await default.recv()) for _ in range(len(frames) + 1)][1:]
    (answer,) = [f["content"] for f in frames if f["type"] == "chat_response"]
    assert len(answer) < 100_200
    assert answer.endswith("the reply went on past 100,000 characters; the rest was not read.]")
    assert "".join(f["delta"] for f in frames if f["type"] == "chat_delta") == answer
    assert replayed == frames
