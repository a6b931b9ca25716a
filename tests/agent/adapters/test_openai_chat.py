"""OpenAIChatModel reads SSE itself: the text of one network read goes on as one piece."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2 as httpx  # the HTTP client the openai SDK is built on
import orjson

from agent.adapters.openai_chat import OpenAIChatModel
from agent.messages import Message
from agent.ports import CallInfo, ModelTurn, Thinking

CALL = CallInfo("s", "r", 1, "reason")


def _event(delta: dict[str, object]) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"delta": delta}]}) + b"\n\n"


class _Reads(httpx.AsyncByteStream):
    """A response body that arrives in the given network reads."""

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = reads

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for data in self._reads:
            yield data


async def _stream(reads: list[bytes]) -> list[str | Thinking | ModelTurn]:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_Reads(reads)
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = OpenAIChatModel(model="m", api_key="k", base_url="http://llm/v1", http_client=client)
    try:
        return [
            item
            async for item in model.stream([Message("user", "hi")], tools=(), call=CALL)
        ]
    finally:
        await model.aclose()


async def test_the_text_of_one_read_is_one_piece_and_nothing_is_lost():
    first = b"".join(_event({"content": f"t{i} "}) for i in range(50))
    second = _event({"content": "last"})
    split = second[:9], second[9:] + b"data: [DONE]\n\n"  # an event cut across two reads
    items = await _stream([first, *split])
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
