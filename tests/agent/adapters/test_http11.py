"""LeanTransport against real sockets: framing, keep-alive, a connection the server closed,
and a stream closed early."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx2 as httpx
import pytest

from agent.adapters.http11 import ChunkedBody, LeanTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class _Server:
    """A raw HTTP/1.1 server: `handler(reader, writer, n)` answers the n-th request (from 0)
    of each connection, or returns after closing it."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.closed_by_client = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        n = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client.set()
                    return
                length = _content_length(head)
                await reader.readexactly(length)
                await self.handler(reader, writer, n)
                if writer.is_closing():
                    return
                n += 1
        finally:
            writer.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            return int(value)
    return 0


@asynccontextmanager
async def _serving(handler: Handler) -> AsyncIterator[tuple[_Server, httpx.AsyncClient]]:
    server = _Server(handler)
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    fallback = httpx.MockTransport(lambda request: httpx.Response(599))
    client = httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", transport=LeanTransport(fallback), timeout=5
    )
    try:
        yield server, client
    finally:
        await client.aclose()
        listener.close()
        await listener.wait_closed()


def _reply(body: bytes, *headers: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"content-length: %d" % len(body), *headers]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def test_chunked_framing_split_anywhere_gives_the_same_body():
    wire = b"5;ext=1\r\nhello\r\n1\r\n \r\n6\r\nworld!\r\n0\r\nx-trailer: 1\r\n\r\n"
    for cut in range(1, len(wire)):
        body = ChunkedBody()
        data = body.feed(wire[:cut]) + body.feed(wire[cut:])
        assert (data, body.done, body.extra) == (b"hello world!", True, b""), cut


def test_chunked_framing_rejects_a_bad_size_and_notes_bytes_after_the_end():
    with pytest.raises(httpx.RemoteProtocolError):
        ChunkedBody().feed(b"zz\r\n")
    body = ChunkedBody()
    assert body.feed(b"2\r\nok\r\n0\r\n\r\nHTTP/1.1") == b"ok"
    assert body.done and body.extra == b"HTTP/1.1"


async def test_replies_of_every_framing_and_the_connection_is_reused():
    replies = [
        _reply(b"one"),
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + _chunked(b"tw", b"o"),
        b"HTTP/1.1 100 Continue\r\n\r\n" + _reply(b"three"),
    ]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(replies[n])

    async with _serving(answer) as (server, client):
        texts = [(await client.post("/", content=b"{}")).text for _ in replies]
    assert texts == ["one", "two", "three"]
    assert server.connections == 1


async def test_a_connection_the_server_closed_is_replaced_without_an_error():
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n == 0:
            writer.write(_reply(b"ok"))
        else:  # the keep-alive timeout ran out as the next request arrived
            writer.close()

    async with _serving(answer) as (server, client):
        statuses = [(await client.post("/", content=b"{}")).status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    assert server.connections == 3


async def test_a_server_that_closes_a_new_connection_without_a_reply_is_an_error():
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.close()

    async with _serving(hang_up) as (server, client):
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/", content=b"{}")
    assert server.connections == 1


async def test_a_body_that_ends_with_the_connection_is_read_and_not_reused():
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
        writer.close()

    async with _serving(answer) as (server, client):
        texts = [(await client.post("/", content=b"{}")).text for _ in range(2)]
    assert texts == ["until the end"] * 2
    assert server.connections == 2


async def test_closing_a_stream_early_closes_its_connection():
    async def first_chunk_then_wait(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
    ) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await reader.read(1)  # returns at the client's close

    async with _serving(first_chunk_then_wait) as (server, client):
        async with client.stream("POST", "/", content=b"{}") as response:
            async for data in response.aiter_raw():
                assert data == b"first"
                break
        await asyncio.wait_for(server.closed_by_client.wait(), 5)


async def test_other_schemes_and_streamed_bodies_go_to_the_fallback():
    seen: list[str] = []

    def fallback(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(204)

    async def parts() -> AsyncIterator[bytes]:
        yield b"{}"

    client = httpx.AsyncClient(transport=LeanTransport(httpx.MockTransport(fallback)))
    async with client:
        await client.post("https://llm.example/v1", content=b"{}")
        await client.post("http://127.0.0.1:9/v1", content=parts())
    assert seen == ["https://llm.example/v1", "http://127.0.0.1:9/v1"]
