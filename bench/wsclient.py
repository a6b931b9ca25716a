"""A lean WebSocket client for load generation: raw asyncio Protocol, minimal frame parsing.

The `websockets` asyncio client tops out near 60-70k messages/s, below what a bare server
sends, so counting with it would measure the client. This one parses frame headers only and
hands each payload (bytes, undecoded) with its arrival time to a callback, or queues it for
`recv()` when no callback is set. It answers pings, does not validate UTF-8, and assumes
the server does not fragment messages (uvicorn's websockets-sansio never does for text).
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Callable

import orjson

__all__ = ["WSConn", "connect", "kind_of", "ts_of"]

_UPDATE = b'{"type":"agent_update","update_type":"'
OnMessage = Callable[["WSConn", bytes, float, float], None]  # conn, payload, perf, wall


class WSConn(asyncio.Protocol):
    def __init__(self, path: str, host: str, on_message: OnMessage | None) -> None:
        self.path = path
        self.host = host
        self.on_message = on_message
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.frames = 0
        self.state: dict[str, object] = {}  # scenario-owned
        self._buf = bytearray()
        self._upgraded = False
        self._queue: asyncio.Queue[tuple[bytes, float]] = asyncio.Queue()

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        transport.write(
            f"GET {self.path} HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionError("closed during the handshake"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        if not self._upgraded:
            end = buf.find(b"\r\n\r\n")
            if end == -1:
                return
            status = bytes(buf[:end]).split(b"\r\n", 1)[0]
            del buf[: end + 4]
            if b" 101 " not in status + b" ":
                self.opened.set_exception(ConnectionError(f"handshake refused: {status!r}"))
                self.close()
                return
            self._upgraded = True
            self.opened.set_result(None)
        perf, wall = time.perf_counter(), time.time()
        pos, size = 0, len(buf)
        while size - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            length, head = b1 & 0x7F, 2
            if length == 126:
                if size - pos < 4:
                    break
                length, head = int.from_bytes(buf[pos + 2 : pos + 4], "big"), 4
            elif length == 127:
                if size - pos < 10:
                    break
                length, head = int.from_bytes(buf[pos + 2 : pos + 10], "big"), 10
            if b1 & 0x80:
                head += 4  # servers do not mask; skip a key if one is there
            end = pos + head + length
            if end > size:
                break
            opcode = b0 & 0x0F
            payload = bytes(buf[pos + head : end])
            pos = end
            if opcode in (0, 1, 2):
                self.frames += 1
                if self.on_message is not None:
                    self.on_message(self, payload, perf, wall)
                else:
                    self._queue.put_nowait((payload, perf))
            elif opcode == 9:
                self._send(0xA, payload)
            elif opcode == 8:
                self.close()
        del buf[:pos]

    # -- use ----------------------------------------------------------------------------------

    def send_text(self, text: str | bytes) -> None:
        self._send(0x1, text.encode() if isinstance(text, str) else text)

    def send_json(self, value: object) -> None:
        self._send(0x1, orjson.dumps(value))

    async def recv(self, wait_s: float = 30.0) -> tuple[bytes, float]:
        """(payload, perf_counter at arrival) of the next message (queue mode only)."""
        async with asyncio.timeout(wait_s):
            return await self._queue.get()

    async def recv_json(self, wait_s: float = 30.0) -> dict[str, object]:
        payload, _ = await self.recv(wait_s)
        frame: dict[str, object] = orjson.loads(payload)
        return frame

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            try:
                self._send(0x8, (1000).to_bytes(2, "big"))
            finally:
                self.transport.close()

    def _send(self, opcode: int, payload: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        size = len(payload)
        if size < 126:
            header = bytes((0x80 | opcode, 0x80 | size))
        elif size < 65536:
            header = bytes((0x80 | opcode, 0x80 | 126)) + size.to_bytes(2, "big")
        else:
            header = bytes((0x80 | opcode, 0x80 | 127)) + size.to_bytes(8, "big")
        mask = os.urandom(4)
        repeated = (mask * (size // 4 + 1))[:size]
        masked = int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")
        self.transport.write(header + mask + masked.to_bytes(size, "little"))


async def connect(
    address: str, path: str = "/ws", on_message: OnMessage | None = None, wait_s: float = 30.0
) -> WSConn:
    """Open a WebSocket to `address` ("host:port") and return once the upgrade is done."""
    host, port = address.rsplit(":", 1)
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(wait_s):
        _, conn = await loop.create_connection(
            lambda: WSConn(path, address, on_message), host, int(port)
        )
        await conn.opened
    return conn


def kind_of(payload: bytes) -> str:
    """The frame's `update_type`, else its `type` (fast path for the run's frames)."""
    if payload.startswith(_UPDATE):
        start = len(_UPDATE)
        return payload[start : payload.index(b'"', start)].decode()
    frame = orjson.loads(payload)
    return str(frame.get("update_type") or frame.get("type"))


def ts_of(payload: bytes) -> int | None:
    """The frame's `ts` (epoch ms) without decoding the whole frame."""
    at = payload.find(b',"ts":')
    if at == -1:
        return None
    at += 6
    end = at
    while 48 <= payload[end] <= 57:
        end += 1
    return int(payload[at:end])
