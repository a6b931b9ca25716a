"""web_search: ask a search provider (SearXNG or Brave), normalize, rate-limit and cache.

Results are always `{title, url, snippet}` with HTML removed, whichever provider answered.
`source_category` narrows results to a curated list of reliable domains
(agent/tools/search_sources.py) by post-filtering the provider's results: `site:` operators
are not honoured the same way by every engine behind SearXNG, while a filter on the result's
host is exact and provider-independent. To leave enough after filtering, the tool then asks
the provider for its maximum number of results, and SearXNG also receives a matching
category (`it`, `science`, `news`).
"""

from __future__ import annotations

import html
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field

from agent.errors import ToolError
from agent.ports import ToolContext
from agent.rate import TokenBuckets
from agent.tools.base import Tool
from agent.tools.config import WebSearchConfig
from agent.tools.python import make_tool
from agent.tools.search_sources import SourceCategory, host_matches, searxng_category

__all__ = [
    "BraveSearch",
    "SearchProvider",
    "SearchResult",
    "SearxngSearch",
    "WebSearchArgs",
    "build_web_search",
]

BRAVE_DEFAULT_URL = "https://api.search.brave.com"
PROVIDER_MAX = 20
_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True, slots=True)
class SearchResult:
    title: str
    url: str
    snippet: str

    def as_json(self) -> dict[str, str]:
        return {"title": self.title, "url": self.url, "snippet": self.snippet}


class SearchProvider(Protocol):
    """One search backend. Raise ToolError with a plain message when the search fails."""

    name: str

    async def search(
        self, query: str, *, count: int, category: SourceCategory | None
    ) -> list[SearchResult]:
        """Return up to `count` results, best first; `category` is a hint it may use."""
        ...


class SearxngSearch:
    """A SearXNG instance's JSON API (`format=json` must be enabled in its settings.yml)."""

    name = "searxng"

    def __init__(self, http: httpx.AsyncClient, base_url: str, *, timeout_s: float) -> None:
        self._http = http
        self._url = base_url.rstrip("/") + "/search"
        self._timeout = timeout_s

    async def search(
        self, query: str, *, count: int, category: SourceCategory | None
    ) -> list[SearchResult]:
        params = {"q": query, "format": "json"}
        if category is not None and (mapped := searxng_category(category)):
            params["categories"] = mapped
        refused = "SearXNG refused the request: enable the json format (search.formats)."
        body = await _get_json(self._http, self._url, params, {}, self._timeout, refused, self.name)
        items = body.get("results")
        if not isinstance(items, list):
            raise ToolError("SearXNG answered without a 'results' list.")
        return _normalize(items, "content", count)


class BraveSearch:
    """The Brave Search web API (`X-Subscription-Token` authentication)."""

    name = "brave"

    def __init__(
        self, http: httpx.AsyncClient, api_key: str, *, base_url: str, timeout_s: float
    ) -> None:
        self._http = http
        self._key = api_key
        self._url = (base_url or BRAVE_DEFAULT_URL).rstrip("/") + "/res/v1/web/search"
        self._timeout = timeout_s

    async def search(
        self, query: str, *, count: int, category: SourceCategory | None
    ) -> list[SearchResult]:
        headers = {"X-Subscription-Token": self._key, "Accept": "application/json"}
        params = {"q": query, "count": str(min(count, PROVIDER_MAX))}
        refused = "Brave Search rejected the API key (check the configured key)."
        body = await _get_json(
            self._http, self._url, params, headers, self._timeout, refused, self.name
        )
        web = body.get("web", {})  # absent when nothing was found
        items = web.get("results", []) if isinstance(web, dict) else None
        if not isinstance(items, list):
            raise ToolError("Brave Search answered without a 'web.results' list.")
        return _normalize(items, "description", count)


