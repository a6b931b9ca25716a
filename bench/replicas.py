"""7. Several processes on one store: cross-process tail delay and stop latency.

Two agent servers share one store (a SQLite file with `storage.shared`, and FerretDB when a
binary is cached). A run streams on the first (a chunk every 20 ms); a watcher on the second
measures each event's delay (arrival minus the event's `ts`), next to a watcher on the first
for reference. Then stops: a run starts on the first, its first delta arrives on the second,
the second sends `agent_control stop`; latency = stop sent → `agent_stopped` received there.
Last, with the servers stopped, the store's own floor: one event appended then read back by
`tail_events` (the relay's query), on the data the benchmark left.

    python -m bench --only replicas
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from bench.context import Bench
from bench.procs import ROOT, Proc, _spawn, free_port, server_env
from bench.stats import percentile
from bench.wsclient import WSConn, connect, kind_of

__all__ = ["run", "start_server"]

STREAM = {"kind": "slow", "delay_s": 0.02, "chunks": 150}
CHAT = {"type": "chat", "content": "Take your time.", "agent_max_steps": 1}
STOP = {"type": "agent_control", "action": "stop"}
SESSIONS = 4
STOPS = 15


FLOOR_ROUNDS = 30


async def run(bench: Bench) -> dict[str, Any]:
    out: dict[str, Any] = {"sqlite": await _measure(bench, _sqlite_env(bench))}
    out["sqlite"] |= await _floor(_sqlite_env(bench))
    out["mongodb"] = await _on_ferretdb(bench)
    return out


def _sqlite_env(bench: Bench) -> dict[str, str]:
    return {
        "AGENT__STORAGE__SQLITE_PATH": str(bench.workdir / "replicas.db"),
        "AGENT__STORAGE__SHARED": "true",
    }


async def _on_ferretdb(bench: Bench) -> dict[str, Any]:
    from bench.storage import NO_FERRETDB, running_ferretdb

    async with running_ferretdb(bench) as uri:
        if uri is None:
            return NO_FERRETDB
        env = {
            "AGENT__STORAGE__BACKEND": "mongodb",
            "AGENT__STORAGE__MONGODB_URI": uri,
            "AGENT__STORAGE__MONGODB_DATABASE": "bench_replicas",
        }
        return await _measure(bench, env) | await _floor(env)


def start_server(bench: Bench, name: str, store_env: dict[str, str]) -> Proc:
    """A server process on `store_env`'s store, ready to serve."""
    assert bench.llm is not None
    port = free_port()
    env = server_env(bench.llm, **store_env)
    args = ["-m", "server", "--config", str(ROOT / "config.toml"), "--port", str(port)]
    proc = Proc(name, _spawn(name, args, bench.workdir, env), port, bench.workdir / f"{name}.log")
    proc.wait_ready()
    return proc


async def _measure(bench: Bench, store_env: dict[str, str]) -> dict[str, Any]:
    owner = await asyncio.to_thread(start_server, bench, "replica_a", store_env)
    other = await asyncio.to_thread(start_server, bench, "replica_b", store_env)
    try:
        local, remote = await _tail(bench, owner.address, other.address)
        stops = await _stops(bench, owner.address, other.address)
    finally:
        for proc in (owner, other):
            await asyncio.to_thread(proc.stop)
    return {
        "events": len(remote),
        "local_p50_ms": round(percentile(local, 50), 1),
        "local_p99_ms": round(percentile(local, 99), 1),
        "tail_p50_ms": round(percentile(remote, 50), 1),
        "tail_p99_ms": round(percentile(remote, 99), 1),
        "stops": len(stops),
        "stop_p50_ms": round(percentile(stops, 50), 1),
        "stop_p99_ms": round(percentile(stops, 99), 1),
    }


