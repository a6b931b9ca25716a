"""2b. Server CPU per streamed delta event: what one more `*_delta` event costs the server.

The throughput benchmark's zero-latency stream is coalesced into ~12 events a run, so its CPU
per event is mostly the run's fixed cost. Here the model streams at a model's pace (a chunk
every `pace_s`, 40 sessions at once), so every chunk becomes its own delta event, stored and
sent like any other. Each repetition runs the same load twice, with long and with short
replies (`LONG` and `SHORT` chunks); the difference in server CPU per run over the difference
in delta events per run is the marginal cost of one delta event: reading its chunk from the
model, the event, its storage and its WebSocket frame, without the run's fixed cost. The bare
relay (bench/relay.py) under the same load gives the floor: a chunk read and one frame sent,
with nothing of the agent between them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.context import Bench, Window
from bench.procs import Proc
from bench.stats import summarize
from bench.throughput import Streamers

__all__ = ["run"]

LONG, SHORT = 100, 10  # chunks per reply
SESSIONS = 40
PACE_S = 0.02  # 50 chunks a second per session: a small model's pace


async def _load(bench: Bench, proc: Proc, chunks: int) -> tuple[float, float] | None:
    """(server CPU per run in seconds, delta events per run) over one window; None when no
    run got through (a broken server must not read as a cheap one)."""
    await bench.llm_default({"kind": "deltas", "deltas": chunks, "delay_s": PACE_S})
    load = Streamers(proc.address)
    await load.start(SESSIONS)
    await asyncio.sleep(bench.sizes.stream_warm_s + chunks * PACE_S)
    with Window(proc, bench.llm) as window:
        deltas, marks = load.deltas, load.marks
        await asyncio.sleep(bench.sizes.stream_window_s)
        deltas, marks = load.deltas - deltas, load.marks - marks
    stuck = await load.stop()
    if stuck:
        bench.notes.append(f"deltas on {proc.name}: {stuck} run(s) had not ended after a stop")
    runs = marks / chunks  # the run's text ("tok " × chunks), however it was split
    return (window.cpu / runs, deltas / runs) if runs else None


async def _marginal_us(bench: Bench, proc: Proc) -> tuple[float | None, float | None]:
    """(µs of server CPU per extra delta event, delta events per long run); None where the
    load produced nothing to divide by."""
    long, short = await _load(bench, proc, LONG), await _load(bench, proc, SHORT)
    if long is None or short is None or long[1] <= short[1]:
        bench.notes.append(f"deltas on {proc.name}: a window completed no comparable runs")
        return None, long[1] if long else None
    return (long[0] - short[0]) * 1e6 / (long[1] - short[1]), long[1]


async def run(bench: Bench, nostore: bool = True) -> dict[str, Any]:
    targets = [("sqlite", await bench.server("agent"))]
    if nostore:
        targets.append(("nostore", await bench.server("agent_nostore")))
    targets.append(("relay", await bench.server("relay")))
    samples: dict[str, list[tuple[float | None, float | None]]] = {name: [] for name, _ in targets}
    for _ in range(bench.sizes.reps):
        for name, proc in targets:
            samples[name].append(await _marginal_us(bench, proc))
    out: dict[str, Any] = {"sessions": SESSIONS, "pace_ms": PACE_S * 1e3, "chunks": LONG}
    for name, values in samples.items():
        out[name] = {
            "cpu_us_per_delta": summarize(v[0] for v in values),
            "deltas_per_run": summarize(v[1] for v in values),
        }
    return out
