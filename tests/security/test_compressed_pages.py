"""Compressed pages cannot inflate past web_fetch's cap (issue 42, HIGH).

A 1.8 KB page of zeros gzipped twice (`Content-Encoding: gzip, gzip`) froze every tenant
for 8 s and took 2 GB: httpx inflated each network chunk whole, on the event loop, before
the size cap was looked at.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent.tools import ExtractorPool, create_http_client
from agent.tools.config import WebFetchConfig
from agent.tools.web_fetch import build_web_fetch
from tests.agent.tools.conftest import call
from tests.conftest import ServerFactory
from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe
from tests.fakes.servers import serve
from tests.security.harness import (
    TENANT_TOKENS,
    attack_while_another_runs,
    bomb_site,
    by_content,
)


@pytest.fixture
async def bombs() -> AsyncIterator[str]:
    async with serve(bomb_site()) as address:
        yield f"http://{address}"


@pytest.fixture
async def fetch(bombs: str) -> AsyncIterator[Any]:
    extractor = ExtractorPool(workers=1, memory_mb=1024)
    config = WebFetchConfig(allow_hosts=("127.0.0.1",), max_bytes=1_000_000)
    try:
        async with create_http_client(timeout_s=10) as http:
            tool = build_web_fetch(config, http=http, extractor=extractor)

            async def one(path: str) -> dict[str, Any]:
                result = await call(tool, {"urls": [bombs + path, bombs + "/html.gz"]})
                page: dict[str, Any] = result["results"][0]
                assert result["results"][1]["title"] == "Fine"  # its neighbour is read
                return page

            yield one
    finally:
        await extractor.aclose()


async def test_a_page_with_stacked_encodings_is_refused(fetch: Any) -> None:
    page = await fetch("/gzip2")
    assert page["error"] == "stacked content encodings (gzip, gzip) are refused"


async def test_a_gzip_bomb_is_inflated_no_further_than_the_cap(fetch: Any) -> None:
    """256 MiB of zeros in 256 KB of gzip: before, each 64 KiB network chunk became 64 MiB
    in one piece; now no more than the cap (1 MB here) is ever produced."""
    tracemalloc.start()
    try:
        page = await fetch("/gzip")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page["truncated"] is True and "error" not in page
    assert peak < 16_000_000, f"{peak / 1e6:.0f} MB held while reading a 1 MB page"


async def test_bombs_in_a_run_leave_another_tenant_served(
    server_factory: ServerFactory, fake_llm: FakeLLM, bombs: str
) -> None:
    """Tenant a's model fetches three bombs; tenant b's run completes meanwhile and /healthz
    is answered throughout."""
    urls = [f"{bombs}/gzip2", f"{bombs}/gzip", f"{bombs}/gzip2"]
    calls = by_content("read these", act(FakeToolCall("web_fetch", {"urls": urls})), Reply())
    fake_llm.script("act", calls, calls)
    fake_llm.script("observe", *[observe("Nothing useful.", final="Sorry.")] * 2)
    tools = {"enabled": ["web_fetch"], "web_fetch": {"allow_hosts": ["127.0.0.1"]}}
    async with server_factory(tools=tools, auth={"tokens": TENANT_TOKENS}) as running:
        seen = await attack_while_another_runs(running.address, "read these", "time?", 30)
    assert seen.probes >= 1 and kind(seen.other[-1]) == "response_complete"
    assert not [f for f in seen.other if kind(f) == "error"]
    (outcome,) = [f for f in seen.attack if kind(f) in ("tool_complete", "tool_error")]
    shown = json.dumps(outcome.get("result") or outcome.get("error"))
    assert shown.count("stacked content encodings") == 2
    assert '"truncated": true' in shown  # the single layer, read up to the cap
