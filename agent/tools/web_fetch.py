"""web_fetch: read up to three web pages at once, as plain text, safely.

Every limit is enforced here rather than trusted to the client: a wall-clock budget per URL,
a byte cap while streaming (reading and decoding stop at the cap: agent/tools/decoding.py
inflates gzip and deflate in bounded steps and refuses stacked encodings), redirects
followed by hand so each hop passes the SSRF guard (agent/tools/ssrf.py) before any
connection is made, and retries of 429/5xx with exponential backoff (honouring a short
Retry-After). Each request connects to an address the guard checked: the URL's host is
replaced by that IP, with the original Host header and TLS server name, and
`Connection: close` so no pooled connection is ever shared between two host names. One URL
failing never fails the others. A refusal tells the model only that the address may not be
reached; why (which address a name has, that it has none) goes to the log.
Text extraction runs in a killable worker process (agent/tools/extractor.py) inside the same
per-URL deadline: a page that makes the parser spin costs its URL the timeout, nothing more.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import ssl
import zlib
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
)

from agent.errors import ToolError
from agent.ports import ToolContext
from agent.tools.base import Tool
from agent.tools.config import WebFetchConfig
from agent.tools.decoding import UnsupportedEncoding, read_decoded
from agent.tools.extractor import ExtractionFailed, ExtractorPool
from agent.tools.python import make_tool
from agent.tools.ssrf import AddressGuard, Refused

__all__ = ["MAX_URLS", "WebFetchArgs", "build_web_fetch"]

log = logging.getLogger(__name__)

MAX_URLS = 3
_REDIRECTS = {301, 302, 303, 307, 308}
_RETRY_STATUSES = {429, 500, 502, 503, 504}
_TRANSIENT = (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)
_TEXT_TYPES = re.compile(r"^(text/[\w.+-]+|application/(xhtml\+xml|json|xml|[\w.-]+\+(json|xml)))$")
_REFUSED = (
    "refused: {host} is not an address web_fetch may reach (only public internet addresses "
    "are; an operator can allow others in tools.web_fetch.allow_hosts)"
)
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.1"


class WebFetchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    urls: list[str] = Field(
        min_length=1,
        max_length=MAX_URLS,
        description=f"1 to {MAX_URLS} http(s) URLs to read; they are fetched concurrently.",
    )


class _Failed(Exception):
    """One URL failed; the message is shown to the model next to that URL."""


class _Retryable(Exception):
    def __init__(self, status: int, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    location: str | None = None
    content_type: str = ""
    charset: str | None = None
    body: bytes = b""
    truncated: bool = False


class _Fetcher:
    """Fetch one URL through the guard, by hand-followed redirects, with retries."""

    def __init__(
        self, config: WebFetchConfig, http: httpx.AsyncClient, extractor: ExtractorPool
    ) -> None:
        self._config = config
        self._http = http
        self._extractor = extractor
        self._guard = AddressGuard(config.allow_hosts)

    async def fetch(self, url: str) -> dict[str, Any]:
        """Return `{url, final_url, status, title, text, truncated}` or `{url, error}`."""
        limit = self._config.timeout_s
        try:
            async with asyncio.timeout(limit):  # fetching and extracting share the deadline
                final_url, response = await self._follow(url)
                title, text = await self._extractor.extract(
                    response.body, response.content_type, response.charset, final_url
                )
        except TimeoutError:
            return {"url": url, "error": f"timed out after {limit:g} s"}
        except _Failed as exc:
            return {"url": url, "error": str(exc)}
        except ExtractionFailed as exc:
            log.warning("web_fetch %s: the page text could not be extracted: %s", url, exc)
            return {"url": url, "error": str(exc)}
        truncated = response.truncated or len(text) > self._config.max_chars
        return {
            "url": url,
            "final_url": final_url,
            "status": response.status,
            "title": title,
            "text": text[: self._config.max_chars],
            "truncated": truncated,
        }

    async def _follow(self, url: str) -> tuple[str, _Response]:
        current = _parse_url(url)
        for _ in range(self._config.max_redirects + 1):
            try:
                port = current.port or (443 if current.scheme == "https" else 80)
                addresses = await self._guard.addresses(_host(current), port)
            except Refused as exc:
                # Why goes to the log only: "could not be resolved" and "<name> (10.0.0.5) is
                # a private address" told a tenant which internal names exist, and where.
                log.info("web_fetch refused %s: %s", current, exc)
                raise _Failed(_REFUSED.format(host=_host(current))) from None
            response = await self._with_retries(current, addresses)
            if response.location is None:
                return str(current), response
            try:
                current = _parse_url(str(current.join(response.location)))
            except (_Failed, httpx.InvalidURL, ValueError) as exc:
                raise _Failed(f"redirected to an unusable URL: {exc}") from None
        raise _Failed(f"more than {self._config.max_redirects} redirects")

    async def _with_retries(self, url: httpx.URL, addresses: list[str]) -> _Response:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._config.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type((_Retryable, *_TRANSIENT)),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._request_any(url, addresses)
        except _Retryable as exc:
            raise _Failed(f"the server answered HTTP {exc.status}") from None
        except httpx.TimeoutException:
            raise _Failed("the server did not answer in time") from None
        except httpx.HTTPError as exc:
            # The model is told the failure's kind; the details go to the log.
            log.warning("web_fetch %s: the connection failed", url, exc_info=exc)
            raise _Failed(f"the connection failed ({type(exc).__name__})") from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff, or the server's Retry-After when it asks for a short wait."""
        delay = self._config.retry_backoff_s * 2.0 ** (state.attempt_number - 1)
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, _Retryable) and error.retry_after is not None:
            delay = error.retry_after
        return min(delay, self._config.retry_max_wait_s)

    async def _request_any(self, url: httpx.URL, addresses: list[str]) -> _Response:
        """Try each checked address in turn until one accepts the connection."""
        for i, address in enumerate(addresses):
            try:
                return await self._request(url, address)
            except httpx.ConnectError as exc:
                if _bad_certificate(exc):
                    raise _Failed("the TLS certificate is not valid for this host") from None
                if i == len(addresses) - 1:
                    raise
        raise AssertionError("unreachable: the guard returns at least one address")

    async def _request(self, url: httpx.URL, address: str) -> _Response:
        headers = {
            "Host": url.netloc.decode("ascii"),
            "User-Agent": self._config.user_agent,
            "Accept": _ACCEPT,
            "Accept-Encoding": "gzip, deflate",
            "Connection": "close",
        }
        extensions: dict[str, Any] = {}
        if url.scheme == "https" and not _is_ip(_host(url)):
            extensions["sni_hostname"] = _host(url)
        async with self._http.stream(
            "GET",
            url.copy_with(host=address),
            headers=headers,
            extensions=extensions,
            follow_redirects=False,
            timeout=self._config.timeout_s,
        ) as response:
            return await self._read(response)

    async def _read(self, response: httpx.Response) -> _Response:
        status = response.status_code
        if status in _REDIRECTS and "location" in response.headers:
            return _Response(status, location=response.headers["location"])
        if status in _RETRY_STATUSES:
            raise _Retryable(status, _retry_after(response.headers.get("retry-after")))
        if status >= 400 or status < 200:
            raise _Failed(f"the server answered HTTP {status} {response.reason_phrase}".rstrip())
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type and not _TEXT_TYPES.match(content_type):
            raise _Failed(f"unsupported content type {content_type!r} (only text and HTML)")
        try:
            # The raw body, decoded here in bounded steps: httpx would inflate each chunk
            # whole, before any cap (agent/tools/decoding.py). Leaving the stream early
            # closes the connection: the rest is never read.
            body = await read_decoded(
                response.aiter_raw(),
                response.headers.get("content-encoding", ""),
                self._config.max_bytes,
            )
        except UnsupportedEncoding as exc:
            raise _Failed(str(exc)) from None
        except zlib.error:
            raise _Failed("the page's compressed body is corrupt") from None
        return _Response(
            status,
            content_type=content_type,
            charset=response.charset_encoding,
            body=body.data,
            truncated=body.truncated,
        )


