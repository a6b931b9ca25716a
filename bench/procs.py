"""The processes a benchmark measures: the agent server, the bare baseline and relay, the fake
LLM.

Each runs in its own process, apart from the load-generating clients, so client CPU never
pollutes server numbers. Server CPU comes from /proc/PID/stat (every thread, the SQLite
writer included) and memory from VmRSS in /proc/PID/status.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ROOT",
    "Proc",
    "free_port",
    "machine_info",
    "start_agent_server",
    "start_baseline",
    "start_fake_llm",
    "start_relay",
]

ROOT = Path(__file__).resolve().parent.parent
_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Proc:
    """One child process listening on a loopback port."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.name = name
        self.popen = popen
        self.port = port
        self.log = log

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """User + system CPU time of the whole process (all threads) so far."""
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime

    def rss_mib(self) -> float:
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmRSS for {self.name}")

    def wait_ready(self, path: str = "/healthz", timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            if _http_ok(self.port, path):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"{self.name} not ready in {timeout} s:\n{self.log_tail()}")
            time.sleep(0.05)  # polling a child's port; bounded by the deadline

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (the server's graceful shutdown), then SIGKILL if it lingers."""
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


def _http_ok(port: int, path: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
            sock.sendall(request.encode())
            head = sock.recv(64)
    except OSError:
        return False
    return head.startswith(b"HTTP/1.1 200")


def _spawn(
    name: str, args: list[str], workdir: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    log = workdir / f"{name}.log"
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def start_fake_llm(workdir: Path) -> Proc:
    port = free_port()
    popen = _spawn("fake_llm", ["-m", "bench.fake_llm", "--port", str(port)], workdir)
    proc = Proc("fake_llm", popen, port, workdir / "fake_llm.log")
    proc.wait_ready("/_bench/ping")
    return proc


def server_env(llm: Proc, **extra: str) -> dict[str, str]:
    """The environment every benchmarked server runs with: the fake LLM, no run limit, one
    tool, quiet logs, a short shutdown, a deep outbound queue; `extra` adds or overrides."""
    return {
        "AGENT__LLM__BASE_URL": f"http://{llm.address}/v1",
        "AGENT__AGENT__MAX_CONCURRENT_RUNS_PER_TENANT": "100000",
        "AGENT__TOOLS__ENABLED": '["get_current_time"]',
        "AGENT__SERVER__LOG_LEVEL": "warning",
        "AGENT__SERVER__SHUTDOWN_TIMEOUT_S": "3",
        "AGENT__SERVER__OUTBOUND_QUEUE_SIZE": "100000",
        **extra,
    }


def start_agent_server(
    workdir: Path,
    llm: Proc,
    *,
    persistence: str = "sqlite",
    name: str = "agent",
    env: Mapping[str, str] | None = None,
) -> Proc:
    """The real server, `python -m server --config config.toml`, pointed at the fake LLM
    (`env` adds settings).

    persistence "off" runs the same app with an in-memory store (bench/memory_server.py):
    the server itself has no switch for that.
    """
    port = free_port()
    env = server_env(
        llm,
        AGENT__STORAGE__SQLITE_PATH=str(workdir / f"{name}.db"),
        AGENT__AGENT__MAX_STEPS_LIMIT="50",
        **(env or {}),
    )
    module = "server" if persistence == "sqlite" else "bench.memory_server"
    args = ["-m", module, "--config", str(ROOT / "config.toml"), "--port", str(port)]
    popen = _spawn(name, args, workdir, env)
    proc = Proc(name, popen, port, workdir / f"{name}.log")
    proc.wait_ready()
    return proc


def start_baseline(workdir: Path) -> Proc:
    port = free_port()
    popen = _spawn("baseline", ["-m", "bench.baseline", "--port", str(port)], workdir)
    proc = Proc("baseline", popen, port, workdir / "baseline.log")
    proc.wait_ready()
    return proc


def start_relay(workdir: Path, llm: Proc) -> Proc:
    """The bare relay (bench/relay.py), pointed at the fake LLM."""
    port = free_port()
    args = ["-m", "bench.relay", "--port", str(port), "--llm", llm.address]
    popen = _spawn("relay", args, workdir)
    proc = Proc("relay", popen, port, workdir / "relay.log")
    proc.wait_ready()
    return proc


def machine_info() -> dict[str, Any]:
    from server.cli import uvicorn_config
    from server.settings import load_settings

    config = uvicorn_config(object(), load_settings(None, {}))
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for dist in (
        "uvicorn",
        "uvloop",
        "websockets",
        "starlette",
        "orjson",
        "aiohttp",
        "httpx",
        "pymongo",
    ):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    # loop="auto" picks uvloop when it is installed; the connection guard is an h11 protocol
    uvloop = config.loop == "auto" and importlib.util.find_spec("uvloop") is not None
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
        # a name, or the protocol class itself (server/guard.py's lingering one)
        "uvicorn_ws": config.ws if isinstance(config.ws, str) else config.ws.__name__,
        "uvicorn_ws_per_message_deflate": config.ws_per_message_deflate,
        "uvicorn_http": "h11",
        "event_loop": "uvloop" if uvloop else "asyncio",
        "versions": versions,
        "loadavg_at_start": os.getloadavg(),
        "git": _git(),
    }


def _git() -> dict[str, Any]:
    def run(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=10
        )
        return done.stdout.strip()

    try:
        dirty = len(run("status", "--porcelain").splitlines())
        return {"commit": run("rev-parse", "HEAD"), "dirty_files": dirty}
    except (OSError, subprocess.TimeoutExpired):
        return {}
