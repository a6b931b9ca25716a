"""web_fetch against pages served by a real loopback server (allow-listed where needed)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import subprocess
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from agent.errors import ModelBehaviorError, ToolError
from agent.tools import create_http_client
from agent.tools.base import Tool
from agent.tools.config import WebFetchConfig
from agent.tools.extractor import ExtractorPool
from agent.tools.web_fetch import build_web_fetch
from tests.agent.tools.conftest import RecordingTransport, call
from tests.fakes.servers import serve

ARTICLE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Caf&eacute; guide</title></head>
<body>
<nav><a href="/">Home</a> <a href="/menu">Navigation menu entry</a></nav>
<article>
<h1>Caf&eacute; guide</h1>
<p>Espresso is brewed by forcing hot water through finely ground coffee beans.
It is the base of many drinks served in cafés all around the world, from Rome to Oslo.</p>
<p>A good espresso has a layer of crema on top and a balanced, rich taste that lingers.</p>
</article>
<footer>Copyright footer boilerplate</footer>
</body></html>"""


@dataclass
class Site:
    """The pages; `hits` counts requests per path, `release` frees hanging handlers."""

    base: str = ""
    hits: Counter[str] = field(default_factory=Counter)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    stream_closed: asyncio.Event = field(default_factory=asyncio.Event)
    hosts: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def app(self) -> Starlette:
        async def endpoint(request: Request) -> Response:
            path = request.url.path
            self.hits[path] += 1
            self.hosts.append(request.headers.get("host", ""))
            handler = getattr(self, "page_" + path.strip("/").split("/")[0], None)
            if handler is None:
                return PlainTextResponse("not here", status_code=404)
            response: Response = await handler(request)
            return response

        return Starlette(routes=[Route("/{rest:path}", endpoint)])

    async def page_article(self, request: Request) -> Response:
        return HTMLResponse(ARTICLE)

    async def page_plain(self, request: Request) -> Response:
        return PlainTextResponse("just some text\nsecond line")

    async def page_big(self, request: Request) -> Response:
        return PlainTextResponse("x" * 1_000_000)

    async def page_endless(self, request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            try:
                while True:
                    yield b"y" * 65536
                    await asyncio.sleep(0)
            finally:
                self.stream_closed.set()

        return StreamingResponse(chunks(), media_type="text/plain")

    async def page_broken(self, request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"half a page"
            raise RuntimeError("the server broke mid-response")

        return StreamingResponse(chunks(), media_type="text/plain")

    async def page_hang(self, request: Request) -> Response:
        async with asyncio.timeout(10):
            await self.release.wait()
        return PlainTextResponse("late")

    async def page_redirect(self, request: Request) -> Response:
        n = int(request.url.path.rsplit("/", 1)[1])
        if n == 0:
            return PlainTextResponse("landed")
        return RedirectResponse(f"/redirect/{n - 1}", status_code=302)

    async def page_to(self, request: Request) -> Response:
        return RedirectResponse(request.query_params["u"], status_code=301)

    async def page_flaky(self, request: Request) -> Response:
        if self.hits[request.url.path] == 1:
            return PlainTextResponse("slow down", 429, headers={"Retry-After": "0"})
        return PlainTextResponse("recovered")

    async def page_down(self, request: Request) -> Response:
        return PlainTextResponse("unavailable", 503)

    async def page_gate(self, request: Request) -> Response:
        if sum(n for p, n in self.hits.items() if p.startswith("/gate/")) >= 2:
            self.arrived.set()
        async with asyncio.timeout(5):  # reached only if both requests are in flight at once
            await self.arrived.wait()
        return PlainTextResponse(f"gate {request.url.path}")

    async def page_pdf(self, request: Request) -> Response:
        return Response(b"%PDF-1.7", media_type="application/pdf")

    async def page_host(self, request: Request) -> Response:
        return PlainTextResponse(f"host={request.headers['host']}")

    async def page_cookie(self, request: Request) -> Response:
        response = PlainTextResponse(f"cookie={request.headers.get('cookie', '')}")
        response.set_cookie("session", "abc")
        return response


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    pages = Site()
    async with serve(pages.app()) as address:
        pages.base = f"http://{address}"
        yield pages
        pages.release.set()


def fetcher(http: httpx.AsyncClient, extractor: ExtractorPool, **config: Any) -> Tool:
    options: dict[str, Any] = {"allow_hosts": ["127.0.0.1"], "retry_backoff_s": 0.01}
    options.update(config)
    return build_web_fetch(WebFetchConfig(**options), http=http, extractor=extractor)


async def fetch_one(tool: Tool, url: str) -> dict[str, Any]:
    result = await call(tool, {"urls": [url]})
    (page,) = result["results"]
    assert isinstance(page, dict)
    return page


async def test_html_is_reduced_to_its_readable_text(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    page = await fetch_one(fetcher(http, extractor), site.url("/article"))
    assert page["url"] == page["final_url"] == site.url("/article")
    assert page["status"] == 200 and page["title"] == "Café guide"
    assert "Espresso is brewed" in page["text"] and "crema" in page["text"]
    assert "Copyright footer" not in page["text"] and "Navigation menu" not in page["text"]
    assert page["truncated"] is False


async def test_plain_text_is_returned_as_is(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    page = await fetch_one(fetcher(http, extractor), site.url("/plain"))
    assert page["text"] == "just some text\nsecond line" and page["title"] is None


async def test_body_is_capped_in_bytes(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    page = await fetch_one(
        fetcher(http, extractor, max_bytes=10_000, max_chars=50_000), site.url("/big")
    )
    assert page["truncated"] is True and len(page["text"]) == 10_000


async def test_endless_body_is_abandoned_at_the_cap(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    page = await fetch_one(fetcher(http, extractor, max_bytes=200_000), site.url("/endless"))
    assert page["truncated"] is True
    async with asyncio.timeout(5):
        await site.stream_closed.wait()  # the server saw the connection go


async def test_text_is_capped_in_characters(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    page = await fetch_one(fetcher(http, extractor, max_chars=100), site.url("/big"))
    assert page["truncated"] is True and len(page["text"]) == 100


async def test_slow_page_times_out(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    with pytest.raises(ToolError, match=r"timed out after 0.3 s"):
        await call(fetcher(http, extractor, timeout_s=0.3), {"urls": [site.url("/hang")]})


async def test_redirects_are_followed_up_to_the_limit(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    tool = fetcher(http, extractor, max_redirects=3)
    page = await fetch_one(tool, site.url("/redirect/3"))
    assert page["final_url"] == site.url("/redirect/0") and page["text"] == "landed"
    with pytest.raises(ToolError, match="more than 3 redirects"):
        await call(tool, {"urls": [site.url("/redirect/4")]})
    assert site.hits["/redirect/4"] == 1 and site.hits["/redirect/0"] == 1  # 4 hops, no 5th


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.1/", "private"),
        ("http://[::1]:8080/", "loopback"),
        ("http://[::ffff:192.168.0.1]/", "private"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
    ],
)
async def test_redirect_to_a_private_address_is_refused_before_connecting(
    site: Site,
    http: httpx.AsyncClient,
    transport: RecordingTransport,
    target: str,
    problem: str,
    extractor: ExtractorPool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agent.tools.web_fetch")
    with pytest.raises(ToolError, match="refused: .* is not an address web_fetch may reach"):
        await call(fetcher(http, extractor), {"urls": [site.url(f"/to?u={target}")]})
    assert transport.hosts == ["127.0.0.1"]  # only the page that redirected was contacted
    assert f"is a {problem} address" in caplog.text  # the operator is told why


async def test_redirect_to_another_scheme_is_refused(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    with pytest.raises(ToolError, match="redirected to an unusable URL: only http and https"):
        await call(fetcher(http, extractor), {"urls": [site.url("/to?u=file:///etc/passwd")]})


async def test_loopback_is_refused_unless_allow_listed(
    site: Site, http: httpx.AsyncClient, transport: RecordingTransport, extractor: ExtractorPool
) -> None:
    for url in (site.url("/plain"), site.url("/plain").replace("127.0.0.1", "localhost")):
        with pytest.raises(ToolError, match="not an address web_fetch may reach"):
            await call(fetcher(http, extractor, allow_hosts=[]), {"urls": [url]})
    assert transport.requests == [] and site.hits["/plain"] == 0
    page = await fetch_one(
        fetcher(http, extractor, allow_hosts=["127.0.0.0/8"]), site.url("/plain")
    )
    assert page["status"] == 200


async def test_allow_listed_name_connects_to_the_checked_address(
    site: Site, http: httpx.AsyncClient, transport: RecordingTransport, extractor: ExtractorPool
) -> None:
    url = site.url("/host").replace("127.0.0.1", "localhost")
    port = url.split(":")[2].split("/")[0]
    page = await fetch_one(fetcher(http, extractor, allow_hosts=[f"localhost:{port}"]), url)
    assert page["text"] == f"host=localhost:{port}" and page["final_url"] == url
    assert transport.hosts[-1] == "127.0.0.1"  # pinned to the resolved address


async def test_a_bare_allow_listed_name_opens_only_the_default_ports(
    site: Site, http: httpx.AsyncClient, transport: RecordingTransport, extractor: ExtractorPool
) -> None:
    url = site.url("/host").replace("127.0.0.1", "localhost")
    with pytest.raises(ToolError, match="refused: localhost is not an address web_fetch may"):
        await call(fetcher(http, extractor, allow_hosts=["localhost"]), {"urls": [url]})
    other_port = fetcher(http, extractor, allow_hosts=["localhost:1"])
    with pytest.raises(ToolError, match="refused: localhost is not an address web_fetch may"):
        await call(other_port, {"urls": [url]})
    assert transport.requests == []  # refused before any connection


async def test_429_then_200_is_retried(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    page = await fetch_one(fetcher(http, extractor), site.url("/flaky"))
    assert page["text"] == "recovered" and site.hits["/flaky"] == 2


async def test_persistent_5xx_gives_up_after_the_retries(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    with pytest.raises(ToolError, match="HTTP 503"):
        await call(fetcher(http, extractor, max_retries=2), {"urls": [site.url("/down")]})
    assert site.hits["/down"] == 3


async def test_urls_are_fetched_concurrently_and_fail_alone(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    urls = [site.url("/gate/1"), site.url("/missing"), site.url("/gate/2")]
    result = await call(fetcher(http, extractor), {"urls": urls})
    first, missing, second = result["results"]
    assert first["text"] == "gate /gate/1" and second["text"] == "gate /gate/2"
    assert missing == {"url": urls[1], "error": "the server answered HTTP 404 Not Found"}


async def test_all_failing_is_a_tool_error_listing_each(
    http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    urls = ["file:///etc/passwd", "http://user:pw@example.com/", "ftp://example.com/x"]
    with pytest.raises(ToolError) as caught:
        await call(fetcher(http, extractor), {"urls": urls})
    message = str(caught.value)
    assert "only http and https" in message and "user name or password" in message
    assert all(url in message for url in urls)


async def test_unsupported_content_type(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    with pytest.raises(ToolError, match="unsupported content type 'application/pdf'"):
        await call(fetcher(http, extractor), {"urls": [site.url("/pdf")]})


async def test_cookies_are_never_kept_between_fetches(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool
) -> None:
    tool = fetcher(http, extractor)
    await fetch_one(tool, site.url("/cookie"))
    page = await fetch_one(tool, site.url("/cookie"))
    assert page["text"] == "cookie="


async def test_a_failed_connection_is_logged_with_its_details(
    site: Site, http: httpx.AsyncClient, extractor: ExtractorPool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agent.tools.web_fetch")
    with pytest.raises(ToolError, match="the connection failed"):
        await call(fetcher(http, extractor, max_retries=0), {"urls": [site.url("/broken")]})
    (record,) = [r for r in caplog.records if r.name == "agent.tools.web_fetch"]
    assert site.url("/broken") in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], httpx.HTTPError)


async def test_arguments_are_strict(http: httpx.AsyncClient, extractor: ExtractorPool) -> None:
    tool = fetcher(http, extractor)
    for bad in ({"urls": []}, {"urls": ["http://a.example"] * 4}, {"url": "http://a.example"}):
        with pytest.raises(ModelBehaviorError):
            await call(tool, bad)


@pytest.fixture(scope="module")
def localhost_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate valid for the name "localhost" only (no IP address)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
        + ["-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(key)]
        + ["-out", str(cert), "-addext", "subjectAltName=DNS:localhost"],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_https_pinned_to_the_checked_address_still_verifies_the_name(
    localhost_cert: tuple[Path, Path],
    extractor: ExtractorPool,
) -> None:
    cert, key = localhost_cert
    site = Site()
    trust = ssl.create_default_context(cafile=str(cert))
    transport = RecordingTransport(verify=trust)
    async with (
        serve(site.app(), ssl_certfile=str(cert), ssl_keyfile=str(key)) as address,
        create_http_client(transport=transport) as http,
    ):
        port = address.rsplit(":", 1)[1]
        tool = fetcher(http, extractor, allow_hosts=["localhost", "127.0.0.1"])
        page = await fetch_one(tool, f"https://localhost:{port}/host")
        assert page["text"] == f"host=localhost:{port}"
        assert transport.hosts == ["127.0.0.1"]  # connected to the IP, verified as localhost
        # Without the name the certificate does not match: verification is really on.
        with pytest.raises(ToolError, match="TLS certificate is not valid"):
            await call(tool, {"urls": [f"https://127.0.0.1:{port}/host"]})
        site.release.set()
