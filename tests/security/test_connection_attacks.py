"""Sockets and headers from outside: floods, half requests, huge heads, foreign Host names
(issue 13, items 2 and 3). Floods are bounded: a lowered cap, a few hundred sockets."""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import socket
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from server.guard import (
    HEALTH_SLOTS,
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    MAX_LINE_BYTES,
    HeadScan,
    RateLimitedExceptionHandler,
    raise_open_file_limit,
)
from tests.conftest import ServerFactory
from tests.fakes.openai_server import FakeLLM, Reply, unrepeated
from tests.security.harness import idle_connections, raw_exchange, status_of

TOKEN = "tenant-a-token-0123456789"


def upgrade(address: str, target: str = "/ws", extra: str = "") -> bytes:
    return (
        f"GET {target} HTTP/1.1\r\nHost: {address}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\n{extra}\r\n"
    ).encode()


async def test_a_flood_of_idle_sockets_is_capped_refused_and_timed_out(
    server_factory: ServerFactory,
) -> None:
    cap, timeout = 40, 1.0
    server = {"max_connections": cap, "request_timeout_s": timeout}
    async with server_factory(server=server) as running:
        async with idle_connections(running.address, 3 * cap) as flood:
            # At the cap, each newcomer took the slot of the oldest silent socket; so does a
            # health check now, and it is answered.
            probe = f"GET /healthz HTTP/1.1\r\nHost: {running.address}\r\n\r\n"
            answer = await raw_exchange(running.address, probe.encode())
            assert status_of(answer) == 200
            answers = await flood.answers(timeout=timeout + 5)
        assert None not in answers, "a silent connection outlived the request deadline"
        assert answers == [b""] * (3 * cap)  # silent: closed without a word, never a 503
        async with httpx.AsyncClient(base_url=f"http://{running.address}") as http:
            assert (await http.get("/healthz")).status_code == 200
        async with await running.client() as client:
            assert (await client.recv())["type"] == "session"


async def test_a_server_full_of_established_sockets_refuses_a_newcomer_with_503(
    server_factory: ServerFactory,
) -> None:
    """Only sockets without a complete head yield their slot: with the cap held by WebSockets
    and the health slots by kept-alive connections, one more is a clear 503, not a hang."""
    cap = 3
    async with server_factory(server={"max_connections": cap}) as running:
        clients = [await running.client() for _ in range(cap)]
        probe = f"GET /healthz HTTP/1.1\r\nHost: {running.address}\r\n\r\n".encode()
        host, port = running.address.rsplit(":", 1)
        kept = []
        try:
            for _ in range(HEALTH_SLOTS):  # each asks before the next opens: none is silent
                reader, writer = await asyncio.open_connection(host, int(port))
                kept.append(writer)
                writer.write(probe)
                assert (await reader.readuntil(b'{"status":"ok"}')).startswith(b"HTTP/1.1 200")
            refused = await raw_exchange(running.address, probe)
            assert status_of(refused) == 503
        finally:
            for client in clients:
                await client.close()
            for writer in kept:
                writer.close()


async def test_a_server_full_of_clients_still_answers_its_health_check(
    server_factory: ServerFactory,
) -> None:
    # An orchestrator's liveness probe must not take a process full of clients for a dead one
    # (and restart it, dropping them all): a few slots past the cap serve /healthz only.
    cap = 4
    async with server_factory(server={"max_connections": cap}) as running:
        clients = [await running.client() for _ in range(cap)]
        try:
            for client in clients:
                assert (await client.recv())["type"] == "session"
            address = running.address
            health = f"GET /healthz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
            answer = await raw_exchange(address, health.encode())
            assert status_of(answer) == 200 and b'"status":"ok"' in answer.replace(b" ", b"")
            head = health.replace("GET", "HEAD", 1).encode()
            assert status_of(await raw_exchange(address, head)) == 200
            # A head that could still become a health check is waited for, not refused.
            assert status_of(await raw_exchange(address, b"GET /heal", timeout=0.5)) is None
            other = f"GET /api/sessions HTTP/1.1\r\nHost: {address}\r\n\r\n".encode()
            assert status_of(await raw_exchange(address, other)) == 503
            assert status_of(await raw_exchange(address, upgrade(address))) == 503
            assert status_of(await raw_exchange(address, b"GET /healthzz HTTP/1.1\r\n")) == 503
            # Silent sockets holding the health slots yield them to a check (they held them
            # for HEALTH_HEAD_TIMEOUT_S each, and a flood that reopened them got every probe
            # a 503).
            async with idle_connections(address, HEALTH_SLOTS) as silent:
                assert status_of(await raw_exchange(address, health.encode())) == 200
                assert (await silent.answers(timeout=5))[0] == b""  # the oldest, closed
        finally:
            for client in clients:
                await client.close()


