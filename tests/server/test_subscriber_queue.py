"""The one bounded queue of a subscriber's frames (server/subscriber_queue.py), which a `/ws`
connection and an AG-UI stream both use, each with its overflow policy (fast, no sockets)."""

from __future__ import annotations

import asyncio

from server.agui_stream import Stream
from server.connection import Connection
from server.subscriber_queue import SubscriberQueue


async def test_it_is_bounded_in_number_and_in_characters() -> None:
    by_number: SubscriberQueue[int] = SubscriberQueue(2, 1_000, "drop")
    by_number.put("a", 1)
    by_number.put("b", 2)
    assert not by_number.overflowed.is_set()
    by_number.put("c", 3)
    assert by_number.overflowed.is_set()

    by_chars: SubscriberQueue[int] = SubscriberQueue(100, 10, "drop")
    by_chars.put("x" * 6, 1)
    assert await by_chars.get() == ("x" * 6, 1)  # taken: no longer counted
    by_chars.put("x" * 6, 2)
    assert by_chars.chars == 6 and not by_chars.overflowed.is_set()
    by_chars.put("x" * 5, 3)
    assert by_chars.overflowed.is_set()


async def test_drop_leaves_out_what_was_queued_and_waits_for_the_end() -> None:
    queue: SubscriberQueue[int] = SubscriberQueue(1, 1_000, "drop")
    queue.put("a", 1)
    queue.put("b", 2)
    assert (len(queue), queue.chars) == (0, 0)
    queue.put("c", 3)  # after an overflow nothing more is queued
    assert len(queue) == 0
    waiting = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not waiting.done()  # the subscriber is closed by its owner, not by the queue
    queue.end()
    assert await asyncio.wait_for(waiting, 5) is None


async def test_end_gives_what_was_queued_then_ends() -> None:
    queue: SubscriberQueue[int] = SubscriberQueue(2, 1_000, "end")
    queue.put("a", 1)
    queue.put("b", 2)
    queue.put("c", 3)
    assert queue.overflowed.is_set()
    assert [await queue.get() for _ in range(3)] == [("a", 1), ("b", 2), None]


async def test_keep_leaves_out_frames_and_recounts() -> None:
    queue: SubscriberQueue[str] = SubscriberQueue(10, 1_000, "drop")
    for kind in ("delta", "tool", "delta"):
        queue.put(kind, kind)
    assert queue.keep(lambda kind: kind != "delta") == 2
    assert (list(queue), queue.chars) == ([("tool", "tool")], 4)


async def test_a_socket_and_an_agui_stream_share_it_each_with_its_policy() -> None:
    conn = Connection(None, 4, 1_000)  # type: ignore[arg-type]  # nothing is sent here
    stream = Stream(4, 1_000)
    for i in range(5):
        conn.send(f"frame {i}")
        stream.deliver(f"frame {i}", None)
    assert conn.overflowed.is_set() and stream.overflowed
    stream.finish(1001)
    taken = [await stream.take() for _ in range(5)]
    assert [item and item[0] for item in taken] == [f"frame {i}" for i in range(4)] + [None]
