"""web_search against a fake SearXNG and a fake Brave, both real HTTP servers on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from agent.errors import ToolError
from agent.tools import ExtractorPool, ToolsConfig, build_tools
from agent.tools.base import Tool
from agent.tools.config import WebSearchConfig
from agent.tools.search_sources import host_matches
from agent.tools.web_search import build_web_search
from tests.agent.tools.conftest import call, context
from tests.fakes.servers import serve

RESULTS = [
    ("Python &amp; you", "https://en.wikipedia.org/wiki/Python", "A <b>language</b>."),
    ("Blog post", "https://random-blog.example/python", "My opinion."),
    ("3.13 docs", "https://docs.python.org/3/", "The docs."),
    ("A paper", "https://arxiv.org/abs/1234.5678", "Research."),
    ("NASA", "https://www.nasa.gov/python", "Space."),
    ("Not a web page", "ftp://files.example/x", "dropped"),
    ("Wire story", "https://www.reuters.com/tech/python", "News."),
]


@dataclass
class FakeSearch:
    """Both providers' APIs in one app; `mode` injects failures."""

    mode: str = "ok"
    requests: list[Request] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    base_url: str = ""

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/search", self.searxng),
                Route("/res/v1/web/search", self.brave),
            ]
        )

    async def _failure(self) -> Response | None:
        if self.mode == "hang":
            async with asyncio.timeout(10):
                await self.release.wait()
        statuses = {"500": 500, "403": 403, "429": 429}
        if self.mode in statuses:
            return PlainTextResponse("no", status_code=statuses[self.mode])
        if self.mode == "not-json":
            return PlainTextResponse("<html>oops</html>")
        if self.mode == "wrong-shape":
            return JSONResponse({"results": "nope", "web": []})
        return None

    async def searxng(self, request: Request) -> Response:
        self.requests.append(request)
        failure = await self._failure()
        if failure is not None:
            return failure
        found = RESULTS[1:2] if self.mode == "blog-only" else RESULTS
        items = [{"title": t, "url": u, "content": c, "engine": "x"} for t, u, c in found]
        return JSONResponse({"query": request.query_params["q"], "results": items})

    async def brave(self, request: Request) -> Response:
        self.requests.append(request)
        if request.headers.get("x-subscription-token") != "brave-key":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        failure = await self._failure()
        if failure is not None:
            return failure
        items = [
            {"title": t, "url": u, "description": f"<strong>{c}</strong>"} for t, u, c in RESULTS
        ]
        return JSONResponse({"type": "search", "web": {"results": items}})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def fake() -> AsyncIterator[FakeSearch]:
    search = FakeSearch()
    async with serve(search.app()) as address:
        search.base_url = f"http://{address}"
        yield search
        search.release.set()


def searxng(
    fake: FakeSearch, http: httpx.AsyncClient, clock: Clock | None = None, **config: Any
) -> Tool:
    settings = WebSearchConfig(provider="searxng", base_url=fake.base_url, **config)
    tool = build_web_search(settings, http=http, clock=clock or Clock())
    assert tool is not None
    return tool


def brave(fake: FakeSearch, http: httpx.AsyncClient, key: str = "brave-key") -> Tool:
    settings = WebSearchConfig(provider="brave", base_url=fake.base_url)
    tool = build_web_search(settings, http=http, api_key=key, clock=Clock())
    assert tool is not None
    return tool


async def test_searxng_results_are_normalized(fake: FakeSearch, http: httpx.AsyncClient) -> None:
    result = await call(searxng(fake, http), {"query": "  python   language ", "count": 3})
    assert result["provider"] == "searxng" and result["query"] == "python language"
    assert result["results"] == [
        {
            "title": "Python & you",
            "url": "https://en.wikipedia.org/wiki/Python",
            "snippet": "A language.",
        },
        {
            "title": "Blog post",
            "url": "https://random-blog.example/python",
            "snippet": "My opinion.",
        },
        {"title": "3.13 docs", "url": "https://docs.python.org/3/", "snippet": "The docs."},
    ]
    params = fake.requests[0].query_params
    assert params["q"] == "python language" and params["format"] == "json"