async def test_half_sent_requests_and_handshakes_get_408(server_factory: ServerFactory) -> None:
    async with server_factory(server={"request_timeout_s": 0.5}) as running:
        half_get = b"GET /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        half_upgrade = upgrade(running.address)[:-30]
        for partial in (half_get, half_upgrade, b"G"):  # each answered, by its deadline
            answer = await raw_exchange(running.address, partial, timeout=5)
            assert status_of(answer) == 408, answer[:80]
        # A kept-alive connection must send its next head in time too.
        answer = await raw_exchange(
            running.address,
            f"GET /healthz HTTP/1.1\r\nHost: {running.address}\r\n\r\nGET /hea".encode(),
        )
        assert status_of(answer) == 200 and b"408 Request Timeout" in answer


async def test_oversized_heads_are_answered_414_and_431(server_factory: ServerFactory) -> None:
    async with server_factory() as running:
        address = running.address
        long_target = upgrade(address, "/ws?pad=" + "a" * 9000)
        assert status_of(await raw_exchange(address, long_target)) == 414
        long_header = upgrade(address, extra=f"X-Pad: {'b' * 9000}\r\n")
        assert status_of(await raw_exchange(address, long_header)) == 431
        many = "".join(f"X-{i}: v\r\n" for i in range(150))
        assert status_of(await raw_exchange(address, upgrade(address, extra=many))) == 431
        plain = f"GET /healthz?{'c' * 9000} HTTP/1.1\r\nHost: {address}\r\n\r\n".encode()
        assert status_of(await raw_exchange(address, plain)) == 414
        # Just under the limits still works (and closes: raw_exchange reads until the close).
        fine = f"GET /healthz?{'c' * 8000} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        fine = fine.encode()
        assert status_of(await raw_exchange(address, fine)) == 200


@pytest.mark.parametrize("auth", [False, True], ids=["no-auth", "auth"])
async def test_only_configured_host_names_are_served(
    server_factory: ServerFactory, auth: bool
) -> None:
    sections: dict[str, Any] = {}
    headers = {}
    if auth:
        sections["auth"] = {"tokens": {TOKEN: {"tenant": "a", "user": "u"}}}
        headers["Authorization"] = f"Bearer {TOKEN}"
    async with server_factory(**sections) as running:
        port = running.address.rsplit(":", 1)[1]
        async with httpx.AsyncClient(base_url=f"http://{running.address}") as http:
            evil = await http.get(
                "/api/sessions", headers={**headers, "Host": f"evil.example:{port}"}
            )
            assert evil.status_code == 400
            assert b"sessions" not in evil.content
            for good in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
                response = await http.get("/api/sessions", headers={**headers, "Host": good})
                assert response.status_code == 200, good
        url = f"ws://{running.address}/ws"
        with pytest.raises(InvalidStatus) as refused:
            async with connect(
                url, additional_headers={**headers, "Host": f"evil.example:{port}"}, open_timeout=5
            ):
                pass
        assert refused.value.response.status_code == 400
        async with connect(url, additional_headers=headers, open_timeout=5) as ws:
            assert b"session" in str(await ws.recv()).encode()


async def test_allowed_hosts_are_configurable(server_factory: ServerFactory) -> None:
    async with server_factory(server={"allowed_hosts": ["agent.example"]}) as running:
        async with httpx.AsyncClient(base_url=f"http://{running.address}") as http:
            assert (
                await http.get("/healthz", headers={"Host": "agent.example"})
            ).status_code == 200
            # server.host (127.0.0.1) is always served; localhost is no longer listed.
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/healthz", headers={"Host": "localhost"})).status_code == 400


