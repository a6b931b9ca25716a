"""2. Event throughput: events/s delivered to 100 concurrent clients, against a bare endpoint.

Each agent client loops: `chat` (agent_max_steps 1) → ~200 `agent_reason_delta`s from a
zero-latency fake → … → `response_complete` → next `chat`. The baseline (bench/baseline.py)
sends the same number of frames of the same size per round trip, orjson-encoded, yielding
after each send. The bare relay (bench/relay.py) makes the run's two LLM requests and
forwards what it reads, nothing else: the agent's CPU per run over the relay's is what the
agent costs beyond reading its model and sending frames. The repetitions interleave the
servers (baseline, relay, SQLite, no store), so a noisy neighbour hits all of them alike, and
each ratio is taken within one repetition.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.context import Bench, Window, connect_many
from bench.procs import Proc
from bench.stats import summarize
from bench.wsclient import WSConn, connect, kind_of

__all__ = ["Streamers", "run"]

CHAT = b'{"type":"chat","content":"Stream please.","agent_max_steps":1}'
STOP = b'{"type":"agent_control","action":"stop"}'
DONE = b'{"type":"response_complete"'
ERROR = b'{"type":"error"'
SESSION = b'{"type":"session"'
_DIGITS = {"ratio": 4, "cpu_ratio_to_relay": 3, "server_cpu_ms_per_round": 2}
MARK = b"tok "  # the fake's "deltas" profile streams this many times per run
DELTA = b'_delta"'  # counted in deltas only: a run's last events repeat its text at once


@dataclass
class Streamers:
    """N clients that start a new round as soon as the previous one completes."""

    address: str
    path: str = "/ws"
    agent: bool = True
    events: int = 0
    errors: int = 0
    rounds: int = 0
    marks: int = 0  # MARKs received: the run's text, however it is split into events
    deltas: int = 0  # `*_delta` events received
    running: bool = True
    busy: set[WSConn] = field(default_factory=set)
    conns: list[WSConn] = field(default_factory=list)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    first_error: bytes = b""
    stuck_last: Counter[str] = field(default_factory=Counter)

    def on_message(self, conn: WSConn, payload: bytes, perf: float, wall: float) -> None:
        self.events += 1
        if DELTA in payload[:72]:
            self.deltas += 1
            self.marks += payload.count(MARK)
        conn.state["last"] = payload  # for the report if this connection gets stuck
        if payload.startswith(DONE):
            self.rounds += 1
            self._next(conn)
        elif payload.startswith(SESSION):
            self.events -= 1  # not a run event
            self._next(conn)
        elif payload.startswith(ERROR) and self.running:  # stopping races a finishing run
            self.errors += 1
            self.first_error = self.first_error or payload[:300]

    def _next(self, conn: WSConn) -> None:
        if self.running:
            conn.send_text(CHAT if self.agent else b"go")
        else:
            self.busy.discard(conn)
            if not self.busy:
                self.idle.set()

    async def start(self, count: int) -> None:
        self.conns = await connect_many(
            self.address, count, lambda: connect(self.address, self.path, self.on_message)
        )
        self.busy = set(self.conns)

    async def stop(self, wait_s: float = 15.0) -> int:
        """Stop every run in flight (the baseline's rounds just finish), then close.

        Return how many connections never saw their run end within `wait_s`.
        """
        self.running = False
        if self.agent:
            for conn in self.busy:
                conn.send_text(STOP)
        stuck = 0
        if self.busy:
            try:
                await asyncio.wait_for(self.idle.wait(), wait_s)
            except TimeoutError:
                stuck = len(self.busy)
                self.stuck_last = Counter(_last_kind(c) for c in self.busy)
        for conn in self.conns:
            conn.close()
        return stuck


def _last_kind(conn: WSConn) -> str:
    last = conn.state.get("last")
    return kind_of(last) if isinstance(last, bytes) else "nothing"


async def measure(
    bench: Bench, proc: Proc, path: str, agent: bool, conns: int, marks_per_run: int = 0
) -> dict[str, Any]:
    sizes = bench.sizes
    load = Streamers(proc.address, path, agent)
    await load.start(conns)
    await asyncio.sleep(sizes.stream_warm_s)
    with Window(proc, bench.llm) as window:
        before, marks, started = load.events, load.marks, time.perf_counter()
        await asyncio.sleep(sizes.stream_window_s)
        events, elapsed = load.events - before, time.perf_counter() - started
        marks = load.marks - marks
    # Rounds end in step (all start together), so rounds counted in a short window are lumpy;
    # the run's own text ("tok " × 200) is counted instead, whatever the events that carry it.
    rounds = marks / max(marks_per_run, 1)
    per_round = events / rounds if rounds else 0.0
    stop_started = time.perf_counter()
    stuck = await load.stop()
    if stuck:
        bench.notes.append(
            f"throughput on {proc.name}: {stuck} run(s) had not ended "
            f"{time.perf_counter() - stop_started:.0f} s after a stop; the last "
            f"frame each had received: {dict(load.stuck_last)}"
        )
    return {
        "events_per_s": events / elapsed,
        "rounds_per_s": rounds / elapsed,
        **window.shares(),
        "server_cpu_ms_per_round": window.cpu * 1e3 / rounds if rounds else 0.0,
        "events_per_round": per_round,
        "server_cpu_us_per_event": window.cpu * 1e6 / max(events, 1),
        "errors": load.errors,
        "first_error": load.first_error.decode(errors="replace"),
    }


async def frames_per_run(bench: Bench, runs: int = 5) -> tuple[int, int, int]:
    """(frames, mean bytes per frame, MARKs) of the median of `runs` unloaded agent runs of
    the throughput profile: how many chunks one read finds varies from run to run (17 to 72
    frames seen for one run), and the baseline's round shape comes from this."""
    samples = sorted([await _one_run_shape(bench) for _ in range(runs)])
    return samples[len(samples) // 2]


async def _one_run_shape(bench: Bench) -> tuple[int, int, int]:
    server = await bench.server("agent")
    conn = await connect(server.address)
    await conn.recv_json()
    conn.send_text(CHAT)
    count = size = marks = 0
    while True:
        payload, _ = await conn.recv()
        count, size = count + 1, size + len(payload)
        marks += payload.count(MARK) if DELTA in payload[:72] else 0
        if kind_of(payload) == "response_complete":
            conn.close()
            return count, round(size / count), marks


async def run(bench: Bench, nostore: bool = True) -> dict[str, Any]:
    await bench.llm_default({"kind": "deltas", "deltas": 200})
    frames, size, marks = await frames_per_run(bench)
    baseline = await bench.server("baseline")
    relay = await bench.server("relay")
    targets: list[tuple[str, Proc]] = [("sqlite", await bench.server("agent"))]
    if nostore:
        try:
            targets.append(("nostore", await bench.server("agent_nostore")))
        except (RuntimeError, TimeoutError) as exc:
            bench.notes.append(f"persistence-off server did not start, skipped: {exc}")
    base_path = f"/ws?frames={frames}&bytes={size}"
    conns = bench.sizes.stream_conns
    reps: list[dict[str, Any]] = []
    for _ in range(bench.sizes.reps):
        rep = {"baseline": await measure(bench, baseline, base_path, False, conns)}
        for name, proc in [("relay", relay), *targets]:
            rep[name] = await measure(bench, proc, "/ws", True, conns, marks)
            rep[name]["ratio"] = rep[name]["events_per_s"] / rep["baseline"]["events_per_s"]
        for name, _ in targets:
            rep[name]["cpu_ratio_to_relay"] = (
                rep[name]["server_cpu_ms_per_round"] / rep["relay"]["server_cpu_ms_per_round"]
                if rep["relay"]["server_cpu_ms_per_round"]
                else None
            )
        reps.append(rep)
    out: dict[str, Any] = {"frames_per_run": frames, "bytes_per_frame": size, "conns": conns}
    for name in ["baseline", "relay", *(n for n, _ in targets)]:
        out[name] = {
            key: summarize((r[name][key] for r in reps), _DIGITS.get(key, 1))
            for key in (
                "events_per_s",
                "rounds_per_s",
                "server_cpu_share",
                "llm_cpu_share",
                "client_cpu_share",
                "server_cpu_us_per_event",
                "server_cpu_ms_per_round",
                "events_per_round",
                *(("ratio",) if name != "baseline" else ()),
                *(("cpu_ratio_to_relay",) if name not in ("baseline", "relay") else ()),
            )
        }
        out[name]["errors"] = sum(r[name]["errors"] for r in reps)
        first = next((r[name]["first_error"] for r in reps if r[name]["first_error"]), "")
        if first:
            out[name]["first_error"] = first
            bench.notes.append(
                f"throughput {name}: {out[name]['errors']} error frames, so its "
                f"rate is not a clean figure; first: {first[:200]}"
            )
    return out