async def test_non_http_results_are_dropped(fake: FakeSearch, http: httpx.AsyncClient) -> None:
    result = await call(searxng(fake, http, max_results=20), {"query": "python"})
    urls = [r["url"] for r in result["results"]]
    assert len(urls) == 6 and not any(u.startswith("ftp:") for u in urls)


async def test_brave_results_are_normalized_and_authenticated(
    fake: FakeSearch, http: httpx.AsyncClient
) -> None:
    result = await call(brave(fake, http), {"query": "python", "count": 2})
    assert result["provider"] == "brave"
    assert result["results"][0] == {
        "title": "Python & you",
        "url": "https://en.wikipedia.org/wiki/Python",
        "snippet": "A language.",
    }
    assert len(result["results"]) == 2
    assert fake.requests[0].query_params["count"] == "2"


async def test_brave_with_a_wrong_key_is_a_tool_error(
    fake: FakeSearch, http: httpx.AsyncClient
) -> None:
    with pytest.raises(ToolError, match="rejected the API key"):
        await call(brave(fake, http, key="wrong"), {"query": "python"})


@pytest.mark.parametrize(
    ("category", "expected"),
    [
        ("encyclopedia", ["https://en.wikipedia.org/wiki/Python"]),
        ("programming", ["https://docs.python.org/3/"]),
        ("academic", ["https://arxiv.org/abs/1234.5678"]),
        ("government", ["https://www.nasa.gov/python"]),
        ("news", ["https://www.reuters.com/tech/python"]),
    ],
)
async def test_source_category_keeps_only_curated_domains(
    fake: FakeSearch, http: httpx.AsyncClient, category: str, expected: list[str]
) -> None:
    result = await call(searxng(fake, http), {"query": "python", "source_category": category})
    assert [r["url"] for r in result["results"]] == expected
    assert result["source_category"] == category


async def test_source_category_maps_to_searxng_categories(
    fake: FakeSearch, http: httpx.AsyncClient
) -> None:
    tool = searxng(fake, http)
    await call(tool, {"query": "python", "source_category": "academic"})
    await call(tool, {"query": "python", "source_category": "encyclopedia"})
    assert fake.requests[0].query_params["categories"] == "science"
    assert "categories" not in fake.requests[1].query_params


async def test_source_category_with_brave(fake: FakeSearch, http: httpx.AsyncClient) -> None:
    result = await call(
        brave(fake, http), {"query": "python", "count": 1, "source_category": "finance"}
    )
    assert [r["url"] for r in result["results"]] == ["https://www.reuters.com/tech/python"]
    # The filter needs room: the provider is asked for its maximum, not for `count`.
    assert fake.requests[0].query_params["count"] == "20"


async def test_source_category_without_match_says_so(
    fake: FakeSearch, http: httpx.AsyncClient
) -> None:
    fake.mode = "blog-only"
    result = await call(searxng(fake, http), {"query": "python", "source_category": "news"})
    assert result["results"] == [] and "news" in result["note"]


def test_domain_matching_is_by_host_suffix() -> None:
    assert host_matches("https://fr.wikipedia.org/x", "encyclopedia")
    assert not host_matches("https://wikipedia.org.evil.example/x", "encyclopedia")
    assert not host_matches("https://notwikipedia.org/x", "encyclopedia")
    assert host_matches("https://www.ons.gov.uk/", "government")
    assert host_matches("https://cs.stanford.edu/", "academic")
    assert not host_matches("not a url", "academic")


async def test_rate_limit_is_per_tenant_and_refills(
    fake: FakeSearch, http: httpx.AsyncClient
) -> None:
    clock = Clock()
    tool = searxng(fake, http, clock, rate_limit_per_minute=2)
    await call(tool, {"query": "one"})
    await call(tool, {"query": "two"})
    with pytest.raises(ToolError, match=r"rate limit reached \(2 per minute\); try again in 30 s"):
        await call(tool, {"query": "three"})
    await call(tool, {"query": "three"}, context(tenant="other"))
    clock.now += 30  # one token back
    await call(tool, {"query": "three"})
    with pytest.raises(ToolError, match="rate limit"):
        await call(tool, {"query": "four"})
    assert len(fake.requests) == 4