async def test_a_repeating_loop_error_is_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    handler = RateLimitedExceptionHandler(interval_s=60)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        for _ in range(10_000):
            handler(loop, {"message": "socket.accept() out of system resource"})
        handler(loop, {"message": "something else"})
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["socket.accept() out of system resource", "something else"]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def test_a_flood_of_malformed_requests_logs_one_line(server_factory: ServerFactory) -> None:
    records = _Records()
    logging.getLogger("uvicorn.error").addHandler(records)
    try:
        async with server_factory() as running:
            answers = [await raw_exchange(running.address, b"NOT HTTP\r\n\r\n") for _ in range(50)]
    finally:
        logging.getLogger("uvicorn.error").removeHandler(records)
    assert all(status_of(a) == 400 for a in answers)
    assert records.messages.count("Invalid HTTP request received.") <= 1


def test_the_descriptor_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        assert raise_open_file_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == (
            hard if hard != resource.RLIM_INFINITY else max(lowered, 1_048_576)
        )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _head_problem_whole(head: bytes) -> int | None:
    """The head check as it was written first: the whole head split at every read."""
    end = head.find(b"\r\n\r\n")
    complete = head[: end + 2] if end >= 0 else head
    lines = bytes(complete).split(b"\r\n")
    if len(lines[0]) > MAX_LINE_BYTES:
        return 414
    if len(complete) > MAX_HEAD_BYTES or len(lines) > MAX_HEADERS + 2:
        return 431
    if any(len(line) > MAX_LINE_BYTES for line in lines[1:]):
        return 431
    return None


_HEAD_PIECES = st.sampled_from(
    [b"\r", b"\n", b"\r\n", b"GET / HTTP/1.1", b"Host: x", b"a" * 3000, b"b" * 9000, b": "]
)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(_HEAD_PIECES, max_size=40), cuts=st.lists(st.integers(1, 9), max_size=60))
def test_the_head_is_scanned_once_and_judged_as_if_whole(pieces: list[bytes], cuts: list[int]):
    """HeadScan reads each byte once, in the pieces it arrives in; its verdict after each
    piece is the whole-head check's on everything so far, until it refuses."""
    head = b"".join(pieces)
    scan = HeadScan()
    at = 0
    for size in [*cuts, len(head)]:
        piece, at = head[at : at + size], at + size
        if not piece:
            break
        got = scan.feed(piece)
        assert got == _head_problem_whole(head[:at]), (head[:at][:80], got)
        if got is not None:
            break


class _Seen(logging.Handler):
    """Sets an event when a record whose message starts with `prefix` is logged."""

    def __init__(self, prefix: str) -> None:
        super().__init__(logging.DEBUG)
        self.prefix = prefix
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.prefix):
            self.event.set()


async def test_a_response_its_client_never_reads_is_dropped_after_the_write_timeout(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    """An AG-UI client that stops reading its event stream held the stream's frames and its
    session for as long as the socket stayed open: uvicorn has no write timeout."""
    chunks = [unrepeated(20_000, seed) for seed in range(400)]  # no loop to close early
    fake_llm.script("chat", Reply(chunks=chunks, delay_s=0.001))
    seen = _Seen("closed a connection whose client read nothing")
    guard_log = logging.getLogger("server.guard")
    level = guard_log.level
    guard_log.addHandler(seen)
    guard_log.setLevel(logging.DEBUG)
    tight = socket.socket()
    tight.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    tight.setblocking(False)
    try:
        options = {"server": {"write_timeout_s": 0.5}, "agent": {"reply_max_chars": 10_000_000}}
        async with server_factory(**options) as running:
            host, port = running.address.split(":")
            await asyncio.get_running_loop().sock_connect(tight, (host, int(port)))
            body = json.dumps(
                {
                    "threadId": "unread",
                    "runId": "r",
                    "state": None,
                    "tools": [],
                    "context": [],
                    "forwardedProps": {"agent_mode": False},
                    "messages": [{"id": "m", "role": "user", "content": "write a lot"}],
                }
            ).encode()
            head = (
                f"POST /agui HTTP/1.1\r\nHost: {running.address}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            await asyncio.get_running_loop().sock_sendall(tight, head + body)
            async with asyncio.timeout(20):
                await seen.event.wait()  # then it never reads: the server gave up on it
    finally:
        guard_log.removeHandler(seen)
        guard_log.setLevel(level)
        tight.close()
