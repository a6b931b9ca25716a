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
