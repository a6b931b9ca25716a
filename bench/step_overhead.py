"""1. Per-step overhead: what the server adds to each reason → act → observe step.

5-step runs, one `get_current_time` call per step, a zero-latency fake LLM, SQLite on, one
run at a time on a fresh session. A step's wall time is the gap between two consecutive
`agent_turn_start` frames at the client (steps 1-4; step 5 ends in the summary call).
Two ways to take the LLM's share out:

- overhead vs fake: minus the time the fake spent itself on that step's three requests
  (request reaching its app → last byte sent). What remains includes the server's whole
  HTTP client side of the LLM calls (agent/adapters: aiohttp, the SSE parser).
- overhead vs round trips: minus the wall time of the same three requests (Reason, Act with
  a tool call, Observe; a system-prompt-sized body) made by a minimal httpx client from
  this process: the LLM's time as a lean client sees it. The issue's target is read on this
  one; both are reported.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson

from bench.context import Bench, Window
from bench.stats import percentile, summarize
from bench.wsclient import connect, kind_of

__all__ = ["run", "run_steps"]

STEPS = 5


async def _one_run(address: str) -> tuple[str, dict[int, float]]:
    """Run one 5-step run on a new session; return (run_id, arrival of each turn start)."""
    conn = await connect(address)
    try:
        await conn.recv_json()  # the session frame
        conn.send_json({"type": "chat", "content": "What time is it?", "agent_max_steps": STEPS})
        run_id, starts = "", {}
        while True:
            payload, arrived = await conn.recv()
            kind = kind_of(payload)
            if kind == "agent_start":
                run_id = str(orjson.loads(payload)["run_id"])
            elif kind == "agent_turn_start":
                starts[int(orjson.loads(payload)["step"])] = arrived
            elif kind == "response_complete":
                return run_id, starts
            elif kind == "error":
                raise RuntimeError(f"run failed: {payload[:300]!r}")
    finally:
        conn.close()


async def round_trips(bench: Bench, count: int = 20) -> float:
    """Median wall ms of one step's three LLM requests made by a minimal httpx client."""
    assert bench.llm is not None
    body = orjson.dumps(
        {
            "model": "gpt-4o-mini",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [
                {"role": "system", "content": "You are a careful agent. " * 200},
                {"role": "user", "content": "What time is it?"},
            ],
        }
    )
    samples = []
    async with httpx.AsyncClient(base_url=f"http://{bench.llm.address}/v1") as client:
        for i in range(count + 2):
            started = time.perf_counter()
            for phase in ("reason", "act", "observe"):
                headers = {"content-type": "application/json", "x-agent-phase": phase}
                async with client.stream(
                    "POST", "/chat/completions", content=body, headers=headers
                ) as response:
                    async for _ in response.aiter_bytes():
                        pass
            if i >= 2:  # the first ones open the connection
                samples.append((time.perf_counter() - started) * 1000)
    await bench.llm_stats()  # these are not the server's requests
    return percentile(samples, 50)


async def run_steps(bench: Bench, runs: int) -> dict[str, Any]:
    """One repetition: `runs` runs in a row; per-step samples and their summary."""
    server = await bench.server("agent")
    await bench.llm_stats()  # reset the fake's clock
    samples: list[tuple[str, int, float]] = []
    with Window(server) as window:
        for _ in range(runs):
            run_id, starts = await _one_run(server.address)
            for step in range(1, STEPS):
                samples.append((run_id, step, starts[step + 1] - starts[step]))
    stats = await bench.llm_stats()
    fake = stats["step_time"]
    trips = await round_trips(bench)
    walls = [wall * 1000 for _, _, wall in samples]
    fakes = [fake[run][str(step)] * 1000 for run, step, _ in samples]
    overhead = [w - f for w, f in zip(walls, fakes, strict=True)]
    over_trips = [w - trips for w in walls]
    by_step = {
        str(step): percentile(
            [o for (_, s, _), o in zip(samples, over_trips, strict=True) if s == step], 50
        )
        for step in range(1, STEPS)
    }
    shares = stats.get("prefix_shares") or [0.0]
    return {
        "prefix_cache_share_median": percentile(shares, 50) * 100,
        "prefix_cache_share_min": min(shares) * 100,
        "prefix_cached_calls": len(stats.get("prefix_shares") or ()),
        "overhead_median_ms_by_step": by_step,
        "steps": len(samples),
        "llm_requests": stats["requests"],
        "llm_connections": stats["connections"],
        "overhead_median_ms": percentile(over_trips, 50),
        "overhead_p99_ms": percentile(over_trips, 99),
        "overhead_vs_fake_median_ms": percentile(overhead, 50),
        "overhead_vs_fake_p99_ms": percentile(overhead, 99),
        "round_trips_ms": trips,
        "wall_median_ms": percentile(walls, 50),
        "fake_median_ms": percentile(fakes, 50),
        "server_cpu_ms_per_step": window.cpu * 1000 / (runs * STEPS),
        "server_cpu_share": window.cpu_share,
    }


async def run(bench: Bench) -> dict[str, Any]:
    await bench.server("agent")
    await bench.llm_default({"kind": "steps"})
    await run_steps(bench, 3)  # warm-up: connections, caches, the first SQLite pages
    reps = [await run_steps(bench, bench.sizes.step_runs) for _ in range(bench.sizes.reps)]
    return {
        key: summarize(r[key] for r in reps)
        for key in (
            "overhead_median_ms",
            "overhead_p99_ms",
            "overhead_vs_fake_median_ms",
            "overhead_vs_fake_p99_ms",
            "round_trips_ms",
            "wall_median_ms",
            "fake_median_ms",
            "server_cpu_ms_per_step",
            "server_cpu_share",
            "prefix_cache_share_median",
            "prefix_cache_share_min",
        )
    } | {
        "steps_per_rep": reps[0]["steps"],
        # a pooled client opens a handful; one per request means connections are not reused
        "llm_connections_per_request": summarize(
            r["llm_connections"] / max(r["llm_requests"], 1) for r in reps
        ),
        # grows with the conversation when a per-call cost is O(messages)
        "overhead_median_ms_by_step": {
            step: summarize(r["overhead_median_ms_by_step"][step] for r in reps)
            for step in reps[0]["overhead_median_ms_by_step"]
        },
    }
