"""3. Stop latency: `agent_control stop` sent → `agent_stopped` received, mid LLM stream.

The measured sessions' fake streams slowly (a chunk every 50 ms), and each stop is sent a
random 0-20 ms after the run's first `agent_reason_delta`, so it always lands while the
stream is in flight. Three loads:

- unloaded: one session, one stop at a time;
- half: 200 sessions streaming: 10 that are stopped and restarted, and 190 in the
  background, paced so that together they ask for half the bare endpoint's event rate
  (measured in the same bench run); when the server cannot deliver that much, the achieved
  rate is lower and the server is saturated: both are reported;
- saturation: the same, with a zero-latency fake for the background, as fast as it goes;
- agent_half (no target, for diagnosis): the background paced at half the agent server's
  own SQLite throughput from benchmark 2, so the server is busy but not saturated.

Under load a stop cycle (start a run, first delta, stop, `response_complete`) takes seconds,
hence 10 parallel stoppers there; unloaded, one at a time. A repetition also ends after
`stop_rep_budget_s`, so that a slow server yields fewer stops (reported) rather than a bench
that overruns its time.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import orjson

from bench.context import Bench, Window
from bench.stats import percentile, summarize
from bench.throughput import Streamers
from bench.wsclient import connect, kind_of

__all__ = ["run"]

SLOW = {"kind": "slow", "delay_s": 0.05, "chunks": 400}
CHAT = {"type": "chat", "content": "Take your time.", "agent_max_steps": 1}
STOP = {"type": "agent_control", "action": "stop"}
LOADED_WORKERS = 10


Stop = tuple[float, float, float]  # total, before agent_stopped's ts, after it (ms)


async def _stopper(
    bench: Bench, address: str, stops: int, rng: random.Random, deadline: float
) -> list[Stop]:
    """One session: start a slow run, stop it mid-stream, `stops` times.

    Each stop is split at the `ts` of its `agent_stopped` frame (taken when the run emits it,
    after the stopped turn's messages are stored, before the frame itself is): before = the
    stop read, the run cancelled and the turn stored; after = the frame stored and delivered.
    """
    conn = await connect(address)
    latencies: list[Stop] = []
    try:
        session = str((await conn.recv_json())["session_id"])
        await bench.llm_session(session, SLOW)
        for _ in range(stops):
            if time.monotonic() > deadline:
                break
            conn.send_json(CHAT)
            await _until(conn, "agent_reason_delta")
            await asyncio.sleep(rng.uniform(0, 0.02))
            sent, sent_wall = time.perf_counter(), time.time()
            conn.send_json(STOP)
            arrived, frame = await _until(conn, "agent_stopped")
            total = (arrived - sent) * 1000
            before = float(frame["ts"]) - sent_wall * 1000
            latencies.append((total, before, total - before))
            await _until(conn, "response_complete")
    finally:
        conn.close()
    return latencies


async def _until(conn: Any, wanted: str) -> tuple[float, dict[str, Any]]:
    while True:
        payload, arrived = await conn.recv(120)
        kind = kind_of(payload)
        if kind == wanted:
            frame = orjson.loads(payload) if kind == "agent_stopped" else {}
            return float(arrived), frame
        if kind == "error" or (kind == "response_complete" and wanted != kind):
            raise RuntimeError(f"waiting for {wanted}, got {payload[:300]!r}")


async def _stops(bench: Bench, address: str, total: int, workers: int) -> list[Stop]:
    rng = random.Random(total * 7 + workers)
    per = max(1, total // workers)
    deadline = time.monotonic() + bench.sizes.stop_rep_budget_s
    parts = await asyncio.gather(
        *(
            _stopper(bench, address, per, random.Random(rng.random()), deadline)
            for _ in range(workers)
        )
    )
    return [x for part in parts for x in part]


async def _scenario(bench: Bench, delay_s: float | None, workers: int) -> dict[str, Any]:
    """Repetitions of `stops` stops, with 200 background sessions unless delay_s is None."""
    server = await bench.server("agent")
    sizes = bench.sizes
    background = None
    if delay_s is not None:
        await bench.llm_default({"kind": "deltas", "deltas": 200, "delay_s": delay_s})
        background = Streamers(server.address)
        await background.start(sizes.background - workers)
        await asyncio.sleep(2.0)  # let the background reach its pace
    reps = []
    try:
        for _ in range(sizes.reps):
            before = background.events if background else 0
            with Window(server, bench.llm) as window:
                stops = await _stops(bench, server.address, sizes.stops, workers)
            events = (background.events - before) if background else 0
            latencies = [s[0] for s in stops]
            reps.append(
                {
                    "p50_ms": percentile(latencies, 50),
                    "p99_ms": percentile(latencies, 99),
                    "max_ms": max(latencies),
                    "before_emit_p50_ms": percentile([s[1] for s in stops], 50),
                    "after_emit_p50_ms": percentile([s[2] for s in stops], 50),
                    "stops": len(latencies),
                    "background_events_per_s": events / window.wall,
                    **window.shares(),
                }
            )
    finally:
        if background is not None:
            stuck = await background.stop()
            if stuck:
                bench.notes.append(
                    f"stop latency: {stuck} background run(s) had not ended 15 s after a stop"
                )
    out: dict[str, Any] = {
        key: summarize((r[key] for r in reps), 2) for key in reps[0] if key != "stops"
    }
    out["stops_per_rep"] = [r["stops"] for r in reps]
    if min(out["stops_per_rep"]) < sizes.stops:
        bench.notes.append(
            f"stop latency{'' if delay_s is None else f' (background delay {delay_s:g} s)'}: "
            f"only {out['stops_per_rep']} stops per repetition fit in "
            f"{sizes.stop_rep_budget_s:g} s (a stop cycle is that slow); p99 of fewer than 100 "
            "is close to the maximum"
        )
    out["worst_ms"] = max(r["max_ms"] for r in reps)
    return out


async def run(bench: Bench) -> dict[str, Any]:
    await bench.llm_default({"kind": "steps"})
    out: dict[str, Any] = {"unloaded": await _scenario(bench, None, workers=1)}
    measured = bench.results.get("throughput", {})
    for name, source in (("half", "baseline"), ("agent_half", "sqlite")):
        eps = measured.get(source, {}).get("events_per_s", {}).get("median")
        if not eps:
            bench.notes.append(
                f"stop latency scenario {name!r} needs the throughput "
                "benchmark in the same run; skipped"
            )
            continue
        wanted = 0.5 * eps
        delay = bench.sizes.background / wanted  # per session: one delta every `delay` s
        out[name] = await _scenario(bench, delay, workers=LOADED_WORKERS)
        out[name]["requested_background_events_per_s"] = round(wanted)
        out[name]["delta_delay_s"] = round(delay, 5)
    out["saturation"] = await _scenario(bench, 0.0, workers=LOADED_WORKERS)
    await bench.llm_default({"kind": "steps"})
    return out
