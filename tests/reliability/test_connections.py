"""Slow readers, dead peers, and clients that leave in every phase of a run."""

from __future__ import annotations

import asyncio
import base64
import math
import os
import socket
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.fakes.client import Client, kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, unrepeated
from tests.fakes.tools import Gate


def _deltas_to_fill(chunk_bytes: int, queued: int) -> int:
    """Enough deltas to fill what holds a client's unread frames, with half again to spare: the
    server's queue, and its kernel send buffer, which grows up to tcp_wmem's maximum (the
    client's receive buffer is kept at 4 kB)."""
    try:
        send_buffer = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    except (OSError, IndexError, ValueError):
        send_buffer = 4 << 20  # Linux's usual maximum
    return math.ceil(1.5 * (send_buffer / chunk_bytes + queued))


async def test_a_client_that_stops_reading_is_closed_with_1013_and_slows_nothing(
    server_factory, fake_llm: FakeLLM
):
    chunk_chars = 20_000
    # deltas at a pace a reading client keeps up with (the fake LLM's own speed)
    deltas = _deltas_to_fill(chunk_chars, queued=64)
    chunks = [unrepeated(chunk_chars, seed) for seed in range(deltas)]  # no loop to close early
    fake_llm.script("reason", Reply(chunks=chunks, delay_s=0.001))
    long_replies = {"reply_max_chars": chunk_chars * deltas}  # the whole reply is read
    async with server_factory(server={"outbound_queue_size": 64}, agent=long_replies) as s:
        watcher = await s.client()
        session = (await watcher.recv())["session_id"]
        url = f"ws://{s.address}/ws?session_id={session}"
        host, port = s.address.split(":")
        tight = socket.socket()
        tight.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
        tight.setblocking(False)
        await asyncio.get_running_loop().sock_connect(tight, (host, int(port)))
        async with connect(url, sock=tight, max_queue=1, max_size=None) as sluggish:
            first = await sluggish.recv()  # the session frame; then it never reads again
            assert '"session"' in first
            await watcher.send({"type": "chat", "content": "stream a lot"})
            frames = await watcher.until("response_complete", timeout=60)
            assert frames[-2].get("update_type") == "agent_completion", frames[-2]
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(sluggish.recv(), 10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        # It resumes from the stored events and gets everything, in order.
        async with await s.client(session_id=session, after_seq=0) as again:
            await again.recv()
            replay = await again.until("response_complete", timeout=30)
        assert [f["seq"] for f in replay] == list(range(1, len(replay) + 1))
        assert replay == frames
        await watcher.close()


async def _raw_handshake(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = address.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET /ws HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    status = await reader.readline()
    assert b"101" in status
    return reader, writer


async def test_a_peer_that_never_answers_pings_is_dropped(server_factory):
    async with server_factory(server={"ping_interval_s": 0.2, "ping_timeout_s": 0.2}) as s:
        reader, writer = await _raw_handshake(s.address)  # a client that never sends a pong
        async with asyncio.timeout(5):
            while await reader.read(65536):  # the session frame, pings, then the close
                pass
        writer.close()
        hub = s.app.state.services.hub
        await asyncio.wait_for(hub.wait_empty(), 5)  # the session was released
        assert hub.live_count() == 0


async def test_a_normal_client_survives_keepalive(server_factory):
    async with server_factory(server={"ping_interval_s": 0.1, "ping_timeout_s": 0.5}) as s:
        async with await s.client() as c:
            await c.recv()
            await asyncio.sleep(0.5)  # several ping rounds pass while the client idles
            frames = await c.run("still here?")
            assert kind(frames[-1]) == "response_complete"


PHASES = ["agent_turn_start", "agent_reason_delta", "tool_start", "agent_observe_delta"]


@pytest.mark.parametrize("leave_after", PHASES + ["agent_request_input"])
async def test_leaving_in_any_phase_does_not_stop_the_run(server_factory, fake_llm, leave_after):
    gate = Gate()
    if leave_after == "agent_request_input":
        fake_llm.script("act", act(FakeToolCall("request_input", {"question": "Which?"})))
    else:
        fake_llm.script("act", act(FakeToolCall("wait_for_gate", {"label": "a"})))
    fake_llm.script("observe", observe("done", final="Finished without you."))
    async with server_factory(extra_tools=[gate.tool], tools={"enabled": ["wait_for_gate"]}) as s:
        c = await s.client()
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "go"})
        if leave_after == "agent_observe_delta":
            gate.opened.set()  # the tool must finish before Observe can stream
        seen = await c.until(leave_after)
        await c.close()
        gate.opened.set()
        async with await Client.connect(
            s.address, session_id=session, after_seq=seen[-1]["seq"]
        ) as again:
            hello = await again.recv()
            if leave_after == "agent_request_input":
                assert hello["status"] == "awaiting_input"
                await again.send({"type": "agent_user_input", "content": "that one"})
            rest = await again.until("response_complete")
    seqs = [f["seq"] for f in seen + rest]
    assert seqs == list(range(1, len(seqs) + 1))
    assert rest[-2]["final_answer"] == "Finished without you."


async def test_chats_and_stops_in_one_breath_from_many_clients_all_end(
    server_factory, fake_llm: FakeLLM
):
    clients, rounds = 20, 8
    for _ in range(clients * rounds):
        fake_llm.script("reason", Reply(chunks=["tok "] * 40))
    async with server_factory(agent={"max_concurrent_runs_per_tenant": clients}) as s:

        async def rounds_of(i: int) -> None:
            async with await s.client() as c:
                await c.recv()
                for r in range(rounds):
                    await c.send({"type": "chat", "content": "go", "agent_max_steps": 1})
                    if r % 2:  # every other round is stopped at once, or a moment later
                        await asyncio.sleep(0.001 * (i % 3))
                        await c.send({"type": "agent_control", "action": "stop"})
                    frames = await c.until("response_complete", timeout=10)
                    errors = [f for f in frames if f["type"] == "error"]
                    # a stop that arrives after its run completed has nothing to stop
                    assert all(e["code"] == "no_active_run" for e in errors), errors
                    ends = [
                        kind(f) for f in frames if kind(f) in ("agent_completion", "agent_stopped")
                    ]
                    assert len(ends) == 1 and frames[-2].get("update_type") == ends[0], ends

        await asyncio.gather(*(rounds_of(i) for i in range(clients)))
