"""The eval's figures: per model and loop, rates over every run, and a Markdown table."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from bench.eval.tasks import KINDS

__all__ = ["markdown", "summarize"]


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def _rate(rows: list[dict[str, Any]], key: str) -> float | None:
    return round(sum(1 for r in rows if r[key]) / len(rows), 3) if rows else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{"<model> · <loop>": figures}."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["model"], row["loop"])].append(row)
    # The tasks every loop of a model got right at least once: times compared on the same work
    solved: dict[str, list[set[str]]] = defaultdict(list)
    for (model, _), runs in groups.items():
        solved[model].append({r["task"] for r in runs if r["right"]})
    shared = {model: set.intersection(*sets) for model, sets in solved.items()}
    out: dict[str, dict[str, Any]] = {}
    for (model, loop), runs in groups.items():
        right = [r for r in runs if r["right"]]
        out[f"{model} · {loop}"] = {
            "model": model,
            "loop": loop,
            "runs": len(runs),
            "right": _rate(runs, "right"),
            "done": _rate(runs, "done"),
            "by_kind": {
                kind: _rate([r for r in runs if r["kind"] == kind], "right")
                for kind in KINDS
                if any(r["kind"] == kind for r in runs)
            },
            "median_wall_s": _median([r["wall_s"] for r in runs]),
            "median_wall_right_s": _median([r["wall_s"] for r in right]),
            "median_wall_right_shared_s": _median(
                [r["wall_s"] for r in right if r["task"] in shared[model]]
            ),
            "tasks_right_in_both": len(shared[model]),
            "median_first_answer_s": _median(
                [r["first_answer_s"] for r in runs if r["first_answer_s"] is not None]
            ),
            "mean_model_calls": round(statistics.fmean(r["model_calls"] for r in runs), 2),
            "mean_steps": round(statistics.fmean(r["steps"] for r in runs), 2),
            "mean_prompt_tokens": round(statistics.fmean(r["prompt_tokens"] for r in runs)),
            "mean_completion_tokens": round(statistics.fmean(r["completion_tokens"] for r in runs)),
            "runs_with_echo": sum(1 for r in runs if r["echoes"]),
            "longest_phase_chars": max(r["longest_phase_chars"] for r in runs),
            "longest_phase_s": max(r["longest_phase_s"] for r in runs),
        }
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


def _num(value: Any, unit: str = "") -> str:
    return "–" if value is None else f"{value}{unit}"


def markdown(report: dict[str, Any]) -> str:
    summary: dict[str, dict[str, Any]] = report["summary"]
    columns = list(summary)
    lines = [
        f"# Eval: {report['started']} ({report['repeats']} runs of each task)",
        "",
        "| figure | " + " | ".join(columns) + " |",
        "| --- |" + " --- |" * len(columns),
    ]

    def row(name: str, render: Any) -> None:
        lines.append(f"| {name} | " + " | ".join(render(summary[c]) for c in columns) + " |")

    row("right answers", lambda s: _pct(s["right"]))
    row("runs that ended with an answer", lambda s: _pct(s["done"]))
    for kind in KINDS:
        if any(kind in s["by_kind"] for s in summary.values()):
            row(f"· right, {kind}", lambda s, k=kind: _pct(s["by_kind"].get(k)))
    row("median time, all runs", lambda s: _num(s["median_wall_s"], " s"))
    row("median time to a right answer", lambda s: _num(s["median_wall_right_s"], " s"))
    row(
        "· on the tasks every loop got right",
        lambda s: (
            f"{_num(s['median_wall_right_shared_s'], ' s')} ({s['tasks_right_in_both']} tasks)"
        ),
    )
    row("median time to the first answer token", lambda s: _num(s["median_first_answer_s"], " s"))
    row("model calls per run (mean)", lambda s: _num(s["mean_model_calls"]))
    row("steps per run (mean)", lambda s: _num(s["mean_steps"]))
    row("prompt tokens per run (mean)", lambda s: _num(s["mean_prompt_tokens"]))
    row("completion tokens per run (mean)", lambda s: _num(s["mean_completion_tokens"]))
    row("runs showing a sentence of our prompts", lambda s: f"{s['runs_with_echo']} of {s['runs']}")
    row("longest text of one phase (chars)", lambda s: _num(s["longest_phase_chars"]))
    row("longest phase (s)", lambda s: _num(s["longest_phase_s"]))
    return "\n".join(lines) + "\n"
