"""Benchmark suite: `make bench` (= `python -m bench`). Prints a Markdown table and writes
bench/results/<time>.{json,md} and bench/results/latest.{json,md}.

    python -m bench [--quick] [--only step,long,throughput,deltas,stop,concurrency,memory,storage,
                               replicas,workers,attacks,outage]
                    [--profile] [--no-nostore]

The agent server, the bare baseline and the fake LLM each run in their own process; this
process only generates load and measures. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    attacks,
    concurrency,
    deltas,
    long_session,
    memory,
    outage,
    profiling,
    replicas,
    step_overhead,
    stop_latency,
    storage,
    throughput,
    workers,
)
from bench.context import Bench, Sizes
from bench.procs import machine_info
from bench.report import markdown, profile_markdown, rows

RESULTS = Path(__file__).resolve().parent / "results"
ALL = (
    "step",
    "long",
    "throughput",
    "deltas",
    "stop",
    "concurrency",
    "memory",
    "storage",
    "replicas",
    "workers",
    "attacks",
    "outage",
)
NOTES = [
    "Server, bare baseline and fake LLM run in separate processes; the load generator is a "
    "lean raw-asyncio WebSocket client (bench/wsclient.py). Server CPU is from /proc/PID/stat, "
    "all threads.",
    "Servers run with log_level=warning, so logging is not measured.",
    "Persistence off: the server has no switch, so bench/memory_server.py runs the same "
    "create_app/uvicorn_config/AgentServer with bench/memstore.py's NullStore passed as "
    "create_app(store=...).",
    "Event `ts` has millisecond resolution, so event delays are ±1 ms.",
]


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _profiles(bench: Bench, out_dir: Path) -> dict[str, Any]:
    server = await bench.server("agent")
    nostore = await bench.server("agent_nostore")

    def streaming_on(proc: Any) -> Callable[[float], Awaitable[None]]:
        async def streaming(seconds: float) -> None:
            await bench.llm_default({"kind": "deltas", "deltas": 200})
            load = throughput.Streamers(proc.address)
            await load.start(bench.sizes.stream_conns)
            await asyncio.sleep(seconds)
            await load.stop()

        return streaming

    async def stepping(seconds: float) -> None:
        await bench.llm_default({"kind": "steps"})
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await step_overhead.run_steps(bench, 2)

    return {
        "throughput": await profiling.profile_workload(
            bench, "throughput", server, streaming_on(server), 8, out_dir
        ),
        "throughput_nostore": await profiling.profile_workload(
            bench, "throughput-nostore", nostore, streaming_on(nostore), 8, out_dir
        ),
        "step": await profiling.profile_workload(bench, "step", server, stepping, 8, out_dir),
    }


async def _main(args: argparse.Namespace) -> int:
    started, stamp = time.monotonic(), datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    sizes = Sizes.quick() if args.quick else Sizes()
    only = ALL if not args.only else tuple(x.strip() for x in args.only.split(",") if x.strip())
    unknown = set(only) - set(ALL) - {"profile"}
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(sorted(unknown))}; choose from {ALL}",
            file=sys.stderr,
        )
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="agent-bench-"))
    bench = Bench(workdir, sizes, notes=list(NOTES))
    machine = machine_info()
    steps: list[tuple[str, str, Callable[[], Awaitable[Any]]]] = [
        ("step", "step_overhead", lambda: step_overhead.run(bench)),
        ("long", "long_session", lambda: long_session.run(bench)),
        ("throughput", "throughput", lambda: throughput.run(bench, nostore=args.nostore)),
        ("deltas", "deltas", lambda: deltas.run(bench, nostore=args.nostore)),
        ("stop", "stop_latency", lambda: stop_latency.run(bench)),
        ("concurrency", "concurrency", lambda: concurrency.run(bench)),
        ("memory", "memory", lambda: memory.run(bench)),
        ("storage", "storage", lambda: storage.run(bench)),
        ("replicas", "replicas", lambda: replicas.run(bench)),
        ("workers", "workers", lambda: workers.run(bench)),
        ("attacks", "attacks", lambda: attacks.run(bench)),
        ("outage", "outage", lambda: outage.run(bench)),
    ]
    failed = False
    try:
        await bench.start()
        for key, name, work in steps:
            if key not in only:
                continue
            t0 = time.monotonic()
            print(f"[bench] {name} …", file=sys.stderr, flush=True)
            try:
                bench.results[name] = await work()
            except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the rest
                failed = True
                bench.results[name + "_error"] = repr(exc)
                bench.notes.append(f"{name} failed: {exc!r}")
                print(f"[bench] {name} FAILED: {exc!r}", file=sys.stderr)
            print(f"[bench] {name} done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        if args.profile or "profile" in only:
            print("[bench] profiling the server with py-spy …", file=sys.stderr, flush=True)
            bench.results["profiles"] = await _profiles(bench, RESULTS)
    finally:
        await bench.close()
        if failed:  # the failed benchmark's server logs are there: say where, keep them
            print(f"[bench] logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report: dict[str, Any] = {
        "started_at": stamp,
        "duration_s": round(time.monotonic() - started, 1),
        "machine": machine | {"loadavg_at_end": os.getloadavg()},
        "sizes": sizes.__dict__,
        "notes": bench.notes,
        "results": bench.results,
    }
    table_rows = rows(bench.results)
    report["table"] = [r.as_dict() for r in table_rows]
    text = markdown(report, table_rows)
    profiles = bench.results.get("profiles")
    names = [stamp, "latest"] if set(only) - {"profile"} else []
    for name in names:
        (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        (RESULTS / f"{name}.md").write_text(text)
    if profiles:
        ptext = profile_markdown(report, profiles)
        for name in (f"{stamp}-profile", "profile-latest"):
            (RESULTS / f"{name}.json").write_text(
                json.dumps({k: v for k, v in report.items() if k != "table"}, indent=2, default=str)
                + "\n"
            )
            (RESULTS / f"{name}.md").write_text(ptext)
        print(ptext)
    if names:
        print(text)
    print(f"results in {RESULTS}/ ({stamp}*)", file=sys.stderr)
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="short runs, for development")
    parser.add_argument(
        "--only", default="", help=f"comma-separated subset of {', '.join(ALL)} (and 'profile')"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also sample the server with py-spy (throughput and per-step)",
    )
    parser.add_argument(
        "--no-nostore",
        dest="nostore",
        action="store_false",
        help="skip the persistence-off throughput measurement",
    )
    args = parser.parse_args()
    _raise_fd_limit()
    return asyncio.run(_main(args))


if __name__ == "__main__":
    raise SystemExit(main())
