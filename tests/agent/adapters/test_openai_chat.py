"""OpenAIChatModel reads SSE itself: text read while the caller was busy goes on as one piece."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

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
