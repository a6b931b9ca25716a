"""The attack harness: hostile pages, raw sockets and floods, all on loopback and bounded.

Reusable outside pytest (a review of the next change runs the same attacks):

    async with serve(hostile_site()) as address: ...        # pages that hurt parsers
    await raw_exchange(address, b"GET / HTTP/1.1\\r\\n...")  # what the server answers, if anything
    sockets = await open_idle(address, 300)                  # connections that never send
    async with reconnecting_flood(address, 120, 5000) as f:  # ... reopened when closed

Every helper takes a count or a timeout; nothing here may reach beyond 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

__all__ = [
    "TENANT_TOKENS",
    "attack_while_another_runs",
    "bearer",
    "by_content",
    "bomb_site",
    "gzipped",
    "hostile_site",
    "open_idle",
    "raw_exchange",
    "reconnecting_flood",
    "script_hostile_run",
    "status_of",
    "titles_page",
    "wide_table_page",
]


def titles_page(count: int = 28_572) -> bytes:
    """`<title>` repeated: a lazy `<title>(.*?)</title>` regex is quadratic on it (~29 s)."""
    return b"<html><head>" + b"<title>" * count


def wide_table_page(cells: int = 100_000) -> bytes:
    """One table row of many cells: trafilatura spends minutes of CPU on it."""
    return b"<html><body><table><tr>" + b"<td>x</td>" * cells + b"</tr></table></body></html>"


def script_hostile_run(llm: Any, site: str) -> dict[str, Any]:
    """Script `llm` (a FakeLLM) for one run whose `web_fetch` reads two `/table` pages and
    `/titles` of `hostile_site()` at `site`; return the `[tools]` table the server needs."""
    from tests.fakes.openai_server import FakeToolCall, act, observe

    urls = [f"http://{site}/table", f"http://{site}/table", f"http://{site}/titles"]
    llm.script("act", act(FakeToolCall("web_fetch", {"urls": urls})))
    llm.script("observe", observe("Those pages were unreadable.", final="Sorry."))
    return {
        "enabled": ["web_fetch"],
        "web_fetch": {"allow_hosts": ["127.0.0.1"], "timeout_s": 3, "extract_workers": 2},
    }


def hostile_site() -> Starlette:
    """`/titles`, `/h1s` and `/table`: pages that cost an HTML extractor dearly."""
    pages = {
        "/titles": titles_page(),
        "/h1s": b"<html><body>" + b"<h1>" * 28_572,
        "/table": wide_table_page(),
    }

    async def page(request: Request) -> Response:
        body = pages.get(request.url.path)
        if body is None:
            return Response("not here", status_code=404)
        return HTMLResponse(body)

    return Starlette(routes=[Route("/{name}", page)])


def gzipped(data: bytes) -> bytes:
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return squeeze.compress(data) + squeeze.flush()


@functools.cache
def zeros_gzipped(megabytes: int) -> bytes:
    """`megabytes` MiB of zeros, gzipped once (about a thousandth of the size)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    return b"".join(squeeze.compress(block) for _ in range(megabytes)) + squeeze.flush()


def bomb_site(megabytes: int = 256) -> Starlette:
    """`/gzip`: `megabytes` MiB of zeros as one gzip layer; `/gzip2`: gzipped twice and sent
    as `Content-Encoding: gzip, gzip` (a few hundred bytes); `/html.gz`: a page, honestly."""
    once = zeros_gzipped(megabytes)
    pages = {
        "/gzip": (once, "gzip"),
        "/gzip2": (gzipped(once), "gzip, gzip"),
        "/html.gz": (gzipped(b"<html><title>Fine</title><p>A real page.</p></html>"), "gzip"),
    }

    async def page(request: Request) -> Response:
        body, coding = pages[request.url.path]
        return HTMLResponse(body, headers={"Content-Encoding": coding})

    return Starlette(routes=[Route(path, page) for path in pages])


