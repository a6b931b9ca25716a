"""Text a small model copied from its own instructions instead of writing its own.

Small models (0.5B to 3B) often fill a control block with a line of the prompt: a sentence of
guidance ("check facts, times and anything that can change with a tool before you answer") or
the JSON example's placeholder. Shown as the step's reasoning it reads as if the agent said
it, so where a block's text only stands in for text the model did not write, a copy is left
out.
"""

from __future__ import annotations

import re

__all__ = ["copied_from"]

_WORD = re.compile(r"[a-z0-9]+")
_MIN_WORDS = 4  # "Done." or "Checking the time." may well be in a prompt and still be meant
_SHARE = 0.6  # of the text's word trigrams found in the prompt


def copied_from(text: str, *sources: str) -> bool:
    """True when most of `text`'s word trigrams appear in `sources` (a text of fewer than
    four words is never judged a copy)."""
    words = _WORD.findall(text.lower())
    if len(words) < _MIN_WORDS:
        return False
    source_words = _WORD.findall(" ".join(sources).lower())
    grams = set(zip(words, words[1:], words[2:], strict=False))
    source_grams = set(zip(source_words, source_words[1:], source_words[2:], strict=False))
    return len(grams & source_grams) >= _SHARE * len(grams)


class EchoGate:
    """Holds the first words of a phase's streamed text until they show whether the model is
    writing its own words or reading its instructions back (`copied_from`); a copy is never
    shown, and nothing after it in that phase either. Own words pass on at once after that:
    as soon as four words share no three-word run with the instructions, or after eight."""

    _HOLD_WORDS = 8

    def __init__(self, *sources: str) -> None:
        self._sources = sources
        words = _WORD.findall(" ".join(sources).lower())
        self._grams = set(zip(words, words[1:], words[2:], strict=False))
        self._held = ""
        self._decided = False
        self.copy = False

    def feed(self, text: str) -> str:
        """What of `text` may be shown now."""
        if self._decided:
            return "" if self.copy else text
        self._held += text
        words = _WORD.findall(self._held.lower())
        if len(words) < _MIN_WORDS:
            return ""
        if len(words) <= self._HOLD_WORDS and self._shares_a_run(words):
            return ""
        return self._decide()

    def finish(self) -> str:
        """The end of the phase's text: what is still held, unless it is a copy."""
        return "" if self._decided else self._decide()

    def _shares_a_run(self, words: list[str]) -> bool:
        return any(g in self._grams for g in zip(words, words[1:], words[2:], strict=False))

    def _decide(self) -> str:
        self._decided = True
        self.copy = copied_from(self._held, *self._sources)
        held, self._held = self._held, ""
        return "" if self.copy else held