async def test_cache_serves_repeats_until_the_ttl(
    fake: FakeSearch, http: httpx.AsyncClient
) -> None:
    clock = Clock()
    tool = searxng(fake, http, clock, cache_ttl_s=60, rate_limit_per_minute=1)
    first = await call(tool, {"query": "Python"})
    again = await call(tool, {"query": "python "})  # same normalized query; no token needed
    assert (first["cached"], again["cached"]) == (False, True)
    assert again["results"] == first["results"] and len(fake.requests) == 1
    clock.now += 61
    expired = await call(tool, {"query": "python"})
    assert expired["cached"] is False and len(fake.requests) == 2


async def test_cache_is_per_tenant_and_bounded(fake: FakeSearch, http: httpx.AsyncClient) -> None:
    tool = searxng(fake, http, cache_size=1)
    await call(tool, {"query": "a"})
    assert (await call(tool, {"query": "a"}, context(tenant="other")))["cached"] is False
    await call(tool, {"query": "b"})  # evicts the older entries
    assert (await call(tool, {"query": "a"}))["cached"] is False
    assert len(fake.requests) == 4


async def test_cache_can_be_disabled(fake: FakeSearch, http: httpx.AsyncClient) -> None:
    tool = searxng(fake, http, cache_ttl_s=0)
    await call(tool, {"query": "a"})
    assert (await call(tool, {"query": "a"}))["cached"] is False


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("500", "answered HTTP 500"),
        ("403", "enable the json format"),
        ("429", "rate limiting"),
        ("not-json", "invalid JSON"),
        ("wrong-shape", "without a 'results' list"),
        ("hang", "did not answer in time"),
    ],
)
async def test_provider_failures_are_tool_errors(
    fake: FakeSearch, http: httpx.AsyncClient, mode: str, message: str
) -> None:
    fake.mode = mode
    tool = searxng(fake, http, timeout_s=0.3)
    with pytest.raises(ToolError, match=message):
        await call(tool, {"query": "python"})


async def test_brave_wrong_shape_is_a_tool_error(fake: FakeSearch, http: httpx.AsyncClient) -> None:
    fake.mode = "wrong-shape"
    with pytest.raises(ToolError, match="web.results"):
        await call(brave(fake, http), {"query": "python"})


async def test_unreachable_provider_is_a_tool_error(http: httpx.AsyncClient) -> None:
    tool = build_web_search(
        WebSearchConfig(provider="searxng", base_url="http://127.0.0.1:9"), http=http
    )
    assert tool is not None
    with pytest.raises(ToolError, match=r"could not be reached \(ConnectError\)"):
        await call(tool, {"query": "python"})


async def test_not_offered_without_a_provider(
    http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    assert build_web_search(WebSearchConfig(), http=http) is None
    names = [
        t.name for t in build_tools(ToolsConfig(), http=http, memory=None, extractor=extractor)
    ]
    assert "web_search" not in names and "web_fetch" in names
    assert build_tools(ToolsConfig(), http=None, memory=None) == []


async def test_misconfiguration_is_reported(http: httpx.AsyncClient) -> None:
    with pytest.raises(ValueError, match="BRAVE_SEARCH_API_KEY"):
        build_web_search(WebSearchConfig(provider="brave"), http=http)
    with pytest.raises(ValidationError, match="base_url"):
        WebSearchConfig(provider="searxng")
    configured = ToolsConfig(
        web_search=WebSearchConfig(provider="brave", api_key="k"),  # type: ignore[arg-type]
    )
    assert "web_search" in [t.name for t in build_tools(configured, http=http, memory=None)]


async def test_arguments_are_strict(fake: FakeSearch, http: httpx.AsyncClient) -> None:
    from agent.errors import ModelBehaviorError

    tool = searxng(fake, http)
    for bad in ({"query": ""}, {"query": "x", "source_category": "gossip"}, {"q": "x"}):
        with pytest.raises(ModelBehaviorError):
            await call(tool, bad)
    assert fake.requests == []
