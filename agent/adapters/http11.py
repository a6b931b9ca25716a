"""A lean HTTP/1.1 transport for httpx: plain-http model servers over keep-alive connections.

httpx's own transport (httpcore, h11, anyio) spends several times more CPU on a request and its
streamed reply than parsing the reply does: on a step against a local model server it was the
largest single cost of the server. This one writes each request in one piece and hands the
body over as the socket delivers it (chunked framing removed), so one network read stays one
piece for the SSE reader.

It serves `http://` only. Everything else goes to the fallback transport: `https://` (TLS and
certificate settings stay httpx's), a streamed request body. Proxies from the environment
never reach it: httpx routes them to its own proxy transports before any transport is asked.
Errors are httpx's exception classes, so callers cannot tell the transports apart.

A reused idle connection that the server closed meanwhile is detected before use, or, when
the close crosses the request (a keep-alive timeout running out as it is sent), by the reply
ending before its first byte; the request then goes once more on a new connection, as
browsers do. At worst a server that failed after reading it sees the request twice, as it
would after one of the model adapter's retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx2

__all__ = ["ChunkedBody", "LeanTransport"]

_READ = 65536
_Key = tuple[str, int]


class LeanTransport(httpx2.AsyncBaseTransport):
    """Send plain-http requests over pooled HTTP/1.1 connections; delegate the rest."""

    def __init__(
        self,
        fallback: httpx2.AsyncBaseTransport,
        *,
        max_idle: int = 100,
        keepalive_s: float = 5.0,
    ) -> None:
        self._fallback = fallback
        self._max_idle = max_idle  # per server
        self._keepalive_s = keepalive_s  # an idle connection older than this is not reused
        self._idle: dict[_Key, list[_Connection]] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        try:
            body = request.content
        except httpx2.RequestNotRead:
            body = None
        if url.scheme != "http" or body is None:
            return await self._fallback.handle_async_request(request)
        timeout: dict[str, Any] = request.extensions.get("timeout", {})
        key = (url.host, url.port or 80)
        message = _head(request) + body
        for attempt in range(2):
            connection = self._take(key) if attempt == 0 else None
            reused = connection is not None
            if connection is None:
                connection = await _Connection.open(key, timeout.get("connect"))
            try:
                status, headers, reason = await connection.exchange(
                    message, timeout.get("write"), timeout.get("read")
                )
            except _Stale:
                connection.close()
                if reused:
                    continue  # closed by the server while idle: once more on a new connection
                raise httpx2.RemoteProtocolError(
                    "Server disconnected without sending a response."
                ) from None
            except BaseException:
                connection.close()
                raise
            stream = _Body(self, key, connection, headers, status, timeout.get("read"))
            return httpx2.Response(
                status,
                headers=headers,
                stream=stream,
                extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        await self._fallback.aclose()

    def _take(self, key: _Key) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        oldest = asyncio.get_running_loop().time() - self._keepalive_s
        while idle:
            connection = idle.pop()
            if connection.idle_since > oldest and connection.usable():
                return connection
            connection.close()
        return None

    def release(self, key: _Key, connection: _Connection) -> None:
        """Keep a connection whose reply was read to its end, for the next request."""
        idle = self._idle.setdefault(key, [])
        if len(idle) >= self._max_idle or not connection.usable():
            connection.close()
            return
        connection.idle_since = asyncio.get_running_loop().time()
        idle.append(connection)


class _Stale(Exception):
    """The connection ended before the reply's first byte."""


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = 0.0

    @classmethod
    async def open(cls, key: _Key, limit_s: float | None) -> _Connection:
        failure: OSError | None = None
        try:
            async with asyncio.timeout(limit_s):
                reader, writer = await asyncio.open_connection(*key, limit=_READ)
            return cls(reader, writer)
        except TimeoutError:
            pass
        except OSError as exc:
            failure = exc
        if failure is None:
            raise httpx2.ConnectTimeout(f"connecting to {key[0]}:{key[1]} timed out")
        raise httpx2.ConnectError(str(failure)) from failure

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()

    async def exchange(
        self, message: bytes, write_timeout: float | None, read_timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send the request; return the reply's status, headers and reason phrase."""
        try:
            self.writer.write(message)
            async with asyncio.timeout(write_timeout):
                await self.writer.drain()
        except TimeoutError:
            raise httpx2.WriteTimeout("sending the request timed out") from None
        except OSError as exc:
            raise _Stale() from exc
        while True:
            head = await self._read_head(read_timeout)
            status, headers, reason = _parse_head(head)
            if not 100 <= status < 200:  # an interim reply (100 Continue) precedes the real one
                return status, headers, reason

    async def _read_head(self, limit_s: float | None) -> bytes:
        try:
            async with asyncio.timeout(limit_s):
                return await self.reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            pass
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise _Stale() from exc
            raise httpx2.RemoteProtocolError("the reply ended inside its headers") from None
        except asyncio.LimitOverrunError:
            raise httpx2.RemoteProtocolError("the reply's headers are too long") from None
        except OSError as exc:
            raise _Stale() from exc
        raise httpx2.ReadTimeout("the model server did not answer in time")

    async def read(self, limit_s: float | None) -> bytes:
        """The next bytes the socket delivers (b"" at its end)."""
        try:
            async with asyncio.timeout(limit_s):
                return await self.reader.read(_READ)
        except TimeoutError:
            pass
        except OSError as exc:
            raise httpx2.ReadError(str(exc) or type(exc).__name__) from exc
        raise httpx2.ReadTimeout("the model server stopped sending")


def _head(request: httpx2.Request) -> bytes:
    lines = [request.method.encode("ascii") + b" " + request.url.raw_path + b" HTTP/1.1"]
    for name, value in request.headers.raw:
        if b"\n" in value or b"\r" in value or b"\n" in name or b"\r" in name:
            raise httpx2.LocalProtocolError(f"a line break in header {name!r}")
        lines.append(name + b": " + value)
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


def _parse_head(head: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx2.RemoteProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise httpx2.RemoteProtocolError(f"a malformed header line: {line[:80]!r}")
        headers.append((name, value.strip()))
    if parts[0] == b"HTTP/1.0":
        headers.append((b"connection", b"close"))  # no keep-alive for HTTP/1.0 replies
    return int(parts[1]), headers, parts[2] if len(parts) > 2 else b""


class ChunkedBody:
    """Remove `Transfer-Encoding: chunked` framing from bytes fed in any pieces."""

    __slots__ = ("_buffer", "_left", "_state", "extra")

    def __init__(self) -> None:
        self._buffer = b""
        self._left = 0  # data bytes of the current chunk not yet passed on
        self._state = "size"  # size, data, data-end, trailer, done
        self.extra = b""  # bytes after the last chunk: a reply that cannot be reused

    @property
    def done(self) -> bool:
        return self._state == "done"

    def feed(self, data: bytes) -> bytes:
        """The body bytes that `data` completes."""
        buffer = self._buffer + data if self._buffer else data
        out: list[bytes] = []
        at = 0
        while at < len(buffer):
            state = self._state
            if state == "data":
                piece = buffer[at : at + self._left]
                out.append(piece)
                at += len(piece)
                self._left -= len(piece)
                if not self._left:
                    self._state = "data-end"
                continue
            if state == "done":
                self.extra = buffer[at:]
                at = len(buffer)
                break
            end = buffer.find(b"\r\n", at)
            if end < 0:
                break
            line = buffer[at:end]
            at = end + 2
            if state == "size":
                self._left = _chunk_size(line)
                self._state = "data" if self._left else "trailer"
            elif state == "data-end":
                if line:
                    raise httpx2.RemoteProtocolError("a chunk is longer than its size")
                self._state = "size"
            elif not line:  # trailer: header lines until an empty one
                self._state = "done"
        self._buffer = buffer[at:]
        return b"".join(out)


def _chunk_size(line: bytes) -> int:
    size = line.split(b";", 1)[0].strip()
    try:
        return int(size, 16)
    except ValueError:
        raise httpx2.RemoteProtocolError(f"a malformed chunk size: {line[:40]!r}") from None


class _Body(httpx2.AsyncByteStream):
    """A reply body read from its connection; the connection goes back to the pool when the
    body was read to its end, and is closed otherwise (a stopped stream ends at once)."""

    def __init__(
        self,
        transport: LeanTransport,
        key: _Key,
        connection: _Connection,
        headers: list[tuple[bytes, bytes]],
        status: int,
        timeout: float | None,
    ) -> None:
        self._transport, self._key, self._connection = transport, key, connection
        self._timeout = timeout
        self._reusable = True
        self._complete = False
        self._closed = False
        self._chunked: ChunkedBody | None = None
        self._length: int | None = None  # None: to the end of the connection
        for name, value in headers:
            lower = name.lower()
            if lower == b"transfer-encoding" and b"chunked" in value.lower():
                self._chunked = ChunkedBody()
            elif lower == b"content-length" and value.isdigit():
                self._length = int(value)
            elif lower == b"connection" and b"close" in value.lower():
                self._reusable = False
        if status in (204, 304):
            self._length = 0
        if self._chunked is not None:
            self._length = None
        elif self._length is None:
            self._reusable = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunked, left = self._chunked, self._length
        while left != 0 and not (chunked is not None and chunked.done):
            # Let others run between reads, as httpx's own transport does: a reply already
            # buffered in full would otherwise be read and parsed in one go, and the reader
            # of a fast stream would hold the event loop for as long.
            await asyncio.sleep(0)
            data = await self._connection.read(self._timeout)
            if not data:
                if chunked is None and left is None:
                    break  # the body ends with the connection
                raise httpx2.RemoteProtocolError(
                    "peer closed connection without sending complete message body"
                )
            if chunked is not None:
                data = chunked.feed(data)
            elif left is not None:
                if len(data) > left:
                    data, self._reusable = data[:left], False
                left -= len(data)
            if data:
                yield data
        if chunked is not None and chunked.extra:
            self._reusable = False
        self._complete = True

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._complete and self._reusable:
            self._transport.release(self._key, self._connection)
        else:
            self._connection.close()
