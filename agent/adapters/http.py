"""The model adapter's HTTP: one streamed POST per call, behind a small port.

`HttpTransport` is the port (tests give a transport that hands out chosen reads);
`AiohttpTransport` is the one the server uses. aiohttp is used directly: its C parser reads
the stream, and nothing is built per call but the request itself. The openai SDK's client
wrapped the same aiohttp session in httpx objects, which cost more CPU per call than the
rest of the request path and half a second of import at startup (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import Mapping
from typing import Protocol

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

__all__ = ["AiohttpTransport", "HttpReply", "HttpTransport", "Unreachable"]

MAX_CONNECTIONS = 1000  # LLM calls in flight per process, as the openai SDK's client allows
_FAILURES = (aiohttp.ClientError, OSError, TimeoutError)  # what aiohttp raises when one fails
_STALE_RETRIES = 2  # each drops one dead pooled connection


class Unreachable(Exception):
    """The request got no answer: the connection could not be made, broke, or timed out.
    `lasting`: trying again cannot help (the server's certificate is not trusted)."""

    def __init__(self, reason: str, *, timed_out: bool = False, lasting: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out
        self.lasting = lasting


class HttpReply(Protocol):
    """An answer whose status and headers arrived; its body is read as it comes."""

    @property
    def status(self) -> int: ...

    def header(self, name: str) -> str | None:
        """The answer's header `name` (any case), if it has one."""
        ...

    async def read_some(self) -> bytes:
        """Everything that arrived since the last read (waiting for at least one byte);
        b"" at the end of the body. A connection that breaks raises."""
        ...

    async def read_all(self) -> bytes:
        """The rest of the body (an error answer's)."""
        ...

    def close(self) -> None:
        """Done with the reply: a body read to its end leaves the connection for the next
        call; one cut short closes it, so the server stops generating."""
        ...


class HttpTransport(Protocol):
    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> HttpReply:
        """Send the request and wait for the answer's status line and headers. Raises
        Unreachable when there is none."""
        ...

    async def aclose(self) -> None: ...


class _AiohttpReply:
    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    def header(self, name: str) -> str | None:
        return self._response.headers.get(name)

    async def read_some(self) -> bytes:
        try:
            return await self._response.content.readany()
        except _FAILURES as exc:
            raise _unreachable(exc) from exc

    async def read_all(self) -> bytes:
        try:
            return await self._response.read()
        except _FAILURES as exc:
            raise _unreachable(exc) from exc

    def close(self) -> None:
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport:
    """One aiohttp session for every call of the process, made on the first call (aiohttp
    wants a running event loop). Each wait for the server (connecting, or the next bytes of
    the answer) may take up to `timeout_s`; a reply that keeps streaming has no overall
    limit. Proxies come from the environment (`HTTPS_PROXY`, `NO_PROXY`); cookies the model
    server sets (a gateway's sticky session) go back with later calls, IP hosts included.
    Certificates are checked against the system's store and certifi's (`_trust`)."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout_s, sock_connect=timeout_s, sock_read=timeout_s
        )
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, tuple[URL | None, aiohttp.BasicAuth | None]] = {}

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS),
                cookie_jar=aiohttp.CookieJar(unsafe=True),
                timeout=self._timeout,
            )
        return self._session

    async def _proxy(self, url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
        """The environment's proxy for `url`, looked up (in a thread: it may read ~/.netrc)
        on the first call only. aiohttp's own `trust_env` looks it up on every request, which
        cost more CPU than the rest of the request."""
        if url not in self._proxies:
            self._proxies[url] = await asyncio.to_thread(_env_proxy, url)
        return self._proxies[url]

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> HttpReply:
        """Send; a kept-alive connection the server had already closed (llama.cpp and
        uvicorn close idle ones after 5 s, aiohttp keeps them 15 s) is dropped and the
        request sent again at once, up to `_STALE_RETRIES` times, as other HTTP clients do:
        not a failure of the model server, so not one the caller retries and reports."""
        session = self._open_session()
        proxy, proxy_auth = await self._proxy(url)
        tls = await _tls(url)
        resends = _STALE_RETRIES
        while True:
            try:
                response = await session.post(
                    url,
                    data=body,
                    headers=headers,
                    allow_redirects=False,
                    proxy=proxy,
                    proxy_auth=proxy_auth,
                    ssl=tls,
                )
            except _FAILURES as exc:
                if resends and _stale(exc):
                    resends -= 1
                    continue
                raise _unreachable(exc) from exc
            return _AiohttpReply(response)

    async def get_json(self, url: str, headers: Mapping[str, str]) -> object | None:
        """A small JSON document (a model server's own description), or None when it does
        not answer one: a question the caller may do without, so it fails quietly."""
        session = self._open_session()
        proxy, proxy_auth = await self._proxy(url)
        try:
            async with session.get(
                url,
                headers=headers,
                allow_redirects=False,
                proxy=proxy,
                proxy_auth=proxy_auth,
                ssl=await _tls(url),
                timeout=aiohttp.ClientTimeout(total=_PROBE_TIMEOUT_S),
            ) as response:
                if response.status != 200:
                    return None
                data = await response.content.read(_PROBE_MAX_BYTES)
        except _FAILURES:
            return None
        try:
            parsed: object = json.loads(data)
        except ValueError:
            return None
        return parsed

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


_PROBE_TIMEOUT_S = 5.0
_PROBE_MAX_BYTES = 1 << 20


_TRUSTED: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


async def _tls(url: str) -> ssl.SSLContext | bool:
    """What checks the certificate of `url`'s server (True, aiohttp's default, for plain HTTP:
    none is needed). The context is built in a thread, since it reads certificate files."""
    if not url.startswith("https:"):
        return True
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _TRUSTED.get(key)
    if context is None:
        context = await asyncio.to_thread(_trust, *key)
    return context


def _trust(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """Certificates a model server's may chain to: the system's store (or `SSL_CERT_FILE` /
    `SSL_CERT_DIR`), so a company's own CA works, plus certifi's bundle, which httpx (and so
    the openai SDK) used: a host without a CA store still reaches the public APIs. Built once
    per process and setting (~45 ms of CPU), shared by every session."""
    context = ssl.create_default_context()
    try:
        import certifi
    except ImportError:  # pragma: no cover - httpx brings it
        pass
    else:
        context.load_verify_locations(certifi.where())
    return _TRUSTED.setdefault((cert_file, cert_dir), context)


def _env_proxy(url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:  # none, or NO_PROXY names the host
        return None, None


def _stale(exc: BaseException) -> bool:
    """Did sending fail on a connection the server had closed (not: could not connect)?"""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False
    return isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError))


def _unreachable(exc: BaseException) -> Unreachable:
    return Unreachable(
        _name(exc),
        timed_out=isinstance(exc, TimeoutError),
        lasting=isinstance(exc, aiohttp.ClientConnectorCertificateError),
    )


def _name(exc: BaseException) -> str:
    """What failed, in a word a log or an error message can carry (never a URL or a key)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "its TLS certificate is not trusted"
    if isinstance(exc, aiohttp.ClientConnectorError):
        refused = isinstance(exc.os_error, ConnectionRefusedError)
        return "connection refused" if refused else "could not connect"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the connection closed before its end"
    return type(exc).__name__