async def _tail(bench: Bench, owner: str, other: str) -> tuple[list[float], list[float]]:
    """Delays (ms) of every event seen by a watcher on the owner and one on the other."""

    async def session() -> tuple[list[float], list[float]]:
        starter = await connect(owner)
        sid = str((await starter.recv_json())["session_id"])
        await bench.llm_session(sid, STREAM)
        starter.send_json(CHAT)
        await _until(starter, "agent_start")
        near = await connect(owner, f"/ws?session_id={sid}")
        far = await connect(other, f"/ws?session_id={sid}")
        try:
            results = await asyncio.gather(_delays(near), _delays(far))
        finally:
            for conn in (starter, near, far):
                conn.close()
        return results

    both = await asyncio.gather(*(session() for _ in range(SESSIONS)))
    return [d for near, _ in both for d in near], [d for _, far in both for d in far]


async def _delays(conn: WSConn) -> list[float]:
    await conn.recv_json()  # the session frame
    to_wall = time.time() - time.perf_counter()  # arrival times are perf_counter readings
    delays: list[float] = []
    while True:
        payload, arrived = await conn.recv()
        frame = orjson.loads(payload)
        if "ts" in frame:
            delays.append((arrived + to_wall) * 1000 - float(frame["ts"]))
        if frame.get("type") == "response_complete":
            return delays


async def _stops(bench: Bench, owner: str, other: str) -> list[float]:
    latencies: list[float] = []
    starter = await connect(owner)
    sid = str((await starter.recv_json())["session_id"])
    await bench.llm_session(sid, {**STREAM, "chunks": 400})
    starter.send_json(CHAT)  # a session is stored with its first chat: then it is visible
    await _until(starter, "agent_start")
    watcher = await connect(other, f"/ws?session_id={sid}")
    await watcher.recv_json()
    try:
        for i in range(STOPS):
            if i:
                starter.send_json(CHAT)
            await _until(watcher, "agent_reason_delta")
            sent = time.perf_counter()
            watcher.send_json(STOP)
            await _until(watcher, "agent_stopped")
            latencies.append((time.perf_counter() - sent) * 1000)
            await _until(watcher, "response_complete")
            await _until(starter, "response_complete")
    finally:
        starter.close()
        watcher.close()
    return latencies


async def _until(conn: WSConn, wanted: str) -> None:
    while True:
        payload, _ = await conn.recv()
        if kind_of(payload) == wanted:
            return


async def _floor(store_env: dict[str, str]) -> dict[str, Any]:
    """Append one event, then read it back with the relay's query (`tail_events`): the least
    a cross-process delay can be on this store, with the data the benchmark stored."""
    from server.app import create_store
    from server.settings import Settings, StorageSettings
    from server.storage.base import Cursor, Scope

    fields = {k.removeprefix("AGENT__STORAGE__").lower(): v for k, v in store_env.items()}
    store = create_store(Settings(storage=StorageSettings.model_validate(fields)))
    await store.open()
    scope = Scope("bench", "bench")
    session_id = f"floor-{time.time_ns()}"
    try:
        await store.create_session(scope, session_id, int(time.time() * 1000))
        trips: list[float] = []
        for _ in range(FLOOR_ROUNDS):
            frame = {
                "type": "agent_update",
                "update_type": "agent_reason_delta",
                "seq": 0,
                "session_id": session_id,
                "ts": int(time.time() * 1000),
                "delta": "tok ",
            }
            started = time.perf_counter()
            await store.append_events(scope, session_id, [frame], frame["ts"])
            rows = await store.tail_events({session_id: Cursor(scope, frame["seq"] - 1)}, 10)
            trips.append((time.perf_counter() - started) * 1000)
            assert rows and rows[0][1] == frame["seq"], rows
        clients = await store.list_sessions(Scope("local", "local"), -1)  # the servers' own
        stored = sum(record.last_seq for record in clients)
    finally:
        await store.close()
    return {
        "floor_events_stored": stored,
        "floor_p50_ms": round(percentile(trips, 50), 1),
        "floor_p99_ms": round(percentile(trips, 99), 1),
    }
