"""Readable text from a fetched body: trafilatura for HTML, plain decoding for the rest.

Synchronous and CPU-bound on purpose: web_fetch runs it in a killable worker process
(agent/tools/extractor.py), never on the event loop or in a shared thread pool.
"""

from __future__ import annotations

import codecs
import html
import re

import trafilatura

__all__ = ["extract_text"]

_HTML_TYPES = {"text/html", "application/xhtml+xml"}
_HEAD_BYTES = 32_768  # the title and first heading are looked for in this much of the page
_TAG = re.compile(r"<[^>]+>")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([\w.:-]+)""", re.IGNORECASE)


def extract_text(
    body: bytes, content_type: str, charset: str | None, url: str
) -> tuple[str | None, str]:
    """Return (title or None, main text) of the body; never raise on odd input."""
    is_html = content_type in _HTML_TYPES or (not content_type and body.lstrip()[:1] == b"<")
    if not is_html:
        return None, _decode(body, charset).strip()
    markup = _decode(body, charset or _meta_charset(body))
    text = trafilatura.extract(
        markup,
        url=url,
        include_comments=False,
        include_tables=True,
        favor_recall=True,
        deduplicate=False,
    )
    if not text:
        text = trafilatura.html2txt(markup)
    return _title(body, charset), (text or "").strip()


def _decode(body: bytes, charset: str | None) -> str:
    encoding = "utf-8"
    if charset:
        try:
            encoding = codecs.lookup(charset).name
        except LookupError:
            pass
    return body.decode(encoding, errors="replace")


def _meta_charset(body: bytes) -> str | None:
    match = _META_CHARSET.search(body[:4096])
    return match.group(1).decode("ascii", "replace") if match else None


def _title(body: bytes, charset: str | None) -> str | None:
    """The page's <title>, else its first <h1>, as plain text, from the page's first 32 KB.

    Plain `find`s, not a regular expression: each scan is linear whatever the markup (a
    lazy `<title>(.*?)</title>` is quadratic on a page of repeated `<title>` tags).
    """
    head = body[:_HEAD_BYTES]
    lowered = head.lower()
    for tag in (b"title", b"h1"):
        raw = _element(head, lowered, tag)
        if raw is not None:
            markup = _decode(raw, charset or _meta_charset(body))
            text = " ".join(html.unescape(_TAG.sub("", markup)).split())
            if text:
                return text
    return None


def _element(head: bytes, lowered: bytes, tag: bytes) -> bytes | None:
    """The content of the first `<tag ...>...</tag>` in `head`, or None."""
    start = 0
    while True:
        start = lowered.find(b"<" + tag, start)
        if start < 0:
            return None
        after = start + len(tag) + 1
        if after < len(lowered) and lowered[after : after + 1] in b" \t\r\n/>":
            break
        start = after
    opened = lowered.find(b">", after)
    if opened < 0:
        return None
    closed = lowered.find(b"</" + tag, opened)
    return head[opened + 1 : closed] if closed >= 0 else None
