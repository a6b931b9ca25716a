"""RepeatWatch: notices a reply that goes round in circles, in any phase.

A small model can write the same few lines until the token limit (minutes on a CPU, holding
the model server's slot all the while). Two signs, cheap to check per piece of text:
- the last three complete lines (each of some length) have each been written at least
  twice before: a block written for the third time;
- a long reply without line breaks whose last 120 characters already stand twice earlier
  in it (checked each 200 characters, over its last 8,000).
One line repeated among others (code, a table) is not a loop.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["RepeatWatch"]

_MIN_LINE = 16  # shorter lines (a brace, "---") repeat in ordinary text
_BLOCK = 3  # lines in a row that must all be repeats
_TIMES = 3  # how often each of them has been written, this time included
_TAIL = 120
_CHECK_EVERY = 200
_WINDOW = 8000


class RepeatWatch:
    def __init__(self) -> None:
        self._seen: Counter[str] = Counter()
        self._recent: list[bool] = []  # per complete long line: written _TIMES times by now
        self._line = ""
        self._window = ""
        self._unchecked = 0

    def feed(self, piece: str) -> bool:
        """Take the next piece of the reply; True once it is going round in circles."""
        if not piece:
            return False
        *complete, self._line = (self._line + piece).split("\n")
        for line in complete:
            key = " ".join(line.split()).lower()
            if len(key) < _MIN_LINE:
                continue
            self._seen[key] += 1
            self._recent = [*self._recent[-(_BLOCK - 1) :], self._seen[key] >= _TIMES]
            if len(self._recent) == _BLOCK and all(self._recent):
                return True
        self._window = (self._window + piece)[-_WINDOW:]
        self._unchecked += len(piece)
        if self._unchecked < _CHECK_EVERY or len(self._window) < _TAIL * _TIMES:
            return False
        self._unchecked = 0
        tail = self._window[-_TAIL:]
        return self._window.count(tail) >= _TIMES
