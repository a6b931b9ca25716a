"""WriteGate: a process's writes of one session never overlap each other or a lease renewal."""

from __future__ import annotations

import asyncio

import pytest

from server.storage.write_gate import WriteGate


async def test_a_renewal_waits_for_the_write_under_way_and_holds_the_next() -> None:
    gate, order = WriteGate(), []
    first_in, first_may_end = asyncio.Event(), asyncio.Event()

    async def write(name: str, hold: asyncio.Event | None = None) -> None:
        async with gate.write("s1"):
            order.append(f"{name} in")
            if hold is not None:
                first_in.set()
                await hold.wait()
            order.append(f"{name} out")

    async def renew() -> None:
        async with gate.renewal():
            order.append("renewal")

    first = asyncio.create_task(write("first", first_may_end))
    await first_in.wait()
    renewal = asyncio.create_task(renew())
    second = asyncio.create_task(write("second"))  # starts after the renewal has begun
    first_may_end.set()
    await asyncio.wait_for(asyncio.gather(first, renewal, second), 5)
    assert order == ["first in", "first out", "renewal", "second in", "second out"]


async def test_a_renewal_cancelled_while_waiting_lets_writes_through() -> None:
    gate = WriteGate()
    holding = asyncio.Event()

    async def long_write() -> None:
        async with gate.write("s1"):
            holding.set()
            await asyncio.Event().wait()

    writer = asyncio.create_task(long_write())
    await holding.wait()

    entering = asyncio.Event()

    async def renew() -> None:
        entering.set()  # the waiting test runs once this task is parked in the gate
        async with gate.renewal():
            pass

    renewal = asyncio.create_task(renew())
    await entering.wait()
    renewal.cancel()
    with pytest.raises(asyncio.CancelledError):
        await renewal
    async with asyncio.timeout(5), gate.write("s2"):
        pass  # not held behind the renewal that gave up
    writer.cancel()


async def test_writes_of_one_session_take_turns_and_other_sessions_go_by() -> None:
    gate, order = WriteGate(), []
    first_in, first_may_end = asyncio.Event(), asyncio.Event()

    async def write(session_id: str, name: str, hold: asyncio.Event | None = None) -> None:
        async with gate.write(session_id):
            order.append(f"{name} in")
            if hold is not None:
                first_in.set()
                await hold.wait()
            order.append(f"{name} out")

    first = asyncio.create_task(write("s1", "first", first_may_end))
    await first_in.wait()
    same = asyncio.create_task(write("s1", "same session"))
    other = asyncio.create_task(write("s2", "other session"))
    await asyncio.wait_for(other, 5)  # not held behind s1's write
    first_may_end.set()
    await asyncio.wait_for(asyncio.gather(first, same), 5)
    assert order == [
        "first in",
        "other session in",
        "other session out",
        "first out",
        "same session in",
        "same session out",
    ]
