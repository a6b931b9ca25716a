"""The HTTP client the web tools share: no cookies, no redirects, no environment proxies.

One client serves every tenant, so it must not remember anything between requests: a
cookie set by a page fetched for one user would otherwise be sent on another user's fetch.
Redirects are followed by web_fetch itself (each hop is checked), and proxies come from
configuration, never silently from the process environment.
"""

from __future__ import annotations

import ssl
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx

__all__ = ["create_http_client"]


def create_http_client(
    *,
    timeout_s: float = 15.0,
    verify: ssl.SSLContext | bool = True,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """Build the tools' client; the caller owns it and must `aclose()` it at shutdown.

    `verify` is an SSLContext trusting a private CA, or True for the system's CAs.
    """
    no_cookies = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    return httpx.AsyncClient(
        cookies=no_cookies,
        follow_redirects=False,
        trust_env=False,
        timeout=timeout_s,
        verify=verify,
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
        transport=transport,
    )
