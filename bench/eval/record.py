"""What one run of a task cost and showed: calls, tokens, times, and the text a user saw.

`echoes` finds sentences of our own texts in that text: a model copying its instructions or
a tool's description into what the person reads (the loop's prompts are in prompts/*.md; the
tools' descriptions are added with `add_echo_sources`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from bench.procs import ROOT

__all__ = ["Record", "add_echo_sources", "echoes"]

_VISIBLE_FULL = ("agent_reason", "agent_observe", "chat_response")
_VISIBLE_DELTA = ("agent_reason_delta", "agent_observe_delta", "agent_answer_delta", "chat_delta")


@dataclass
class Record:
    steps: int = 0
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_answer_s: float | None = None  # from the message sent to the first answer token
    shown: list[str] = field(default_factory=list)  # what the user read, whole texts
    longest_phase_chars: int = 0
    longest_phase_s: float = 0.0
    _streams: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    _phase_started: float = 0.0

    def event(self, frame: dict[str, Any], sent: float) -> None:
        """Take one event of our server's stream."""
        kind = frame.get("update_type") or frame["type"]
        now = time.time()
        if kind in ("agent_turn_start", "agent_reason", "agent_observe", "tool_start"):
            self._phase_ended(now)
        if kind in _VISIBLE_DELTA:
            if kind in ("agent_answer_delta", "chat_delta") and self.first_answer_s is None:
                self.first_answer_s = now - sent
            self._streams.setdefault((kind, frame.get("step", 0)), []).append(frame["delta"])
        elif kind in _VISIBLE_FULL:
            self.shown.append(frame["content"])
        elif kind == "agent_request_input":
            self.shown.append(frame["question"])
        elif kind == "agent_completion":
            self.shown.append(frame["final_answer"])
            self._phase_ended(now)

    def _phase_ended(self, now: float) -> None:
        if self._phase_started:
            self.longest_phase_s = max(self.longest_phase_s, now - self._phase_started)
        self._phase_started = now

    def usage(self, usage: dict[str, Any], steps: int) -> None:
        self.steps += steps
        self.model_calls += int(usage.get("llm_calls", 0))
        self.prompt_tokens += int(usage.get("prompt_tokens", 0))
        self.completion_tokens += int(usage.get("completion_tokens", 0))

    def finish(self) -> None:
        streamed = ["".join(parts) for parts in self._streams.values()]
        self.shown.extend(streamed)
        self.longest_phase_chars = max((len(t) for t in self.shown), default=0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "model_calls": self.model_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "first_answer_s": self.first_answer_s,
            "longest_phase_chars": self.longest_phase_chars,
            "longest_phase_s": round(self.longest_phase_s, 2),
            "echoes": echoes(self.shown),
        }


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


_SOURCES: set[str] = set()  # texts of ours besides prompts/*.md: the tools' descriptions


def add_echo_sources(texts: list[str]) -> None:
    """Count `texts` as ours too (a tool's description copied is an echo)."""
    _SOURCES.update(texts)
    _prompt_shingles.cache_clear()


@cache
def _prompt_shingles(size: int = 8) -> frozenset[tuple[str, ...]]:
    """Every run of `size` words of our prompts' and tools' sentences (placeholders left
    out), and every whole sentence of 5 to `size` words."""
    found: set[tuple[str, ...]] = set()
    sources = [p.read_text() for p in sorted((ROOT / "prompts").glob("*.md"))]
    for source in [*sources, *sorted(_SOURCES)]:
        text = re.sub(r"\$\w+", " . ", source)
        text = re.sub(r"```.*?```|`[^`]*`", " . ", text, flags=re.S)
        text = re.sub(r"\n(?!\n|\s*[-#*\d])", " ", text)  # a wrapped line goes on
        for sentence in re.split(r"[.!?:\n]+", text):
            words = _words(sentence)
            if 5 <= len(words) <= size:
                found.add(tuple(words))
            for i in range(len(words) - size + 1):
                found.add(tuple(words[i : i + size]))
    return frozenset(found)


def echoes(texts: list[str]) -> list[str]:
    """The prompt sentences (or 8-word runs of them) found in `texts`."""
    shingles = _prompt_shingles()
    lengths = sorted({len(s) for s in shingles})
    hits: set[str] = set()
    for text in texts:
        words = _words(text)
        for size in lengths:
            for i in range(len(words) - size + 1):
                if tuple(words[i : i + size]) in shingles:
                    hits.add(" ".join(words[i : i + size]))
    return sorted(hits)
