"""Sample the server with py-spy while a benchmark loads it; rank functions by self time.

    python -m bench --profile            (needs `pip install py-spy` in the venv)

Two views per workload: `gil` samples only the thread holding the GIL (where Python CPU
goes: the event loop, or the SQLite thread while it holds the GIL), and `all` samples every
thread that is not idle (adds C work done with the GIL released, e.g. SQLite's own).
Self time = samples whose innermost frame is the function; inclusive = samples with the
function anywhere on the stack. Raw py-spy output is kept beside the results.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.context import Bench
from bench.procs import ROOT, Proc

__all__ = ["available", "profile_workload", "top_functions"]

# Innermost frames that mean "waiting", which py-spy's idle detection can miss.
_IDLE = (
    "EpollSelector.select",
    "_worker (concurrent/futures/thread.py)",
    "Condition.wait",
    "Event.wait",
    "SimpleQueue.get",
    "Thread._wait_for_tstate_lock",
)
_LINE = re.compile(r":\d+\)$")
_ENTRY = (
    "<module> (server/__main__.py)",
    "main (server/cli.py)",
    "_serve (server/cli.py)",
    "main (bench/memory_server.py)",
    "<module> (bench/memory_server.py)",
)
# Parts of the server, each the samples whose stack passes through one of these functions
# (a sample can count in more than one part: the store's loop side runs inside the publish).
SUBSYSTEMS: dict[str, tuple[str, ...]] = {
    "LLM request: sending it (agent/adapters/openai_chat.py _open, aiohttp)": (
        "OpenAIChatModel._open ",
    ),
    "LLM stream: reading and parsing its events (openai_chat.py _read)": (
        "OpenAIChatModel._read ",
    ),
    "storage, event-loop side (SQLiteStore._write/_start_writer/_committed/_in_*)": (
        "SQLiteStore._write ",
        "SQLiteStore._start_writer ",
        "SQLiteStore._committed ",
        "SQLiteStore._in_writer ",
        "SQLiteStore._in_reader ",
        "SQLiteStore._read ",
    ),
    "storage, writer thread (SQLiteStore._commit)": ("SQLiteStore._commit ",),
    "publish path (RunSink → LiveSession: frame, shielded task, lock, store call, deliver)": (
        "RunSink.emit ",
        "RunSink.append ",
        "LiveSession.publish ",
        "LiveSession.save_messages ",
        "LiveSession._locked ",
        "shielded ",
    ),
    "WebSocket send (Connection.write_forever)": ("Connection.write_forever ",),
    "control-block parsing (ControlStream)": ("ControlStream.feed ", "ControlStream.finish "),
    "context window + token counting (RunRecorder.messages)": ("RunRecorder.messages ",),
    "tool calls (run_tool_calls)": ("run_tool_calls ",),
}


def available() -> str | None:
    """The py-spy executable, if installed."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


def _short(frame: str) -> str:
    """'func (/long/path/site-packages/pkg/mod.py:12)' -> 'func (pkg/mod.py)'."""
    frame = _LINE.sub(")", frame)
    for marker in ("site-packages/", f"{ROOT}/", "/lib/python3."):
        at = frame.find(marker)
        if at != -1:
            rest = frame[at + len(marker) :]
            if marker == "/lib/python3.":
                rest = rest.split("/", 1)[-1]
            head = frame[: frame.index("(") + 1] if "(" in frame else ""
            return f"{head}{rest}"
    return frame


def top_functions(raw: Path, limit: int = 20) -> dict[str, Any]:
    """Self and inclusive sample shares of the busiest functions in a py-spy raw file."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    parts: Counter[str] = Counter()
    total = idle = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if f and not f.startswith("process ")]
        if not frames:
            continue
        if any(frames[-1].startswith(name) for name in _IDLE):
            idle += count
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
        for part, names in SUBSYSTEMS.items():
            if any(frame.startswith(names) for frame in frames):
                parts[part] += count

    def ranked(counter: Counter[str]) -> list[list[Any]]:
        return [[name, round(100 * n / max(total, 1), 1)] for name, n in counter.most_common(limit)]

    ours = Counter(
        {
            k: v
            for k, v in inclusive.items()
            if ("agent/" in k or "server/" in k) and k not in _ENTRY
        }
    )
    return {
        "samples": total,
        "idle_samples_dropped": idle,
        "subsystems": {part: round(100 * parts[part] / max(total, 1), 1) for part in SUBSYSTEMS},
        "self": ranked(own),
        "inclusive_project": ranked(ours),
    }


async def _record(pyspy: str, proc: Proc, seconds: float, out: Path, gil: bool) -> None:
    args = [
        pyspy,
        "record",
        "-p",
        str(proc.pid),
        "-d",
        str(int(seconds)),
        "-r",
        "200",
        "-f",
        "raw",
        "-o",
        str(out),
    ]
    if gil:
        args.append("--gil")

    def record() -> None:
        done = subprocess.run(
            args, capture_output=True, text=True, check=False, timeout=seconds + 60
        )
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"py-spy failed: {done.stderr[-500:]}")

    await asyncio.to_thread(record)


async def profile_workload(
    bench: Bench,
    name: str,
    proc: Proc,
    load: Callable[[float], Awaitable[object]],
    seconds: float,
    out_dir: Path,
) -> dict[str, Any]:
    """Run `load(duration)` twice under py-spy (GIL view, then all threads)."""
    pyspy = available()
    if pyspy is None:
        return {"skipped": "py-spy is not installed (pip install py-spy)"}
    views: dict[str, Any] = {}
    for view in ("gil", "all"):
        raw = out_dir / f"profile-{name}-{view}.txt"
        recorder = asyncio.create_task(_record(pyspy, proc, seconds, raw, view == "gil"))
        await load(seconds + 1.0)
        await recorder
        views[view] = top_functions(raw)
        views[view]["raw"] = raw.name
    return views
