"""8. `serve --workers N`: most active runs within the p99 event-delay bound with 1, 2 and 4
processes on this machine, on SQLite (one shared WAL file) and on FerretDB.

The load is the concurrency benchmark's (bench/concurrency.py): each session runs
back-to-back runs against a fake that takes ~1 s per call while streaming, starts spread
over the first seconds; event delay = arrival − the event's `ts`. The connections go to one
port that N workers listen on (`SO_REUSEPORT`), so the kernel spreads them, and each run
works in the worker its connection reached. Each level runs on a fresh store (a new SQLite
file, a new FerretDB database) and a fresh process group, so levels do not inherit each
other's data. The search doubles the number of runs until the bound is missed, then tries
the midpoint once. `--quick` measures 1 and 2 workers only.

Alongside, what several SQLite writers cost by themselves: 1, 2 and 4 plain processes commit
small `BEGIN IMMEDIATE` transactions into one WAL file (with the server's busy timeout), and
each transaction's wait for the write lock is timed.

    python -m bench --only workers
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.concurrency import BOUND_MS, PACED, Paced
from bench.context import Bench, Sizes, connect_many
from bench.procs import ROOT, _spawn, free_port, server_env
from bench.stats import percentile
from bench.wsclient import connect

__all__ = ["run"]

WORKERS = (1, 2, 4)
START = {"sqlite": 50, "mongodb": 8}  # runs tried first
FLOOR = {"sqlite": 10, "mongodb": 2}  # below this, stop looking
CAP = {"sqlite": 800, "mongodb": 200}
RAMP_S, SETTLE_S = 3.0, 1.0
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Group:
    """`python -m server --workers N`: the parent and the workers it starts."""

    popen: subprocess.Popen[bytes]
    port: int
    workers: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        """The processes that serve: the workers, or the parent when it serves alone."""
        if self.workers == 1:
            return [self.popen.pid]
        path = f"/proc/{self.popen.pid}/task/{self.popen.pid}/children"
        with open(path) as children:
            return [int(pid) for pid in children.read().split()]

    def cpu_seconds(self) -> float:
        total = 0.0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / _TICKS
        return total

    def wait_listening(self, timeout: float = 90.0) -> None:
        """Until every worker listens: connections made earlier would all go to the first."""
        deadline = time.monotonic() + timeout
        while _listeners(self.port) < self.workers:
            if self.popen.poll() is not None:
                raise RuntimeError(f"--workers {self.workers} exited at start")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"--workers {self.workers}: not all listening in {timeout} s")
            time.sleep(0.05)  # polling a child's sockets; bounded by the deadline

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()  # the parent passes SIGTERM on to its workers
            try:
                self.popen.wait(30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def _listeners(port: int) -> int:
    """Sockets listening on 127.0.0.1:`port` (one per worker with SO_REUSEPORT)."""
    local = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as table:
        return sum(1 for line in table if f" {local} " in line and line.split()[3] == "0A")


def _start(bench: Bench, workers: int, store_env: dict[str, str], name: str) -> Group:
    assert bench.llm is not None
    port = free_port()
    env = server_env(bench.llm, **store_env)
    args = [
        "-m",
        "server",
        "--config",
        str(ROOT / "config.toml"),
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    group = Group(_spawn(name, args, bench.workdir, env), port, workers)
    group.wait_listening()
    return group


async def _level(bench: Bench, store: str, uri: str, workers: int, count: int) -> dict[str, Any]:
    name = f"workers_{store}_{workers}_{count}"
    if store == "sqlite":
        store_env = {"AGENT__STORAGE__SQLITE_PATH": str(bench.workdir / f"{name}.db")}
    else:
        store_env = {
            "AGENT__STORAGE__BACKEND": "mongodb",
            "AGENT__STORAGE__MONGODB_URI": uri,
            "AGENT__STORAGE__MONGODB_DATABASE": name,
        }
    group = await asyncio.to_thread(_start, bench, workers, store_env, name)
    try:
        load = Paced(group.address, RAMP_S)
        load.conns = await connect_many(
            group.address, count, lambda: connect(group.address, "/ws", load.on_message)
        )
        await asyncio.sleep(RAMP_S + SETTLE_S)  # spread starts, then let the runs settle
        load.delays, events0 = [], load.events
        cpu0, wall0 = group.cpu_seconds(), time.perf_counter()
        await asyncio.sleep(bench.sizes.level_window_s)
        wall = time.perf_counter() - wall0
        cpu, delays = group.cpu_seconds() - cpu0, load.delays
        events = load.events - events0
        stuck = await load.stop(wait_s=5.0)
    finally:
        await asyncio.to_thread(group.stop)
        if store == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                (bench.workdir / f"{name}.db{suffix}").unlink(missing_ok=True)
    p99 = percentile(delays, 99)
    out = {
        "p99_delay_ms": round(p99, 1),
        "p50_delay_ms": round(percentile(delays, 50), 1),
        "events_per_s": round(events / wall),
        "server_cpu_share": round(cpu / wall, 2),
        "errors": load.errors,
    }
    if stuck:
        out["stuck_after_stop"] = stuck
    out["met"] = bool(delays) and p99 < BOUND_MS and load.errors == 0
    print(
        f"[bench]   {store} --workers {workers}, {count} runs: p99 {p99:.0f} ms",
        file=sys.stderr,
        flush=True,
    )
    return out


async def _most(bench: Bench, store: str, uri: str, workers: int, start: int) -> dict[str, Any]:
    """Most runs within the bound, searched from `start`: doubling (or halving) until the
    answer changes, then the midpoint once."""
    levels: dict[int, dict[str, Any]] = {}

    async def met(count: int) -> bool:
        levels[count] = await _level(bench, store, uri, workers, count)
        return bool(levels[count]["met"])

    count, best, missed = start, 0, 0
    if await met(count):
        best = count
        while count * 2 <= CAP[store]:
            count *= 2
            if not await met(count):
                missed = count
                break
            best = count
    else:
        missed = count
        while count // 2 >= FLOOR[store]:
            count //= 2
            if await met(count):
                best = count
                break
            missed = count
    middle = (best + missed) // 2
    if best and missed and missed - best > max(2, best // 4) and middle not in levels:
        if await met(middle):
            best = middle
    return {"most_runs_within_bound": best, "levels": {str(n): levels[n] for n in sorted(levels)}}


async def _store(bench: Bench, store: str, uri: str) -> dict[str, Any]:
    counts = WORKERS[:2] if bench.sizes == Sizes.quick() else WORKERS  # --quick: 1 and 2
    return {str(n): await _most(bench, store, uri, n, START[store]) for n in counts}


async def run(bench: Bench) -> dict[str, Any]:
    from bench.storage import NO_FERRETDB, running_ferretdb

    locks = {str(n): await asyncio.to_thread(_lock_waits, bench, n) for n in WORKERS}
    await bench.llm_default(PACED)
    try:
        out: dict[str, Any] = {
            "bound_ms": BOUND_MS,
            "cpus": os.cpu_count(),
            "sqlite_lock_wait": locks,
            "sqlite": await _store(bench, "sqlite", ""),
        }
        async with running_ferretdb(bench) as uri:
            out["mongodb"] = NO_FERRETDB if uri is None else await _store(bench, "mongodb", uri)
    finally:
        await bench.llm_default({"kind": "steps"})
    return out


LOCK_SECONDS = 4.0


def _lock_waits(bench: Bench, writers: int) -> dict[str, Any]:
    """Lock waits (ms) of `writers` processes committing 5-row transactions into one file."""
    path = bench.workdir / f"lock-{writers}.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE e(id INTEGER PRIMARY KEY, body BLOB)")
    conn.close()
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(writers) as pool:
        results = pool.starmap(_commit_for, [(str(path), LOCK_SECONDS)] * writers)
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    waits = [w for result in results for w in result]
    return {
        "transactions": len(waits),
        "p50_ms": round(percentile(waits, 50), 2),
        "p99_ms": round(percentile(waits, 99), 1),
        "max_ms": round(max(waits), 1),
    }


def _commit_for(path: str, seconds: float) -> list[float]:
    """In a child process: commit for `seconds` with a 2 ms pause between transactions (a
    worker's loop does other things between batches); each wait for the lock, in ms."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=5000")  # as server/storage/sqlite_connect.py
    waits: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        waits.append((time.perf_counter() - started) * 1000)
        conn.executemany("INSERT INTO e(body) VALUES (?)", [(b"x" * 200,)] * 5)
        conn.execute("COMMIT")
        time.sleep(0.002)  # a pause between transactions, not synchronization
    conn.close()
    return waits
