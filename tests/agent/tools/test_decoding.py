"""Bounded Content-Encoding decoding (agent/tools/decoding.py)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator

import pytest

from agent.tools.decoding import UnsupportedEncoding, read_decoded

PAGE = b"<p>" + b"espresso and crema " * 2000 + b"</p>"


async def chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def squeezed(data: bytes, wbits: int) -> bytes:
    squeeze = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return squeeze.compress(data) + squeeze.flush()


@pytest.mark.parametrize(
    ("coding", "wbits"),
    [("gzip", 31), ("x-gzip", 31), ("deflate", 15), ("deflate", -15), ("identity, gzip", 31)],
)
async def test_each_coding_decodes_whole_below_the_cap(coding: str, wbits: int) -> None:
    body = await read_decoded(chunks(squeezed(PAGE, wbits)), coding, len(PAGE))
    assert body.data == PAGE and body.truncated is False


async def test_a_plain_body_stops_at_the_cap() -> None:
    body = await read_decoded(chunks(PAGE), "", 1000)
    assert body.data == PAGE[:1000] and body.truncated is True
    whole = await read_decoded(chunks(PAGE), "identity", len(PAGE))
    assert whole.data == PAGE and whole.truncated is False


async def test_a_compressed_body_stops_at_the_cap_however_it_is_cut() -> None:
    for size in (1, 7, 65536):
        body = await read_decoded(chunks(squeezed(PAGE, 31), size), "gzip", 5000)
        assert body.data == PAGE[:5000] and body.truncated is True


@pytest.mark.parametrize("coding", ["gzip, gzip", "deflate,gzip", "br", "zstd", "compress"])
async def test_stacked_and_unknown_codings_are_refused(coding: str) -> None:
    with pytest.raises(UnsupportedEncoding):
        await read_decoded(chunks(squeezed(PAGE, 31)), coding, 10_000)


async def test_a_corrupt_body_raises_zlib_error() -> None:
    with pytest.raises(zlib.error):
        await read_decoded(chunks(b"not gzip at all" * 10), "gzip", 10_000)
