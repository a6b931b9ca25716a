"""Readable text from a fetched body: trafilatura for HTML, plain decoding for the rest.

Synchronous and CPU-bound on purpose: web_fetch runs it in a worker thread.
"""

from __future__ import annotations

import codecs
import html
import re

import trafilatura

__all__ = ["extract_text"]

_HTML_TYPES = {"text/html", "application/xhtml+xml"}
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_H1 = re.compile(rb"<h1[^>]*>(.*?)</h1\s*>", re.IGNORECASE | re.DOTALL)
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
    """The page's <title>, else its first <h1>, as plain text."""
    for pattern in (_TITLE, _H1):
        match = pattern.search(body[:200_000])
        if match:
            raw = _decode(match.group(1), charset or _meta_charset(body))
            text = " ".join(html.unescape(_TAG.sub("", raw)).split())
            if text:
                return text
    return None
