"""What every benchmark shares: the processes, the fake LLM's controls, sizes and results."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.procs import Proc, start_agent_server, start_baseline, start_fake_llm, start_relay
from bench.wsclient import WSConn, connect

__all__ = ["Bench", "Sizes", "Window", "connect_many"]


@dataclass(frozen=True)
class Sizes:
    """How long and how big. `quick` shrinks everything for development."""

    reps: int = 3
    step_runs: int = 40  # 5-step runs per repetition
    stream_conns: int = 100
    stream_warm_s: float = 1.5
    stream_window_s: float = 4.0
    stops: int = 100  # per repetition
    stop_rep_budget_s: float = 20.0  # a slow server gets fewer stops, not a longer bench
    background: int = 200
    levels: tuple[int, ...] = (100, 250, 500, 1000)
    level_window_s: float = 4.0
    idle_conns: int = 500  # per memory increment
    active_runs: int = 300  # per memory increment (the LLM client pools at most 1000 connections)
    storage_sessions: int = 100
    storage_window_s: float = 3.0

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            reps=2,
            step_runs=10,
            stream_window_s=2.0,
            stream_warm_s=1.0,
            stops=20,
            background=100,
            levels=(100, 250),
            level_window_s=2.0,
            idle_conns=200,
            active_runs=100,
            storage_window_s=1.0,
        )


@dataclass
class Window:
    """CPU and wall time of a process over a measurement window; also the CPU of the fake
    LLM (`helper`) and of this load-generating process, to show who the bottleneck was."""

    proc: Proc
    helper: Proc | None = None
    wall0: float = 0.0
    cpu0: float = 0.0
    wall: float = 0.0
    cpu: float = 0.0
    helper_cpu: float = 0.0
    client_cpu: float = 0.0

    def __enter__(self) -> Window:
        self.wall0, self.cpu0 = time.perf_counter(), self.proc.cpu_seconds()
        self._helper0 = self.helper.cpu_seconds() if self.helper else 0.0
        self._client0 = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall0
        self.cpu = self.proc.cpu_seconds() - self.cpu0
        self.helper_cpu = (self.helper.cpu_seconds() - self._helper0) if self.helper else 0.0
        self.client_cpu = time.process_time() - self._client0

    def shares(self) -> dict[str, float]:
        """Cores used on average by the server, the fake LLM and the load generator."""
        wall = self.wall or 1.0
        return {
            "server_cpu_share": self.cpu / wall,
            "llm_cpu_share": self.helper_cpu / wall,
            "client_cpu_share": self.client_cpu / wall,
        }

    @property
    def cpu_share(self) -> float:
        """Cores used on average (1.0 = one core fully busy)."""
        return self.cpu / self.wall if self.wall else 0.0


@dataclass
class Bench:
    workdir: Path
    sizes: Sizes
    llm: Proc | None = None
    servers: dict[str, Proc] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _http: httpx.AsyncClient | None = None

    # -- processes ----------------------------------------------------------------------------

    async def start(self) -> None:
        self.llm = await asyncio.to_thread(start_fake_llm, self.workdir)
        self._http = httpx.AsyncClient(base_url=f"http://{self.llm.address}", timeout=30)

    async def server(self, name: str) -> Proc:
        """The long-lived process `name`: "agent" (SQLite), "agent_nostore", "baseline",
        "relay"."""
        if name not in self.servers:
            self.servers[name] = await self.fresh(name)
        return self.servers[name]

    async def fresh(self, name: str, tag: str = "") -> Proc:
        """A new process of kind `name`; the caller stops it (memory needs a clean heap)."""
        assert self.llm is not None
        llm = self.llm
        if name == "baseline":
            return await asyncio.to_thread(start_baseline, self.workdir)
        if name == "relay":
            return await asyncio.to_thread(start_relay, self.workdir, llm)
        persistence = "off" if name == "agent_nostore" else "sqlite"
        return await asyncio.to_thread(
            lambda: start_agent_server(
                self.workdir, llm, persistence=persistence, name=f"{name}{tag}"
            )
        )

    async def close(self) -> None:
        for proc in [*self.servers.values(), *([self.llm] if self.llm else [])]:
            await asyncio.to_thread(proc.stop)
        if self._http is not None:
            await self._http.aclose()

    # -- the fake LLM -------------------------------------------------------------------------

    async def llm_default(self, profile: dict[str, Any]) -> None:
        assert self._http is not None
        (await self._http.post("/_bench/default", json=profile)).raise_for_status()

    async def llm_session(self, session_id: str, profile: dict[str, Any]) -> None:
        assert self._http is not None
        body = {"session_id": session_id, "profile": profile}
        (await self._http.post("/_bench/session", json=body)).raise_for_status()

    async def llm_stats(self) -> dict[str, Any]:
        """Time the fake spent per run and step since the last call (and reset it)."""
        assert self._http is not None
        response = await self._http.get("/_bench/stats")
        response.raise_for_status()
        stats: dict[str, Any] = response.json()
        return stats


async def connect_many(
    address: str,
    count: int,
    make: Callable[[], Awaitable[WSConn]] | None = None,
    batch: int = 50,
) -> list[WSConn]:
    """Open `count` connections, `batch` at a time (a burst of 1000 SYNs overflows backlogs)."""
    opener = make or (lambda: connect(address))
    conns: list[WSConn] = []
    while len(conns) < count:
        todo = min(batch, count - len(conns))
        conns += await asyncio.gather(*(opener() for _ in range(todo)))
    return conns
