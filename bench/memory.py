"""5. Memory: RSS per idle connection (vs the bare endpoint's) and per active run.

Fresh processes (a heap that served earlier benchmarks has free room and would hide
growth). Connections are added in equal increments, each one a repetition: ΔRSS / count.
Idle agent connections have received their `session` frame; idle baseline connections are
accepted and wait. Active runs are then started on agent connections already counted as
idle, against a fake that streams one chunk and holds the stream open, so each run holds
its task, its LLM HTTP connection and its stream: ΔRSS / runs is what a run adds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.context import Bench, connect_many
from bench.procs import Proc
from bench.stats import summarize
from bench.wsclient import WSConn, connect, kind_of

__all__ = ["run"]

SETTLE_S = 1.0
WARM = 20


async def _idle(proc: Proc, path: str, count: int, agent: bool) -> list[WSConn]:
    conns = await connect_many(proc.address, count, lambda: connect(proc.address, path))
    if agent:
        await asyncio.gather(*(c.recv_json() for c in conns))
    return conns


async def _until(conn: WSConn, wanted: str) -> None:
    while True:
        payload, _ = await conn.recv(60)
        kind = kind_of(payload)
        if kind == wanted:
            return
        if kind == "error":
            raise RuntimeError(f"waiting for {wanted}: {payload[:300]!r}")


async def _increments(proc: Proc, reps: int, add: Any) -> list[float]:
    """KiB of RSS per unit for each of `reps` increments made by `await add()`."""
    await asyncio.sleep(SETTLE_S)
    before = proc.rss_mib()
    out = []
    for _ in range(reps):
        units = await add()
        await asyncio.sleep(SETTLE_S)
        after = proc.rss_mib()
        out.append((after - before) * 1024 / units)
        before = after
    return out


async def _measure(bench: Bench, name: str) -> dict[str, Any]:
    sizes = bench.sizes
    agent = name != "baseline"
    proc = await bench.fresh(name, tag="_mem")
    path = "/ws" if agent else "/ws?frames=0"
    conns: list[WSConn] = []
    try:
        conns += await _idle(proc, path, WARM, agent)

        async def add_idle() -> int:
            conns.extend(await _idle(proc, path, sizes.idle_conns, agent))
            return sizes.idle_conns

        result: dict[str, Any] = {
            "rss_start_mib": round(proc.rss_mib(), 1),
            "idle_kib_per_conn": summarize(await _increments(proc, sizes.reps, add_idle), 1),
        }
        if agent:
            pool = iter(conns[WARM:])
            active: list[WSConn] = []

            async def add_runs() -> int:
                batch = [next(pool) for _ in range(sizes.active_runs)]
                for conn in batch:
                    conn.send_json({"type": "chat", "content": "Hold on.", "agent_max_steps": 1})
                await asyncio.gather(*(_until(c, "agent_reason_delta") for c in batch))
                active.extend(batch)
                return sizes.active_runs

            await bench.llm_default({"kind": "hang"})
            result["active_kib_per_run"] = summarize(
                await _increments(proc, sizes.reps, add_runs), 1
            )
            for conn in active:
                conn.send_json({"type": "agent_control", "action": "stop"})
            await asyncio.gather(*(_until(c, "response_complete") for c in active))
            await bench.llm_default({"kind": "steps"})
        result["rss_end_mib"] = round(proc.rss_mib(), 1)
        return result
    finally:
        for conn in conns:
            conn.close()
        await asyncio.to_thread(proc.stop)


async def run(bench: Bench) -> dict[str, Any]:
    out = {"baseline": await _measure(bench, "baseline"), "agent": await _measure(bench, "agent")}
    base = out["baseline"]["idle_kib_per_conn"]["reps"]
    mine = out["agent"]["idle_kib_per_conn"]["reps"]
    out["idle_ratio"] = summarize(
        (a / b if b > 0 else None) for a, b in zip(mine, base, strict=False)
    )
    return out