async def _get_json(
    http: httpx.AsyncClient,
    url: str,
    params: dict[str, str],
    headers: dict[str, str],
    timeout_s: float,
    refused: str,
    name: str,
) -> dict[str, Any]:
    """GET and decode a JSON object; map every failure to a ToolError (`refused`: 401/403)."""
    provider = f"search provider ({name})"
    try:
        response = await http.get(url, params=params, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        raise ToolError(f"The {provider} did not answer in time.") from None
    except httpx.HTTPError as exc:
        raise ToolError(f"The {provider} could not be reached ({type(exc).__name__}).") from None
    status = response.status_code
    if status in (401, 403):
        raise ToolError(f"{refused} (HTTP {status})")
    if status == 429:
        raise ToolError(f"The {provider} is rate limiting us; try later.")
    if status != 200:
        raise ToolError(f"The {provider} answered HTTP {status}.")
    try:
        body = response.json()
    except ValueError:
        raise ToolError(f"The {provider} answered with invalid JSON.") from None
    if not isinstance(body, dict):
        raise ToolError(f"The {provider} answered with unexpected JSON.")
    return body


def _normalize(items: list[Any], snippet_key: str, count: int) -> list[SearchResult]:
    results: list[SearchResult] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        url = item.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            continue
        results.append(
            SearchResult(
                title=_text(item.get("title")),
                url=url,
                snippet=_text(item.get(snippet_key)),
            )
        )
        if len(results) >= count:
            break
    return results


def _text(value: object) -> str:
    """Provider text without markup (Brave wraps matches in <strong>) or entities."""
    if not isinstance(value, str):
        return ""
    return " ".join(html.unescape(_TAG.sub("", value)).split())


class _TTLCache:
    """A bounded LRU of results with a time to live; ttl 0 or size 0 disables it."""

    def __init__(self, ttl_s: float, size: int, clock: Callable[[], float]) -> None:
        self._ttl = ttl_s
        self._size = size
        self._clock = clock
        self._items: OrderedDict[tuple[str, ...], tuple[float, list[SearchResult]]] = OrderedDict()

    def get(self, key: tuple[str, ...]) -> list[SearchResult] | None:
        entry = self._items.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._items[key]
            return None
        self._items.move_to_end(key)
        return entry[1]

    def put(self, key: tuple[str, ...], value: list[SearchResult]) -> None:
        if self._ttl <= 0 or self._size <= 0:
            return
        self._items[key] = (self._clock() + self._ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)


class WebSearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=400, description="What to search the web for.")
    count: int | None = Field(
        default=None, ge=1, le=PROVIDER_MAX, description="How many results (default: config)."
    )
    source_category: SourceCategory | None = Field(
        default=None,
        description=(
            "Keep only results from curated reliable sites of this kind: encyclopedia, "
            "programming, academic, government, finance or news."
        ),
    )


def build_web_search(
    config: WebSearchConfig,
    *,
    http: httpx.AsyncClient,
    api_key: str = "",
    provider: SearchProvider | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Tool | None:
    """Build web_search, or return None when no provider is configured (not offered).

    Raise ValueError when the configured provider cannot work (Brave without an API key).
    """
    if provider is None:
        if config.provider is None:
            return None
        if config.provider == "brave":
            if not api_key:
                raise ValueError(
                    f"tools.web_search: provider brave needs an API key in the environment "
                    f"variable {config.api_key_env}"
                )
            provider = BraveSearch(
                http, api_key, base_url=config.base_url, timeout_s=config.timeout_s
            )
        else:
            provider = SearxngSearch(http, config.base_url, timeout_s=config.timeout_s)
    chosen: SearchProvider = provider
    # Per tenant: `rate_limit_per_minute` searches at once, refilled continuously.
    per_minute = config.rate_limit_per_minute
    limiter = TokenBuckets(per_minute / 60.0, per_minute, clock)
    cache = _TTLCache(config.cache_ttl_s, config.cache_size, clock)

    async def web_search(args: WebSearchArgs, context: ToolContext) -> dict[str, Any]:
        query = " ".join(args.query.split())
        count = min(args.count or config.max_results, config.max_results)
        category = args.source_category
        key = (context.tenant_id, query.lower(), category or "", str(count))
        results = cache.get(key)
        cached = results is not None
        if results is None:
            wait = limiter.take(context.tenant_id)
            if wait:
                raise ToolError(
                    f"Search rate limit reached ({config.rate_limit_per_minute} per minute); "
                    f"try again in {wait:.0f} s."
                )
            asked = PROVIDER_MAX if category else count
            found = await chosen.search(query, count=asked, category=category)
            if category is not None:
                found = [r for r in found if host_matches(r.url, category)]
            results = found[:count]
            cache.put(key, results)
        answer: dict[str, Any] = {
            "query": query,
            "provider": chosen.name,
            "results": [r.as_json() for r in results],
            "cached": cached,
        }
        if category is not None:
            answer["source_category"] = category
            if not results:
                answer["note"] = f"No results from curated {category} sources; try without it."
        return answer

    return make_tool(
        web_search,
        description=(
            "Search the web. Returns a list of {title, url, snippet}. Use web_fetch to read "
            "a page. Set source_category to keep only reliable sources of one kind."
        ),
    )
