"""OpenAIChatModel reads SSE itself: text read while the caller was busy goes on as one piece.
Its request and error answers are compared with the openai SDK's own (the reference)."""

from __future__ import annotations

import asyncio
import re
import ssl
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx2 as httpx  # the HTTP client the openai SDK is built on: to capture its request
import orjson
import pytest

from agent.adapters.config import ModelConfig
from agent.adapters.http import Unreachable
from agent.adapters.openai_chat import RETRY_AFTER_MAX_S, OpenAIChatModel, StatusError, _retry_after
from agent.adapters.sse import SSELines
from agent.errors import ModelError
from agent.messages import Message
from agent.ports import CallInfo, ModelTurn, RetryNotice, Thinking
from tests.fakes.processes import free_port

CALL = CallInfo("s", "r", 1, "reason")


def _event(delta: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"delta": delta}]}) + b"\n\n"


class _Reply:
    """An answer whose body comes in the given reads; read `gate_at` waits until `gate` is set."""

    def __init__(
        self,
        status: int,
        reads: list[bytes],
        gate: asyncio.Event | None = None,
        gate_at: int = -1,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status, self._reads, self._gate, self._gate_at = status, reads, gate, gate_at
        self._headers = {k.lower(): v for k, v in (headers or {}).items()}
        self._next = 0
        self.closed = False

    def header(self, name: str) -> str | None:
        return self._headers.get(name.lower())

    async def read_some(self) -> bytes:
        if self._next == len(self._reads):
            return b""
        if self._next == self._gate_at and self._gate is not None:
            await self._gate.wait()
        self._next += 1
        return self._reads[self._next - 1]

    async def read_all(self) -> bytes:
        rest, self._next = self._reads[self._next :], len(self._reads)
        return b"".join(rest)

    def close(self) -> None:
        self.closed = True


class _Transport:
    """Records each request and answers it with `reply()`."""

    def __init__(self, reply: Callable[[], _Reply]) -> None:
        self._reply = reply
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> _Reply:
        self.sent.append((url, body, dict(headers)))
        return self._reply()

    async def aclose(self) -> None:
        pass


async def _failure(model: OpenAIChatModel) -> ModelError:
    """The ModelError a call ends with; the model is closed after it."""
    try:
        with pytest.raises(ModelError) as failure:
            async for _ in model.stream([Message("user", "hi")], tools=(), call=CALL):
                pass
    finally:
        await model.aclose()
    return failure.value


def _config(base_url: str, **options: Any) -> ModelConfig:
    return ModelConfig(model="m", api_key="k", base_url=base_url, **options)


def _model(transport: _Transport, **options: Any) -> OpenAIChatModel:
    """A model on `transport`; `options` are ModelConfig keys."""
    return OpenAIChatModel(_config("http://llm/v1", **options), transport=transport)


async def _stream(reads: list[bytes], gate_at: int = -1) -> list[str | Thinking | ModelTurn]:
    """Stream a reply; the gated read is released once the first item reached the caller."""
    gate = asyncio.Event()
    model = _model(_Transport(lambda: _Reply(200, reads, gate, gate_at)))
    items: list[str | Thinking | ModelTurn] = []
    try:
        async for item in model.stream([Message("user", "hi")], tools=(), call=CALL):
            items.append(item)
            gate.set()
    finally:
        await model.aclose()
    return items


async def test_the_text_of_one_read_is_one_piece_and_nothing_is_lost():
    first = b"".join(_event({"content": f"t{i} "}) for i in range(50))
    second = _event({"content": "last"})
    split = second[:9], second[9:] + b"data: [DONE]\n\n"  # an event cut across two reads
    items = await _stream([first, *split], gate_at=1)
    texts = [i for i in items if isinstance(i, str)]
    assert texts == ["".join(f"t{i} " for i in range(50)), "last"]
    turn = items[-1]
    assert isinstance(turn, ModelTurn) and turn.content == "".join(texts)


async def test_thinking_and_text_keep_their_order_when_merged():
    read = b"".join(
        [
            _event({"reasoning_content": "a"}),
            _event({"reasoning_content": "b"}),
            _event({"content": "x"}),
            _event({"content": "y"}),
            _event({"reasoning_content": "c"}),
            b"data: [DONE]\n\n",
        ]
    )
    items = await _stream([read])
    assert items[:-1] == [Thinking("ab"), "xy", Thinking("c")]


async def test_a_reply_that_breaks_off_yields_its_text_then_fails():
    broken = _event({"content": "partial"}) + b"data: {not json\n\n"
    with pytest.raises(ModelError, match="could not be read"):
        await _stream([broken])


async def test_a_context_that_fills_while_the_reply_is_written_says_what_to_change():
    # llama.cpp without an output limit: the prompt fit, then the reply filled the window and
    # the stream ends with this error event. The user needs the settings, not "broke off".
    full = b'data: {"error": {"code": 500, "message": "Context size has been exceeded.", '
    broken = _event({"content": "and so on and so on"}) + full + b'"type": "server_error"}}\n\n'
    with pytest.raises(ModelError) as failed:
        await _stream([broken])
    message = str(failed.value)
    assert "context filled up while the model was writing" in message
    assert "--ctx-size" in message and "max_tokens" in message and "window_tokens" in message


async def test_a_line_split_anywhere_across_reads_reads_the_same():
    whole = b"".join(_event({"content": f"w{i} "}) for i in range(6)) + b"data: [DONE]\n\n"
    for cut in range(1, len(whole)):
        items = await _stream([whole[:cut], whole[cut:]])
        turn = items[-1]
        assert isinstance(turn, ModelTurn) and turn.content == "w0 w1 w2 w3 w4 w5 ", cut


async def test_a_long_line_in_many_reads_reads_whole():
    line = _event({"content": "x" * 5000})
    reads = [line[i : i + 7] for i in range(0, len(line), 7)] + [b"data: [DONE]\n\n"]
    turn = (await _stream(reads))[-1]
    assert isinstance(turn, ModelTurn) and turn.content == "x" * 5000


async def test_a_line_that_never_ends_fails_the_call_at_the_limit(monkeypatch):
    monkeypatch.setattr(SSELines, "MAX_LINE", 1000)
    reads = [_event({"content": "ok"}), *[b"data: " + b"y" * 100] * 20]
    with pytest.raises(ModelError, match="longer than 1,000 bytes"):
        await _stream(reads)


async def test_crlf_and_lone_cr_line_ends_comments_and_data_without_a_space():
    body = (
        b": keep-alive\r\n\r\n"
        b'data:{"choices": [{"delta": {"content": "a"}}]}\r\n\r\n'
        b"event: message\r"
        b'data: {"choices": [{"delta": {"content": "b"}}]}\r\r'
        b'data: {"choices": [{"delta": {"content": "c"}, "finish_reason": "stop"}]}\r'
    )
    # the last CR ends one read and its event; the next read starts with a lone LF
    items = await _stream([body, b"\ndata: [DONE]\r\n\r\n"])
    turn = items[-1]
    assert isinstance(turn, ModelTurn) and (turn.content, turn.finish_reason) == ("abc", "stop")


async def test_a_last_event_without_its_newline_still_counts():
    usage = {
        "prompt_tokens": 7,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    body = _event({"content": "done"}) + b"data: " + orjson.dumps({"choices": [], "usage": usage})
    turn = (await _stream([body]))[-1]
    assert isinstance(turn, ModelTurn)
    assert (turn.content, turn.prompt_tokens, turn.completion_tokens, turn.cached_tokens) == (
        "done",
        7,
        2,
        4,
    )


async def _capture_sdk(handler: Callable[[httpx.Request], httpx.Response]) -> Exception | None:
    """Make the call the SDK's own create() makes for CALL with one user message."""
    from openai import AsyncOpenAI

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    sdk = AsyncOpenAI(
        api_key="k", base_url="http://llm/v1", timeout=60.0, max_retries=0, http_client=client
    )
    try:
        async with sdk.chat.completions.with_streaming_response.create(
            model="m",
            messages=[],
            stream=True,
            extra_body={
                "messages": [{"role": "user", "content": "hi"}],
                "stream_options": {"include_usage": True},
            },
            extra_headers={
                "X-Agent-Session": "s",
                "X-Agent-Run": "r",
                "X-Agent-Step": "1",
                "X-Agent-Phase": "reason",
            },
        ):
            pass
    except Exception as exc:  # the SDK's error, to compare with ours
        return exc
    finally:
        await sdk.close()
    return None


@pytest.mark.parametrize("scoped", [False, True])
async def test_the_request_is_the_one_the_sdk_would_send(monkeypatch, scoped: bool):
    """The same URL and JSON body, and the headers that carry meaning to a model server (the
    SDK's own telemetry headers, X-Stainless-*, and its User-Agent are not sent), also with
    the organization and project the SDK reads from OPENAI_ORG_ID and OPENAI_PROJECT_ID."""
    for variable, value in (("OPENAI_ORG_ID", "org-1"), ("OPENAI_PROJECT_ID", "proj-1")):
        if scoped:
            monkeypatch.setenv(variable, value)
        else:
            monkeypatch.delenv(variable, raising=False)
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, content=b"data: [DONE]\n\n")

    await _capture_sdk(handler)
    (theirs,) = sent
    transport = _Transport(lambda: _Reply(200, [b"data: [DONE]\n\n"]))
    model = _model(transport)
    try:
        async for _ in model.stream([Message("user", "hi")], tools=(), call=CALL):
            pass
    finally:
        await model.aclose()
    ((url, body, headers),) = transport.sent
    assert url == str(theirs.url) and theirs.method == "POST"
    assert orjson.loads(body) == orjson.loads(theirs.content)
    meaningful = {
        name: value
        for name, value in theirs.headers.items()
        if not name.startswith("x-stainless")
        and name not in ("user-agent", "host", "accept-encoding", "connection", "content-length")
    }
    assert {name.lower(): value for name, value in headers.items()} == {
        **meaningful,
        "user-agent": headers["User-Agent"],
    }
    assert headers["User-Agent"].startswith("agent-server")
    assert ("OpenAI-Project" in headers) is scoped  # the comparison above saw the SDK send it


async def test_a_base_url_with_or_without_its_slash_reaches_the_same_endpoint():
    urls = []
    for base in ("http://llm/v1", "http://llm/v1/"):
        transport = _Transport(lambda: _Reply(200, [b"data: [DONE]\n\n"]))
        model = OpenAIChatModel(_config(base), transport=transport)
        async for _ in model.stream([Message("user", "hi")], tools=(), call=CALL):
            pass
        urls.append(transport.sent[0][0])
    assert urls == ["http://llm/v1/chat/completions"] * 2


async def test_a_cookie_the_model_server_sets_goes_back_with_the_next_call():
    """A gateway's sticky-session cookie, over a real socket with the default (aiohttp)
    client: the request is built without the client's `build_request`, yet carries the
    cookie once."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from tests.fakes.servers import serve

    cookies: list[list[str]] = []

    async def chat(request: Request) -> Response:
        cookies.append(request.headers.getlist("cookie"))
        reply = Response(b"data: [DONE]\n\n", media_type="text/event-stream")
        reply.set_cookie("route", "b1")
        return reply

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    async with serve(app) as address:
        model = OpenAIChatModel(_config(f"http://{address}/v1"))
        try:
            for _ in range(3):
                async for _ in model.stream([Message("user", "hi")], tools=(), call=CALL):
                    pass
        finally:
            await model.aclose()
    assert cookies == [[], ["route=b1"], ["route=b1"]]


@pytest.mark.parametrize(
    ("status", "content"),
    [
        (
            400,
            b'{"error": {"message": "the request exceeds the available context size",'
            b' "type": "exceed_context_size_error", "n_ctx": 4096}}',
        ),
        (404, b'{"detail": "no such model"}'),
        (429, b"slow down"),
        (503, b""),
    ],
)
async def test_an_error_answer_reads_as_the_sdk_reads_it(status: int, content: bytes):
    import openai

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=content)

    theirs = await _capture_sdk(handler)
    reply = _Reply(status, [content])
    failure = await _failure(_model(_Transport(lambda: reply), max_retries=0))
    ours = failure.__cause__  # ContextTooLong is a ModelError too
    assert isinstance(theirs, openai.APIStatusError) and isinstance(ours, StatusError)
    assert (ours.message, ours.body, ours.status_code) == (
        theirs.message,
        theirs.body,
        theirs.status_code,
    )
    assert reply.closed


@pytest.mark.parametrize("status", [400, 401])
async def test_no_reason_the_server_gives_hands_the_key_to_the_log_or_the_user(
    status: int, caplog: pytest.LogCaptureFixture
):
    key = "sk-proj-Zq81mXv03LpT7uNc"
    said = f"Incorrect API key provided: {key}; also known as {key[:12]}***{key[-4:]}."
    body = orjson.dumps({"error": {"message": said}})
    config = ModelConfig(model="m", api_key=key, base_url="http://llm/v1", max_retries=0)
    model = OpenAIChatModel(config, transport=_Transport(lambda: _Reply(status, [body])))
    failure = await _failure(model)
    shown = f"{failure} {caplog.text}"
    assert f"HTTP {status}" in str(failure) and f"HTTP {status}" in caplog.text
    assert key[:12] not in shown and key[-8:] not in shown
    if status == 400:  # the rest of the reason still says what is wrong
        assert "Incorrect API key provided: ***" in str(failure)


async def test_a_model_server_that_does_not_answer_in_time_is_called_slow_not_unreachable():
    class _Silent(_Transport):
        async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> _Reply:
            raise Unreachable("timed out", timed_out=True)

    model = _model(_Silent(lambda: _Reply(200, [])), max_retries=0, timeout_s=7)
    failure = await _failure(model)
    assert str(failure) == "The language model did not answer within llm.timeout_s (7 s)."


def test_retry_after_is_read_as_seconds_or_a_date_and_only_when_it_is_worth_waiting():
    from email.utils import formatdate

    assert _retry_after("2") == 2.0 and _retry_after("0.5") == 0.5
    in_ten = _retry_after(formatdate(time.time() + 10, usegmt=True))
    assert in_ten is not None and 8 <= in_ten <= 10
    assert _retry_after(str(RETRY_AFTER_MAX_S + 1)) is None  # too long: the usual backoff
    for unusable in (None, "", "-1", "soon", "nan"):
        assert _retry_after(unusable) is None


async def test_a_stream_left_early_closes_its_reply():
    reply = _Reply(200, [_event({"content": "a"}), _event({"content": "b"})])
    model = _model(_Transport(lambda: reply))
    async with aclosing(model.stream([Message("user", "hi")], tools=(), call=CALL)) as items:
        async for _ in items:
            break
        assert not reply.closed
    assert reply.closed


async def test_a_proxy_named_in_the_environment_carries_the_calls(monkeypatch):
    """HTTP_PROXY (HTTPS_PROXY for https) sends every call through the proxy, with the model
    server's full URL; NO_PROXY names hosts reached directly. The proxy here is a real HTTP
    server that answers like the model server it stands for."""
    from tests.fakes.servers import serve

    seen: list[tuple[bytes, bytes]] = []

    async def proxy(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return
        seen.append((scope["raw_path"], dict(scope["headers"])[b"host"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        body = _event({"content": "via proxy"}) + b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": body})

    async with serve(proxy) as address:
        monkeypatch.setenv("HTTP_PROXY", f"http://{address}")
        for name in ("NO_PROXY", "no_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        model = OpenAIChatModel(_config("http://model.invalid/v1"))
        try:
            items = [i async for i in model.stream([Message("user", "hi")], tools=(), call=CALL)]
        finally:
            await model.aclose()
    assert seen == [(b"http://model.invalid/v1/chat/completions", b"model.invalid")]
    assert isinstance(items[-1], ModelTurn) and items[-1].content == "via proxy"


async def test_no_proxy_reaches_its_hosts_directly(monkeypatch):
    from tests.fakes.servers import serve

    async def model_server(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    async with serve(model_server) as address:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # the discard port: no proxy
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        model = OpenAIChatModel(_config(f"http://{address}/v1", max_retries=0))
        try:
            items = [i async for i in model.stream([Message("user", "hi")], tools=(), call=CALL)]
        finally:
            await model.aclose()
    assert isinstance(items[-1], ModelTurn)


class _TLSModelServer:
    """A model server over real TLS with a certificate from a throwaway CA (trustme): it
    answers every chat call with one piece of text."""

    def __init__(self) -> None:
        import trustme

        self.ca = trustme.CA()
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1").configure_cert(self._tls)
        self.port = 0

    async def __aenter__(self) -> _TLSModelServer:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0, ssl=self._tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    def ca_file(self, folder: Path) -> str:
        path = folder / "company-ca.pem"
        self.ca.cert_pem.write_to_path(str(path))
        return str(path)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # an untrusted handshake: the client hung up
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        await reader.readexactly(int(length.group(1)) if length else 0)
        body = _event({"content": "over TLS"}) + b"data: [DONE]\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()


async def _call(
    base_url: str, retries: list[RetryNotice] | None = None
) -> list[str | Thinking | ModelTurn]:
    """One call; transient failures retried up to 3 times (with no wait), noted in `retries`."""

    async def noted(notice: RetryNotice) -> None:
        if retries is not None:
            retries.append(notice)

    model = OpenAIChatModel(_config(base_url, max_retries=3), retry_initial_s=0, retry_max_s=0)
    call = CallInfo("s", "r", 1, "reason", on_retry=noted)
    try:
        return [i async for i in model.stream([Message("user", "hi")], tools=(), call=call)]
    finally:
        await model.aclose()


class _HangUpServer:
    """A plain-HTTP model server that keeps each connection open after an answer and hangs up
    when the next request comes on it: what a client meets when it reuses a connection the
    server closed meanwhile (llama.cpp and uvicorn close idle ones after 5 s)."""

    def __init__(self) -> None:
        self.connections = 0

    async def __aenter__(self) -> _HangUpServer:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = False
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if answered:
                break  # the connection's second request: hang up without an answer
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            body = _event({"content": "hi"}) + b"data: [DONE]\n\n"
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            answered = True
        writer.close()


async def test_a_kept_alive_connection_the_server_closed_is_not_a_failed_call():
    retries: list[RetryNotice] = []

    async def noted(notice: RetryNotice) -> None:
        retries.append(notice)

    async with _HangUpServer() as server:
        model = OpenAIChatModel(_config(server.url, max_retries=3))
        call = CallInfo("s", "r", 1, "reason", on_retry=noted)
        try:
            for _ in range(3):
                items = [i async for i in model.stream([Message("user", "q")], tools=(), call=call)]
                assert isinstance(items[-1], ModelTurn) and items[-1].content == "hi"
        finally:
            await model.aclose()
    assert retries == []  # sent again at once on a new connection, not retried after a wait
    assert server.connections == 3


async def test_tls_is_checked_against_the_store_ssl_cert_file_names(monkeypatch, tmp_path):
    """A model server behind a company's own CA: refused as untrusted until SSL_CERT_FILE
    names that CA (the system's store, as curl and Python read it). A real TLS server."""
    async with _TLSModelServer() as server:
        url = f"https://127.0.0.1:{server.port}/v1"
        retries: list[RetryNotice] = []
        with pytest.raises(ModelError, match="TLS certificate is not trusted"):
            await _call(url, retries)
        assert retries == []  # no retry can help: the run fails at once
        monkeypatch.setenv("SSL_CERT_FILE", server.ca_file(tmp_path))
        items = await _call(url)
    assert isinstance(items[-1], ModelTurn) and items[-1].content == "over TLS"


async def test_https_goes_through_a_real_forward_proxy(monkeypatch, tmp_path):
    """HTTPS_PROXY names proxy.py (a real forward proxy, in its own process): the call is
    tunnelled with CONNECT to the TLS model server, whose certificate is still checked."""
    port = free_port()
    log = tmp_path / "proxy.log"
    with log.open("wb") as out:
        proxy = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "proxy", "--hostname", "127.0.0.1", "--port", str(port)),
            *("--num-workers", "1", "--num-acceptors", "1"),
            stdout=out,
            stderr=out,
        )
    try:
        async with asyncio.timeout(20):
            while True:  # poll the proxy's port until it accepts (bounded by the timeout)
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                except OSError:
                    assert proxy.returncode is None, log.read_text()
                    await asyncio.sleep(0.05)
        async with _TLSModelServer() as server:
            monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
            monkeypatch.setenv("SSL_CERT_FILE", server.ca_file(tmp_path))
            for name in ("NO_PROXY", "no_proxy", "https_proxy"):
                monkeypatch.delenv(name, raising=False)
            items = await _call(f"https://127.0.0.1:{server.port}/v1")
    finally:
        proxy.terminate()
        await proxy.wait()
    assert isinstance(items[-1], ModelTurn) and items[-1].content == "over TLS"
    assert f"CONNECT 127.0.0.1:{server.port}" in log.read_text()  # it went through the proxy


