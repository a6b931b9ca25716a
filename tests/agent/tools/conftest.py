"""Fixtures for the tool tests: a tool context, and the tools' real HTTP client, recorded."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agent.ports import ToolContext
from agent.tools import ExtractorPool, Tool, ToolRegistry, create_http_client


class RecordingTransport(httpx.AsyncBaseTransport):
    """The real HTTP transport, noting every request it is asked to send (never faked)."""

    def __init__(self, verify: ssl.SSLContext | bool = True) -> None:
        self.inner = httpx.AsyncHTTPTransport(verify=verify)
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    @property
    def hosts(self) -> list[str]:
        return [r.url.host for r in self.requests]


@pytest.fixture
def transport() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
async def http(transport: RecordingTransport) -> AsyncIterator[httpx.AsyncClient]:
    client = create_http_client(timeout_s=5, transport=transport)
    async with client:
        yield client


@pytest.fixture
async def extractor() -> AsyncIterator[ExtractorPool]:
    pool = ExtractorPool(workers=2, memory_mb=1024)
    try:
        yield pool
    finally:
        await pool.aclose()


def context(tenant: str = "acme", user: str = "alice") -> ToolContext:
    return ToolContext(tenant_id=tenant, user_id=user, session_id="s1", run_id="r1")


async def call(tool: Tool, arguments: dict[str, Any], ctx: ToolContext | None = None) -> Any:
    """Call through a registry, as the loop does: arguments are validated first."""
    return await ToolRegistry([tool]).call(tool.name, arguments, ctx or context())
