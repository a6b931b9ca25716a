"""Content-Encoding decoding that can never produce more than a cap.

httpx inflates each network chunk whole before its caller sees a byte: a 1.8 KB page of
gzipped-twice zeros became gigabytes on the event loop before web_fetch's size cap was
checked. Here web_fetch reads the raw body and decodes it itself, with `decompressobj`'s
`max_length` bounding each step, so the decoded page stops at the cap however well it
compresses, and each step inflates a small slice, so the event loop is never held for long.

One coding at most (`gzip`, `x-gzip` or `deflate`; `identity` is none): stacked codings
(`gzip, gzip`) are refused, since no honest server needs them and each layer multiplies
the ratio.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

__all__ = ["DecodedBody", "UnsupportedEncoding", "read_decoded"]

# Bytes inflated per step; between steps the event loop runs other tasks.
_STEP = 256 * 1024
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class UnsupportedEncoding(ValueError):
    """The body's Content-Encoding is stacked or unknown; the message says which."""


class DecodedBody:
    """A body decoded up to a cap: `data`, and `truncated` when more was there."""

    __slots__ = ("data", "truncated")

    def __init__(self, data: bytes, truncated: bool) -> None:
        self.data = data
        self.truncated = truncated


def coding_of(header: str) -> str | None:
    """The one coding `header` names (None for none); raise UnsupportedEncoding otherwise."""
    codings = [c.strip().lower() for c in header.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if len(codings) > 1:
        raise UnsupportedEncoding(f"stacked content encodings ({', '.join(codings)}) are refused")
    if not codings:
        return None
    if codings[0] not in _WBITS:
        raise UnsupportedEncoding(f"unsupported content encoding {codings[0][:40]!r}")
    return codings[0]


async def read_decoded(raw: AsyncIterator[bytes], encoding: str, cap: int) -> DecodedBody:
    """Read `raw` (the body as sent) and decode it, stopping at `cap` decoded bytes (and at
    `cap` bytes read: a body that inflates to nothing is no excuse to read forever).

    Raise UnsupportedEncoding for a stacked or unknown coding, zlib.error for a corrupt body.
    """
    coding = coding_of(encoding)
    decoder = _Inflater(coding) if coding else None
    out = bytearray()
    received = 0
    async for chunk in raw:
        received += len(chunk)
        if decoder is None:
            out += chunk[: cap + 1 - len(out)]
        else:
            await decoder.feed(chunk, out, cap)
        if len(out) > cap or received > cap:
            return DecodedBody(bytes(out[:cap]), truncated=True)
    if decoder is not None:
        decoder.finish(out, cap)
    return DecodedBody(bytes(out[:cap]), truncated=len(out) > cap)


class _Inflater:
    """One zlib stream inflated in bounded steps; `deflate` may be raw (no zlib header)."""

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._zlib = zlib.decompressobj(_WBITS[coding])
        self._started = False
        self._ended = False

    async def feed(self, chunk: bytes, out: bytearray, cap: int) -> None:
        pending = chunk
        while pending and not self._ended and len(out) <= cap:
            room = min(_STEP, cap - len(out) + 1)  # one byte past the cap tells "truncated"
            try:
                out += self._zlib.decompress(pending, room)
            except zlib.error:
                if self._started or self._coding != "deflate":
                    raise
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some send
                out += self._zlib.decompress(pending, room)
            self._started = True
            pending = self._zlib.unconsumed_tail
            self._ended = self._zlib.eof  # trailing bytes after the stream are ignored
            if pending:
                await asyncio.sleep(0)  # a slice inflated: let every other task run

    def finish(self, out: bytearray, cap: int) -> None:
        if not self._ended:
            out += self._zlib.flush(max(1, cap - len(out) + 1))
