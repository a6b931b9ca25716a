"""4. Concurrency: how many active runs the server holds with p99 event delay under 100 ms.

Each of N sessions runs back-to-back runs against a fake that takes ~1 s per call while
streaming (Reason, Act and Observe: ~3 s and ~24 events a run); starts are spread over the
first seconds so the runs do not move in lockstep. Event delay = arrival time at the client
− the event's `ts` (same machine clock; `ts` is taken before the event is stored, so the
delay includes persistence and delivery). Each level is measured in consecutive windows,
the repetitions. Alongside: `/healthz` latency from a separate process (event-loop lag) and
the load generator's own loop lag, which would inflate the delays if it were high.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from bench.context import Bench, Window, connect_many
from bench.procs import ROOT, Proc
from bench.stats import percentile, summarize
from bench.wsclient import WSConn, connect, ts_of

__all__ = ["run"]

BOUND_MS = 100.0
PACED = {"kind": "paced", "chunks": 10, "seconds": 1.0}
CHAT = b'{"type":"chat","content":"Work on it.","agent_max_steps":1}'
STOP = b'{"type":"agent_control","action":"stop"}'
DONE = b'{"type":"response_complete"'
ERROR = b'{"type":"error"'
SESSION = b'{"type":"session"'


@dataclass
class Paced:
    address: str
    ramp_s: float
    running: bool = True
    delays: list[float] = field(default_factory=list)
    events: int = 0
    errors: int = 0
    first_error: bytes = b""
    conns: list[WSConn] = field(default_factory=list)
    busy: set[WSConn] = field(default_factory=set)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    rng: random.Random = field(default_factory=lambda: random.Random(4))

    def on_message(self, conn: WSConn, payload: bytes, perf: float, wall: float) -> None:
        if payload.startswith(SESSION):
            loop = asyncio.get_running_loop()
            loop.call_later(self.rng.uniform(0, self.ramp_s), self._next, conn)
            return
        self.events += 1
        ts = ts_of(payload)
        if ts is not None:
            self.delays.append(wall * 1000 - ts)
        if payload.startswith(DONE):
            self._next(conn)
        elif payload.startswith(ERROR) and self.running:  # stopping races a finishing run
            self.errors += 1
            self.first_error = self.first_error or payload[:300]

    def _next(self, conn: WSConn) -> None:
        if self.running:
            self.busy.add(conn)
            conn.send_text(CHAT)
        else:
            self.busy.discard(conn)
            if not self.busy:
                self.idle.set()

    async def stop(self, wait_s: float = 15.0) -> int:
        """Stop every run, close; return how many runs had not ended after `wait_s`."""
        self.running = False
        for conn in self.busy:
            conn.send_text(STOP)
        stuck = 0
        if self.busy:
            try:
                await asyncio.wait_for(self.idle.wait(), wait_s)
            except TimeoutError:
                stuck = len(self.busy)
        for conn in self.conns:
            conn.close()
        return stuck


async def _client_lag(samples: list[float], stop: asyncio.Event) -> None:
    """How late this process's own loop wakes up (it would inflate measured delays)."""
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.01)
        samples.append((time.perf_counter() - started - 0.01) * 1000)


def _start_probe(proc: Proc, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.probe", "--port", str(proc.port), "--seconds", str(seconds)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


async def _level(bench: Bench, server: Proc, count: int) -> dict[str, Any]:
    sizes = bench.sizes
    ramp = 3.0
    load = Paced(server.address, ramp)
    load.conns = await connect_many(
        server.address, count, lambda: connect(server.address, "/ws", load.on_message)
    )
    await asyncio.sleep(ramp + 2.0)  # spread starts, then let the runs settle
    windows = sizes.reps
    probe = _start_probe(server, windows * sizes.level_window_s)
    lag: list[float] = []
    lag_stop = asyncio.Event()
    lag_task = asyncio.create_task(_client_lag(lag, lag_stop))
    reps: list[dict[str, Any]] = []
    spans: list[tuple[float, float]] = []
    for _ in range(windows):
        load.delays = []
        events_before, wall0 = load.events, time.time()
        with Window(server, bench.llm) as window:
            await asyncio.sleep(sizes.level_window_s)
        reps.append(
            {
                "p99_delay_ms": percentile(load.delays, 99),
                "p50_delay_ms": percentile(load.delays, 50),
                "events_per_s": (load.events - events_before) / window.wall,
                **window.shares(),
            }
        )
        spans.append((wall0, time.time()))
    lag_stop.set()
    await lag_task
    out_text, _ = await asyncio.to_thread(probe.communicate, None, 60)
    probes = json.loads(out_text or "[]")
    for rep, (start, end) in zip(reps, spans, strict=True):
        inside = [ms for wall, ms in probes if start <= wall < end]
        rep["healthz_p99_ms"] = percentile(inside, 99)
    stuck = await load.stop()
    if stuck:
        bench.notes.append(f"concurrency {count}: {stuck} run(s) had not ended 15 s after a stop")
    out: dict[str, Any] = {key: summarize((r[key] for r in reps), 1) for key in reps[0]}
    out["errors"] = load.errors
    if load.first_error:
        out["first_error"] = load.first_error.decode(errors="replace")
    out["client_lag_p99_ms"] = round(percentile(lag, 99), 1)
    out["healthz_samples"] = len(probes)
    out["met"] = bool(
        out["p99_delay_ms"]["median"] is not None
        and out["p99_delay_ms"]["median"] < BOUND_MS
        and load.errors == 0
    )
    return out


async def run(bench: Bench) -> dict[str, Any]:
    server = await bench.server("agent")
    await bench.llm_default(PACED)
    levels: dict[str, Any] = {}
    best = 0
    ladder = list(bench.sizes.levels)
    while ladder:
        count = ladder.pop(0)
        result = await _level(bench, server, count)
        levels[str(count)] = result
        if result["met"]:
            best = max(best, count)
            continue
        # Higher levels only get worse: spend the time below the ladder's first rung instead,
        # so that the report still says how many runs the server does hold.
        ladder = [n for n in (count // 2, count // 4) if not best and n >= 10 and n < count]
        if ladder and str(ladder[0]) in levels:
            break
    missed = [int(n) for n, r in levels.items() if not r["met"] and int(n) > best]
    if best and missed:  # one more level between the last held and the first missed
        middle = (best + min(missed)) // 2
        if middle > best and str(middle) not in levels:
            levels[str(middle)] = result = await _level(bench, server, middle)
            if result["met"]:
                best = middle
    await bench.llm_default({"kind": "steps"})
    tried = sorted(int(n) for n in levels)
    untried = [n for n in bench.sizes.levels if n not in tried]
    return {
        "bound_ms": BOUND_MS,
        "levels": dict(sorted(levels.items(), key=lambda kv: int(kv[0]))),
        "max_runs_within_bound": best,
        "not_tried": untried,
    }