class _Broken(_Reply):
    """A 200 whose stream breaks before its first event."""

    def __init__(self) -> None:
        super().__init__(200, [])

    async def read_some(self) -> bytes:
        raise Unreachable("the connection closed before its end")


def _answers(*replies: _Reply) -> _Transport:
    queue = list(replies)
    return _Transport(lambda: queue.pop(0))


def _ok() -> _Reply:
    return _Reply(200, [_event({"content": "fine"}), b"data: [DONE]\n\n"])


async def test_failures_to_open_and_early_breaks_share_one_retry_policy():
    """One policy for every attempt of a call: a refused request and a stream that broke
    before its first item count against the same llm.max_retries, each announced in turn."""
    notices: list[RetryNotice] = []

    async def noted(notice: RetryNotice) -> None:
        notices.append(notice)

    call = CallInfo("s", "r", 1, "reason", on_retry=noted)
    busy = {"Retry-After": "0"}
    replies = (_Reply(503, [b"{}"], headers=busy), _Broken(), _ok())
    model = OpenAIChatModel(
        _config("http://llm/v1", max_retries=2),
        retry_initial_s=0,
        retry_max_s=0,
        transport=_answers(*replies),
    )
    items = [i async for i in model.stream([Message("user", "hi")], tools=(), call=call)]
    assert isinstance(items[-1], ModelTurn) and items[-1].content == "fine"
    assert [(n.attempt, n.max_attempts) for n in notices] == [(2, 3), (3, 3)]
    assert "HTTP 503" in notices[0].reason and "broke off" in notices[1].reason
    assert replies[1].closed  # the broken stream's connection was given back

    notices.clear()
    model = OpenAIChatModel(
        _config("http://llm/v1", max_retries=1),
        retry_initial_s=0,
        retry_max_s=0,
        transport=_answers(_Reply(503, [b"{}"], headers=busy), _Broken(), _ok()),
    )
    with pytest.raises(ModelError, match="broke off"):  # the break was the last attempt
        async for _ in model.stream([Message("user", "hi")], tools=(), call=call):
            pass
    assert [n.attempt for n in notices] == [2]


@pytest.mark.parametrize(
    ("configured", "asked", "sent"), [(None, 0.2, 0.2), (0.7, 0.2, 0.7), (None, None, None)]
)
async def test_a_configured_temperature_wins_over_the_callers(
    configured: float | None, asked: float | None, sent: float | None
):
    """`[llm] temperature` is the operator's; a phase's own applies only when it is unset."""
    transport = _Transport(lambda: _Reply(200, [_event({"content": "ok"}), b"data: [DONE]\n\n"]))
    model = _model(transport, temperature=configured)
    try:
        async for _ in model.stream(
            [Message("user", "hi")], tools=(), call=CALL, temperature=asked
        ):
            pass
    finally:
        await model.aclose()
    assert orjson.loads(transport.sent[0][1]).get("temperature") == sent