def _parse_url(text: str) -> httpx.URL:
    try:
        url = httpx.URL(text.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise _Failed(f"not a valid URL ({exc})") from None
    if url.scheme not in ("http", "https"):
        raise _Failed(f"only http and https URLs can be fetched, not {url.scheme or 'none'!r}")
    if not url.host:
        raise _Failed("the URL has no host")
    if url.userinfo:
        raise _Failed("URLs with a user name or password are not fetched")
    return url.copy_with(fragment=None)


def _host(url: httpx.URL) -> str:
    """The host as DNS and TLS see it: IDNA-encoded, IPv6 without brackets."""
    return url.raw_host.decode("ascii")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _bad_certificate(exc: BaseException) -> bool:
    """Whether a connection failed on certificate verification (never worth a retry)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _retry_after(value: str | None) -> float | None:
    """Seconds from a numeric Retry-After; an HTTP date falls back to our own backoff."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def build_web_fetch(
    config: WebFetchConfig, *, http: httpx.AsyncClient, extractor: ExtractorPool
) -> Tool:
    """Build web_fetch over `http` (use agent.tools.http.create_http_client: no cookies) and
    `extractor` (the caller owns it and closes it with `aclose()`)."""
    fetcher = _Fetcher(config, http, extractor)

    async def web_fetch(args: WebFetchArgs, context: ToolContext) -> dict[str, Any]:
        results = await asyncio.gather(*(fetcher.fetch(url) for url in args.urls))
        failed = [r for r in results if "error" in r]
        if len(failed) == len(results):
            detail = "; ".join(f"{r['url']}: {r['error']}" for r in failed)
            raise ToolError(f"No page could be fetched. {detail}")
        return {"results": results}

    return make_tool(
        web_fetch,
        description=(
            f"Read up to {MAX_URLS} web pages (http/https) and return their main text. "
            "Each result is {url, final_url, status, title, text, truncated} or {url, error}."
        ),
    )
