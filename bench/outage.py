"""9. A database stall: the pause a client sees, and what the runs come to.

A server process on FerretDB streams `SESSIONS` runs (a chunk every 20 ms). Once each has begun,
FerretDB is paused with SIGSTOP for `STALL_S` (below `storage.outage_tolerance_s`, 30 s), then
resumed. For each client: the longest wait between two frames (the pause it saw: the stall,
plus the time the store and the run take to catch up), whether its `seq`s stayed consecutive,
and how its run ended. The same with a SQLite file whose write lock another process holds
(`BEGIN IMMEDIATE`) for `STALL_S`.

    python -m bench --only outage
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from bench.context import Bench
from bench.replicas import start_server
from bench.storage import NO_FERRETDB, ferretdb_process
from bench.wsclient import WSConn, connect, kind_of

__all__ = ["run"]

SESSIONS = 5
STALL_S = 8.0
STREAM = {"kind": "slow", "delay_s": 0.02, "chunks": 600}  # ~12 s of Reason
CHAT = {"type": "chat", "content": "Take your time.", "agent_max_steps": 1}

Fault = Callable[[], Awaitable[None]]


async def run(bench: Bench) -> dict[str, Any]:
    return {"mongodb": await _on_ferretdb(bench), "sqlite": await _on_sqlite(bench)}


async def _on_ferretdb(bench: Bench) -> dict[str, Any]:
    async with ferretdb_process(bench) as database:
        if database is None:
            return NO_FERRETDB
        env = {
            "AGENT__STORAGE__BACKEND": "mongodb",
            "AGENT__STORAGE__MONGODB_URI": database.uri,
            "AGENT__STORAGE__MONGODB_DATABASE": "bench_outage",
            "AGENT__STORAGE__MONGODB_TIMEOUT_MS": "1000",
        }

        async def stall() -> None:
            database.pause()
            try:
                await asyncio.sleep(STALL_S)  # the fault's length
            finally:
                database.resume()

        return await _measure(bench, env, stall)


async def _on_sqlite(bench: Bench) -> dict[str, Any]:
    path = bench.workdir / "outage.db"
    env = {"AGENT__STORAGE__SQLITE_PATH": str(path)}

    async def lock() -> None:
        holder = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n"
            "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True)\n"
            "time.sleep(float(sys.argv[2])); c.execute('ROLLBACK')\n",
            str(path),
            str(STALL_S),
            stdout=asyncio.subprocess.PIPE,
        )
        assert holder.stdout is not None
        await holder.stdout.readline()
        await holder.wait()

    return await _measure(bench, env, lock)


async def _measure(bench: Bench, store_env: dict[str, str], fault: Fault) -> dict[str, Any]:
    proc = await asyncio.to_thread(start_server, bench, "outage", store_env)
    try:
        conns = []
        for _ in range(SESSIONS):
            conn = await connect(proc.address)
            sid = str((await conn.recv_json())["session_id"])
            await bench.llm_session(sid, STREAM)
            conn.send_json(CHAT)
            conns.append(conn)
        for conn in conns:
            while kind_of((await conn.recv())[0]) != "agent_reason_delta":
                pass
        watched = [asyncio.create_task(_watch(conn)) for conn in conns]
        await fault()
        seen = await asyncio.gather(*watched)
    finally:
        for conn in conns:
            conn.close()
        await asyncio.to_thread(proc.stop)
    pauses = [pause for pause, _, _ in seen]
    return {
        "stall_s": STALL_S,
        "runs": SESSIONS,
        "finished": sum(1 for _, _, end in seen if end == "finished"),
        "gap_free": all(ok for _, ok, _ in seen),
        "pause_max_s": round(max(pauses), 2),
        "pause_min_s": round(min(pauses), 2),
    }


async def _watch(conn: WSConn) -> tuple[float, bool, str]:
    """(longest wait between two frames, seqs consecutive, how the run ended)."""
    last_at, longest, last_seq, ok, end = time.perf_counter(), 0.0, None, True, "?"
    while True:
        payload, arrived = await conn.recv(wait_s=120)
        longest, last_at = max(longest, arrived - last_at), arrived
        frame = orjson.loads(payload)
        if "seq" in frame:
            ok = ok and (last_seq is None or frame["seq"] == last_seq + 1)
            last_seq = frame["seq"]
        if frame.get("update_type") == "agent_completion":
            end = str(frame.get("stop_reason"))
        elif frame.get("type") == "error":
            end = str(frame.get("code"))
        if frame.get("type") == "response_complete":
            return longest, ok, end
