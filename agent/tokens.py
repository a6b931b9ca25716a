"""Token counting: exact for OpenAI model families, a calibrated estimate otherwise.

tiktoken downloads its encoding files on first use, which fails on machines without internet.
`bpe-openai` ships the o200k/cl100k tables inside the package, so exact counts work offline.
For other models (Llama, Mistral, Qwen…) the estimate is calibrated against o200k and cl100k
on English prose, code, JSON, Chinese, Japanese and Russian, and errs on the high side so a
budget is not overrun: see tests/agent/test_tokens.py for the measured bounds.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import threading
import warnings
from functools import lru_cache
from typing import Any, Protocol

from agent.messages import Message

__all__ = [
    "EstimatedCounter",
    "ExactCounter",
    "LazyExactCounter",
    "TokenCounter",
    "counter_for_model",
    "message_tokens",
    "message_upper_bound",
]

# counted by runs: a long CJK text is a few matches, not one per character
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef]+")
# every byte but ASCII letters and space: deleting them from a text's ASCII leaves its
# letters and spaces (a regex `findall` of each costs 40 times more on a long text)
_NOT_WORDISH = bytes(b for b in range(256) if not (b < 128 and (chr(b).isalpha() or b == 32)))
_MESSAGE_OVERHEAD = 4  # role and separators, as the chat format adds them


class TokenCounter(Protocol):
    @property
    def exact(self) -> bool: ...

    def count(self, text: str) -> int: ...


class EstimatedCounter:
    """Characters per token by kind: letters and spaces ~4.2, ASCII digits and punctuation
    ~1.6 (JSON and code are dense), CJK ~1.1 tokens each, other scripts ~0.55 each."""

    exact = False

    def count(self, text: str) -> int:
        if not text:
            return 0
        ascii_text = text.encode("ascii", "ignore")
        ascii_chars = len(ascii_text)
        wordish = len(ascii_text.translate(None, _NOT_WORDISH))
        cjk = sum(map(len, _CJK_RUN.findall(text))) if ascii_chars < len(text) else 0
        other = len(text) - ascii_chars - cjk
        return int(wordish / 4.2 + (ascii_chars - wordish) / 1.6 + cjk * 1.1 + other * 0.55) + 1


class ExactCounter:
    """A real BPE encoding (o200k_base or cl100k_base). Very long texts (which the encoder
    refuses, and which would cost milliseconds per count) are estimated instead."""

    exact = True
    _EXACT_UP_TO = 100_000  # characters

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding
        self._fallback = EstimatedCounter()

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) > self._EXACT_UP_TO:
            return self._fallback.count(text)
        try:
            return len(self._encoding.encode(text))
        except ValueError:
            return self._fallback.count(text)


_O200K = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")
_CL100K = ("gpt-4", "gpt-3.5", "text-embedding-3")


class LazyExactCounter:
    """An ExactCounter whose tables (~135 MiB for o200k) load on the first count, not at
    startup: most conversations fit their window by byte size and are never counted.

    Loading takes about half a second of CPU. Under an event loop it runs in a thread, so no
    session stalls that long: until the tables are in, counts are estimates and `exact` is
    False. If the tables cannot be loaded, it goes on estimating."""

    def __init__(self, encoding: str) -> None:
        self._name = encoding
        self._counter: TokenCounter | None = None
        self._loading: threading.Thread | None = None
        self._lock = threading.Lock()
        self._estimate = EstimatedCounter()

    @property
    def exact(self) -> bool:
        """Whether a count made now is exact."""
        counter = self._counter
        return counter.exact if counter is not None else False

    @property
    def loaded(self) -> bool:
        return self._counter is not None

    def count(self, text: str) -> int:
        counter = self._counter
        if counter is not None:
            return counter.count(text)
        if self._loading is None:
            if not _in_event_loop():
                self.load()
                return self.count(text)
            self._loading = threading.Thread(target=self.load, name="token-tables", daemon=True)
            self._loading.start()
        return self._estimate.count(text)

    def load(self) -> None:
        """Load the tables now, in the caller's thread, unless they are in already."""
        with self._lock:
            if self._counter is None:
                self._counter = _load(self._name)


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# bpe_openai loads its tables with a deprecated importlib API. Filtered for that package
# once, here: `warnings.catch_warnings` around the load is not thread-safe, and it runs in a
# thread (LazyExactCounter).
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"bpe_openai(\.|$)")


def _load(encoding: str) -> TokenCounter:
    try:
        import bpe_openai  # type: ignore[import-untyped]

        return ExactCounter(bpe_openai.get_encoding(encoding))
    except Exception:  # noqa: BLE001 - no tables here: estimate instead of failing a run
        return EstimatedCounter()


@lru_cache(maxsize=16)
def counter_for_model(model: str) -> TokenCounter:
    """The best counter available for `model` (exact when the encoding is known); its tables
    load when it first counts."""
    name = model.lower().rsplit("/", 1)[-1]
    encoding = None
    if name.startswith(_O200K):
        encoding = "o200k_base"
    elif name.startswith(_CL100K):
        encoding = "cl100k_base"
    if encoding is None or importlib.util.find_spec("bpe_openai") is None:
        return EstimatedCounter()
    return LazyExactCounter(encoding)


def message_tokens(counter: TokenCounter, message: Message) -> int:
    total = _MESSAGE_OVERHEAD + counter.count(message.content)
    for call in message.tool_calls:
        total += counter.count(call.name) + counter.count(call.arguments) + _MESSAGE_OVERHEAD
    return total


def message_upper_bound(message: Message) -> int:
    """At least `message_tokens` for any counter here, without counting: a byte-level BPE token
    is at least one UTF-8 byte, and the estimate stays below one token per byte."""
    total = _MESSAGE_OVERHEAD + _utf8_size(message.content)
    for call in message.tool_calls:
        total += _utf8_size(call.name) + _utf8_size(call.arguments) + _MESSAGE_OVERHEAD
    return total


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
