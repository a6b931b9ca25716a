"""OpenAIChatModel reads SSE itself: text read while the caller was busy goes on as one piece."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx2 as httpx  # the HTTP client the openai SDK is built on
import orjson
import pytest

from agent.adapters.openai_chat import OpenAIChatModel
from agent.errors import ModelError
from agent.messages import Message
from agent.ports import CallInfo, ModelTurn, Thinking

CALL = CallInfo("s", "r", 1, "reason")


def _event(delta: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"delta": delta}]}) + b"\n\n"


class _Reads(httpx.AsyncByteStream):
    """A response body in the given reads; read `gate_at` waits until `gate` is set."""

    def __init__(self, reads: list[bytes], gate: asyncio.Event, gate_at: int) -> None:
        self._reads, self._gate, self._gate_at = reads, gate, gate_at

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i, data in enumerate(self._reads):
            if i == self._gate_at:
                await self._gate.wait()
            yield data


async def _stream(reads: list[bytes], gate_at: int = -1) -> list[str | Thinking | ModelTurn]:
    """Stream a reply; the gated read is released once the first item reached the caller."""
    gate = asyncio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_Reads(reads, gate, gate_at)
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = OpenAIChatModel(model="m", api_key="k", base_url="http://llm/v1", http_client=client)
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


async def test_a_line_split_anywhere_across_reads_reads_the_same():
    whole = b"".join(_event({"content": f"w{i} "}) for i in range(6)) + b"data: [DONE]\n\n"
    for cut in range(1, len(whole)):
        items = await _stream([whole[:cut], whole[cut:]])
        turn = items[-1]
        assert isinstance(turn, ModelTurn) and turn.content == "w0 w1 w2 w3 w4 w5 ", cut


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


async def test_the_request_is_the_one_the_sdk_would_send():
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, content=b"data: [DONE]\n\n")

    await _capture_sdk(handler)
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = OpenAIChatModel(model="m", api_key="k", base_url="http://llm/v1", http_client=client)
    try:
        async for _ in model.stream([Message("user", "hi")], tools=(), call=CALL):
            pass
    finally:
        await model.aclose()
    theirs, ours = sent
    assert (ours.method, ours.url) == (theirs.method, theirs.url)
    assert sorted(ours.headers.multi_items()) == sorted(theirs.headers.multi_items())
    assert orjson.loads(ours.content) == orjson.loads(theirs.content)
    assert ours.extensions["timeout"] == theirs.extensions["timeout"]


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
        model = OpenAIChatModel(model="m", api_key="k", base_url=f"http://{address}/v1")
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
async def test_an_error_answer_is_the_exception_the_sdk_raises(status: int, content: bytes):
    import openai

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=content)

    theirs = await _capture_sdk(handler)
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = OpenAIChatModel(
        model="m", api_key="k", base_url="http://llm/v1", max_retries=0, http_client=client
    )
    try:
        with pytest.raises(ModelError) as failure:  # ContextTooLong is one
            async for _ in model.stream([Message("user", "hi")], tools=(), call=CALL):
                pass
    finally:
        await model.aclose()
    ours = failure.value.__cause__
    assert isinstance(theirs, openai.APIStatusError) and isinstance(ours, openai.APIStatusError)
    assert type(ours) is type(theirs)
    assert (ours.message, ours.body, ours.status_code) == (
        theirs.message,
        theirs.body,
        theirs.status_code,
    )
