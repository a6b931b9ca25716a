"""1b. A long session: what a run costs when its session already holds many runs.

Every other benchmark runs short sessions. Here one session (SQLite) runs one-step runs back
to back (the fake's `steps` profile: Reason, Act with a tool call, Observe, then the
max-steps summary), and the server's CPU per run is taken over `MEASURED` runs once the
session holds `SHORT` and then `LONG` earlier runs. Past the context budget (32k tokens by
default, reached after ~250 of these runs) every call drops the oldest turns, so the long
figure shows what the context window costs as a session grows (docs/benchmarks.md, "A long
session"). A new connection joins the session every `PER_CONNECTION` runs, so one client
stays under the server's per-connection frame rate.
"""

from __future__ import annotations

import time
from typing import Any

from bench.context import Bench, Window
from bench.procs import Proc
from bench.stats import summarize
from bench.wsclient import WSConn, connect, kind_of

__all__ = ["run"]

SHORT, LONG = 20, 400  # earlier runs in the session when each figure is taken
MEASURED = 40  # runs per figure (CPU ticks are 10 ms)
PER_CONNECTION = 150  # below the default burst of 200 inbound frames per connection
CHAT = {"type": "chat", "content": "What time is it in Paris?", "agent_max_steps": 1}


class _Session:
    """One session, driven run by run over a connection renewed every `PER_CONNECTION` runs."""

    def __init__(self, proc: Proc) -> None:
        self.proc = proc
        self.session_id = ""
        self.runs = 0
        self._conn: WSConn | None = None

    async def _connection(self) -> WSConn:
        if self._conn is None or self.runs % PER_CONNECTION == 0:
            if self._conn is not None:
                self._conn.close()
            path = f"/ws?session_id={self.session_id}" if self.session_id else "/ws"
            self._conn = await connect(self.proc.address, path)
            hello = await self._conn.recv_json()
            self.session_id = str(hello["session_id"])
        return self._conn

    async def run(self) -> None:
        conn = await self._connection()
        conn.send_json(CHAT)
        while True:
            payload, _ = await conn.recv()
            kind = kind_of(payload)
            if kind == "response_complete":
                self.runs += 1
                return
            if kind == "error":
                raise RuntimeError(f"run failed: {payload[:300]!r}")

    async def until(self, runs: int) -> None:
        while self.runs < runs:
            await self.run()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


async def _cpu_per_run_ms(bench: Bench, session: _Session) -> float:
    with Window(session.proc, bench.llm) as window:
        started = session.runs
        await session.until(started + MEASURED)
    return window.cpu * 1e3 / MEASURED


async def run(bench: Bench) -> dict[str, Any]:
    await bench.llm_default({"kind": "steps"})
    proc = await bench.server("agent")
    short: list[float] = []
    long: list[float] = []
    build_s: list[float] = []
    for _ in range(bench.sizes.reps):
        session = _Session(proc)
        try:
            await session.until(SHORT)
            short.append(await _cpu_per_run_ms(bench, session))
            started = time.perf_counter()
            await session.until(LONG)
            build_s.append(time.perf_counter() - started)
            long.append(await _cpu_per_run_ms(bench, session))
        finally:
            session.close()
    return {
        "short_runs": SHORT,
        "long_runs": LONG,
        "cpu_ms_per_run_short": summarize(short),
        "cpu_ms_per_run_long": summarize(long),
        "ratio": summarize(b / a for a, b in zip(short, long, strict=True) if a),
        "seconds_to_grow": summarize(build_s),
    }
