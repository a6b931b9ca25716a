"""SubscriberQueue: the frames waiting for one subscriber (a `/ws` socket, an AG-UI stream),
bounded in number and in characters (a frame can be near a megabyte, so a count alone bounds
little).

A run never waits for a subscriber: `put` only queues, and a subscriber that reads too slowly
overflows its queue instead of slowing the run or growing memory. What then happens to the
frames already queued is the subscriber's policy:

- `"drop"`: they are dropped at once (a socket is closed with 1013 and resumes from the store);
- `"end"`: they are still read, then the queue ends (an AG-UI stream says why, then closes).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, Literal, TypeVar

__all__ = ["Overflow", "SubscriberQueue"]

T = TypeVar("T")
Overflow = Literal["drop", "end"]


class SubscriberQueue(Generic[T]):
    """Each frame's text (what is counted, and sent) with what its subscriber keeps of it."""

    def __init__(self, max_items: int, max_chars: int, overflow: Overflow) -> None:
        self._items: deque[tuple[str, T]] = deque()
        self._max_items = max_items
        self._max_chars = max_chars
        self._policy = overflow
        self._chars = 0
        self._ready = asyncio.Event()
        self._ended = False
        self.overflowed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return iter(self._items)

    @property
    def chars(self) -> int:
        """Characters queued and not yet taken."""
        return self._chars

    def put(self, text: str, item: T) -> None:
        """Queue `text` with `item`; past either bound the queue overflows instead (and after
        it, nothing more is queued)."""
        if self.overflowed.is_set():
            return
        if len(self._items) >= self._max_items or self._chars + len(text) > self._max_chars:
            self.overflow()
            return
        self._items.append((text, item))
        self._chars += len(text)
        self._ready.set()

    def overflow(self) -> None:
        """The subscriber fell behind: take nothing more, and apply the policy."""
        if self.overflowed.is_set():
            return
        self.overflowed.set()
        if self._policy == "drop":
            self._items.clear()
            self._chars = 0
        self._ready.set()

    def end(self) -> None:
        """Nothing more is expected: `get` returns None once what is queued is taken."""
        self._ended = True
        self._ready.set()

    def keep(self, wanted: Callable[[T], bool]) -> int:
        """Leave out the queued frames whose item is not `wanted`; how many were left out."""
        kept = deque(entry for entry in self._items if wanted(entry[1]))
        left_out = len(self._items) - len(kept)
        self._items = kept
        self._chars = sum(len(text) for text, _ in kept)
        return left_out

    async def get(self) -> tuple[str, T] | None:
        """The next frame, waiting for one; None once the queue has ended (`end`, or an
        overflow under the `"end"` policy) and is empty. Returns at once, without yielding to
        the event loop, while frames are queued."""
        while not self._items:
            if self._ended or (self._policy == "end" and self.overflowed.is_set()):
                return None
            self._ready.clear()
            await self._ready.wait()
        text, item = self._items.popleft()
        self._chars -= len(text)
        return text, item
