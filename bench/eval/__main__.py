"""`make eval` (= `python -m bench.eval`): the task benchmark, our loop beside a plain one.

    python -m bench.eval [--models qwen,smollm2] [--repeats 3] [--tasks id,id|kind]
                         [--loops ours,plain] [--base-url URL --model NAME]

By default each bundled model (server/local_model.py) is served by llama.cpp on loopback and
both loops run every task `--repeats` times, at the same time, on that one server (two slots).
`--base-url` and `--model` run the same table against any OpenAI-compatible endpoint instead.
Writes bench/results/eval-<time>.{json,md} and eval-latest.{json,md}; docs/eval.md explains it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.eval.ours import OurLoop
from bench.eval.pages import PageServer
from bench.eval.plain import PlainLoop
from bench.eval.record import Record, add_echo_sources
from bench.eval.report import markdown, summarize
from bench.eval.tasks import KINDS, TASKS, Task
from bench.procs import machine_info
from server.local_model import LlamaServer, qwen_model, smollm2_model

RESULTS = Path(__file__).resolve().parent.parent / "results"
BUNDLED = {"qwen": qwen_model, "smollm2": smollm2_model}
CTX_PER_SLOT = 8192  # the window the README's local-model example uses


def _chosen(spec: str | None) -> list[Task]:
    if not spec:
        return list(TASKS)
    wanted = set(spec.split(","))
    return [t for t in TASKS if t.id in wanted or t.kind in wanted]


async def _run_loop(
    loop: Any,
    tasks: Sequence[Task],
    repeats: int,
    label: str,
    out: list[dict[str, Any]],
    rows_file: Path,
) -> None:
    for repeat in range(1, repeats + 1):
        for task in tasks:
            record = Record()
            outcome = await loop.run(task, record)
            record.finish()
            right = task.right(outcome)
            row = {
                "model": label,
                "loop": loop.name,
                "task": task.id,
                "kind": task.kind,
                "repeat": repeat,
                "done": outcome.done,
                "right": right,
                "stop_reason": outcome.stop_reason,
                "error": outcome.error,
                "wall_s": round(outcome.ended - outcome.started, 2),
                "answer": outcome.answer[:600],
                "calls": [
                    {"name": c["name"], "ok": c["ok"], "arguments": c["arguments"]}
                    for c in outcome.calls
                ],
                **record.as_dict(),
            }
            out.append(row)
            with rows_file.open("a") as rows:  # each run as it ends: a cut-short eval keeps it
                rows.write(json.dumps(row, ensure_ascii=False) + "\n")
            mark = "right" if right else ("done" if outcome.done else "failed")
            print(
                f"[{label} · {loop.name}] {task.id} #{repeat}: {mark} in {row['wall_s']} s, "
                f"{row['model_calls']} calls" + (f" ({outcome.error})" if outcome.error else ""),
                flush=True,
            )


async def _one_model(
    label: str, base_url: str, model: str, args: argparse.Namespace, work: Path
) -> list[dict[str, Any]]:
    tasks = _chosen(args.tasks)
    rows: list[dict[str, Any]] = []
    with PageServer() as pages:
        runs = []
        ours = None
        if "ours" in args.loops:
            ours = OurLoop(work / f"{label}-ours", base_url, model, pages.port)
            (work / f"{label}-ours").mkdir()
            ours.start()
            runs.append(_run_loop(ours, tasks, args.repeats, label, rows, work / "rows.jsonl"))
        (work / f"{label}-plain").mkdir()
        plain = PlainLoop(work / f"{label}-plain", base_url, model, pages.port)
        await plain.astart()  # its tools are ours: their descriptions are ours to find
        add_echo_sources(plain.tool_texts())
        if "plain" in args.loops:
            runs.append(_run_loop(plain, tasks, args.repeats, label, rows, work / "rows.jsonl"))
        try:
            await asyncio.gather(*runs)
        finally:
            if ours is not None:
                ours.stop()
            await plain.astop()
    return rows


async def _main(args: argparse.Namespace) -> int:
    started = datetime.now(UTC)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="agent-eval-") as tmp, ExitStack() as stack:
        work = Path(args.workdir or tmp)
        await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
        if args.base_url:
            targets = [(args.model, args.base_url, args.model)]
        else:
            targets = []
            for name in args.models.split(","):
                model_path = BUNDLED[name]()
                server = LlamaServer(
                    model_path,
                    ctx_size=CTX_PER_SLOT * 2,
                    threads=args.threads,
                    parallel=2,
                    log=work / f"llama-{name}.log",
                )
                targets.append((name, server, name))
        for label, endpoint, model in targets:
            if isinstance(endpoint, LlamaServer):
                endpoint.start()
                stack.callback(endpoint.close)
                base_url = endpoint.base_url
            else:
                base_url = endpoint
            print(f"== {label}: {base_url}", flush=True)
            rows += await _one_model(label, base_url, model, args, work / "")
            if isinstance(endpoint, LlamaServer):
                endpoint.close()
    return await asyncio.to_thread(_report, rows, started, args.repeats)


def _report(rows: list[dict[str, Any]], started: datetime, repeats: int) -> int:
    report = {
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "repeats": repeats,
        "summary": summarize(rows),
        "runs": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    text = markdown(report)
    for name in (f"eval-{stamp}", "eval-latest"):
        (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
        (RESULTS / f"{name}.md").write_text(text)
    print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eval", description=__doc__)
    parser.add_argument("--models", default="qwen,smollm2", help="bundled models to serve")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint instead")
    parser.add_argument("--model", default="default", help="the model name at --base-url")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", help=f"task ids or kinds ({', '.join(KINDS)})")
    parser.add_argument("--loops", default="ours,plain")
    parser.add_argument(
        "--workdir", help="keep logs, databases and rows.jsonl here (default: a temp dir)"
    )
    parser.add_argument(
        "--from-rows", type=Path, help="only write the report of a rows.jsonl (a cut-short run)"
    )
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.from_rows is not None:
        rows = [json.loads(line) for line in args.from_rows.read_text().splitlines() if line]
        tasks = {t.id: t for t in TASKS}
        for row in rows:  # judged by today's rule: a right answer was looked up
            task = tasks.get(row["task"])
            row["right"] = row["right"] and (task is None or task.looked_up(row["calls"]))
        return _report(rows, datetime.now(UTC), max((r["repeat"] for r in rows), default=0))
    t0 = time.monotonic()
    code = asyncio.run(_main(args))
    print(f"eval took {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