async def raw_exchange(address: str, data: bytes, timeout: float = 5.0) -> bytes:
    """Send `data` on a fresh connection; return everything received until the server closes
    (or b"" plus whatever came, when `timeout` passes first)."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    received = b""
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout):
            while chunk := await reader.read(65536):
                received += chunk
    except (TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return received


def status_of(response: bytes) -> int | None:
    """The status code of a raw HTTP response, or None when there was no answer."""
    if not response.startswith(b"HTTP/1.1 "):
        return None
    return int(response[9:12])


@dataclass
class IdleSockets:
    """Connections opened and left silent; `close()` releases them all."""

    streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]

    async def answers(self, timeout: float) -> list[bytes]:
        """What each connection received before the server closed it (b"" if nothing),
        waiting at most `timeout` in all; a connection still open after it gives None."""

        async def drain(reader: asyncio.StreamReader) -> bytes | None:
            try:
                return await reader.read()
            except ConnectionError:
                return b""

        tasks = [asyncio.create_task(drain(r)) for r, _ in self.streams]
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return [t.result() if t in done else None for t in tasks]  # type: ignore[misc]

    async def close(self) -> None:
        for _, writer in self.streams:
            writer.close()
        for _, writer in self.streams:
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def open_idle(address: str, count: int, first_bytes: bytes = b"") -> IdleSockets:
    """Open `count` connections (each sending `first_bytes`, then nothing)."""
    host, port = address.rsplit(":", 1)
    streams = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(host, int(port))
        if first_bytes:
            writer.write(first_bytes)
        streams.append((reader, writer))
    return IdleSockets(streams)


@contextlib.asynccontextmanager
async def idle_connections(
    address: str, count: int, first_bytes: bytes = b""
) -> AsyncIterator[IdleSockets]:
    sockets = await open_idle(address, count, first_bytes)
    try:
        yield sockets
    finally:
        await sockets.close()


@dataclass
class Flood:
    """What a reconnecting flood did: connections opened, and whether it ran out of them."""

    opened: int = 0
    budget: int = 0
    filled: asyncio.Event = field(default_factory=asyncio.Event)
    spent: asyncio.Event = field(default_factory=asyncio.Event)  # the budget is used up

    @property
    def exhausted(self) -> bool:
        return self.opened >= self.budget


@contextlib.asynccontextmanager
async def reconnecting_flood(
    address: str, sockets: int, budget: int, source: str | None = None
) -> AsyncIterator[Flood]:
    """Hold `sockets` silent connections (from the loopback address `source`, e.g.
    127.0.0.2), each opened again as soon as the server closes it, until the block ends or
    `budget` connections were opened in all. `filled` is set once every socket was opened
    at least once."""
    local = (source, 0) if source else None
    host, port = address.rsplit(":", 1)
    flood = Flood(budget=budget)
    first_round = 0

    async def hold() -> None:
        nonlocal first_round
        counted = False
        while flood.opened < budget:
            flood.opened += 1
            if flood.exhausted:
                flood.spent.set()
            try:
                reader, writer = await asyncio.open_connection(host, int(port), local_addr=local)
            except OSError:
                continue
            if not counted:
                counted = True
                first_round += 1
                if first_round == sockets:
                    flood.filled.set()
            try:
                await reader.read()  # until the server closes it
            except ConnectionError:
                pass
            finally:
                writer.close()

    tasks = [asyncio.create_task(hold()) for _ in range(sockets)]
    try:
        yield flood
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# -- two tenants: one attacks, the other must be served ----------------------------------------

TENANT_TOKENS = {
    "tenant-a-token-0123456789": {"tenant": "a", "user": "alice"},
    "tenant-b-token-0123456789": {"tenant": "b", "user": "bob"},
    "operator-token-0123456789": {"tenant": "ops", "user": "olga", "operator": True},
}


def bearer(tenant: str) -> dict[str, str]:
    """The Authorization header of TENANT_TOKENS' tenant `tenant` ("a", "b", "operator")."""
    token = f"tenant-{tenant}-token-0123456789"
    if tenant == "operator":
        token = "operator-token-0123456789"
    return {"Authorization": f"Bearer {token}"}


def by_content(marker: str, attack: Any, other: Any) -> Any:
    """A scripted FakeLLM reply: `attack` for the conversation that mentions `marker`."""
    return lambda body: attack if marker in json.dumps(body["messages"]) else other


@dataclass
class TwoTenants:
    attack: list[dict[str, Any]]  # tenant a's frames, up to response_complete
    other: list[dict[str, Any]]  # tenant b's
    probes: int  # /healthz answers 200 "ok" while both ran


async def attack_while_another_runs(
    address: str, attack: str, other: str, timeout: float
) -> TwoTenants:
    """Tenant a chats `attack`, tenant b chats `other` at once (one step each); /healthz is
    asked until both runs end and must answer 200 `ok` every time."""
    from tests.fakes.client import Client

    async with (
        httpx.AsyncClient(base_url=f"http://{address}") as http,
        await Client.connect(address, headers=bearer("a")) as a,
        await Client.connect(address, headers=bearer("b")) as b,
    ):
        await a.recv(), await b.recv()
        await a.send({"type": "chat", "content": attack, "agent_max_steps": 1})
        attacking = asyncio.create_task(a.until("response_complete", timeout=timeout))
        running = asyncio.create_task(b.run(other, timeout=timeout, agent_max_steps=1))
        probes = 0
        while not (attacking.done() and running.done()):
            health = await http.get("/healthz", timeout=timeout)
            assert health.status_code == 200 and health.json()["status"] == "ok"
            probes += 1
            await asyncio.wait({attacking, running}, timeout=0.05)
        return TwoTenants(await attacking, await running, probes)
