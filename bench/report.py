"""Turn the results into table rows (with the issue's targets) and a Markdown report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Row", "markdown", "profile_markdown", "rows"]


@dataclass
class Row:
    bench: str
    metric: str
    figure: dict[str, Any] | None  # {median, min, max}
    unit: str
    target: str = ""
    met: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        fig = self.figure or {}
        return {
            "bench": self.bench,
            "metric": self.metric,
            "median": fig.get("median"),
            "min": fig.get("min"),
            "max": fig.get("max"),
            "unit": self.unit,
            "target": self.target,
            "met": self.met,
        }


def _get(data: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _check(figure: dict[str, Any] | None, test: Callable[[float], bool]) -> bool | None:
    if not figure or figure.get("median") is None:
        return None
    return bool(test(figure["median"]))


def _single(value: float | None) -> dict[str, Any] | None:
    return None if value is None else {"median": value, "min": value, "max": value}


def rows(results: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    step = results.get("step_overhead")
    if step:
        b = "1 per-step overhead (SQLite)"
        fig = step["overhead_median_ms"]
        out += [
            Row(
                b,
                "overhead per step, median (vs bare round trips)",
                fig,
                "ms",
                "< 2 ms",
                _check(fig, lambda v: v < 2),
            ),
            Row(b, "overhead per step, p99 (vs bare round trips)", step["overhead_p99_ms"], "ms"),
            Row(
                b,
                "overhead per step, median (vs fake's own time)",
                step["overhead_vs_fake_median_ms"],
                "ms",
            ),
            Row(
                b,
                "overhead per step, p99 (vs fake's own time)",
                step["overhead_vs_fake_p99_ms"],
                "ms",
            ),
            *(
                Row(b, f"  … step {n} only, median", fig, "ms")
                for n, fig in step.get("overhead_median_ms_by_step", {}).items()
            ),
            Row(b, "wall time per step, median", step["wall_median_ms"], "ms"),
            Row(b, "3 LLM round trips, minimal httpx client", step["round_trips_ms"], "ms"),
            Row(b, "fake LLM's own time per step (3 calls)", step["fake_median_ms"], "ms"),
            Row(b, "server CPU per step", step["server_cpu_ms_per_step"], "ms"),
            Row(
                b,
                "LLM TCP connections opened per LLM request",
                step.get("llm_connections_per_request"),
                "×",
            ),
            Row(
                b,
                "prefix-cache share of a call's prompt from step 2 on, median",
                step.get("prefix_cache_share_median"),
                "%",
                "≥ 80%",
                _check(step.get("prefix_cache_share_median"), lambda v: v >= 80),
            ),
            Row(b, "  … lowest call", step.get("prefix_cache_share_min"), "%"),
        ]
    ls = results.get("long_session")
    if ls:
        b = "1b long session (one-step runs, SQLite)"
        out += [
            Row(
                b,
                f"server CPU per run, {ls['short_runs']} runs before",
                ls["cpu_ms_per_run_short"],
                "ms",
            ),
            Row(
                b,
                f"server CPU per run, {ls['long_runs']} runs before",
                ls["cpu_ms_per_run_long"],
                "ms",
            ),
            Row(b, "  … long / short", ls["ratio"], "×"),
        ]
    tp = results.get("throughput")
    if tp:
        b = f"2 throughput ({tp['conns']} runs, {tp['frames_per_run']} events/run)"
        out.append(Row(b, "bare endpoint", tp["baseline"]["events_per_s"], "events/s"))
        out.append(
            Row(b, "bare endpoint CPU per event", tp["baseline"]["server_cpu_us_per_event"], "µs")
        )
        if "relay" in tp:
            out += [
                Row(
                    b,
                    "bare relay (the run's LLM calls, frames)",
                    tp["relay"]["rounds_per_s"],
                    "runs/s",
                ),
                Row(b, "bare relay: ratio to bare", tp["relay"]["ratio"], "×"),
                Row(b, "bare relay: CPU per run", tp["relay"]["server_cpu_ms_per_round"], "ms"),
            ]
        for name, label, floor in (("sqlite", "SQLite", 0.40), ("nostore", "no persistence", 0.50)):
            if name not in tp:
                continue
            ratio = tp[name]["ratio"]
            out += [
                Row(b, f"agent, {label}", tp[name]["events_per_s"], "events/s"),
                Row(
                    b,
                    f"agent, {label}: ratio to bare",
                    ratio,
                    "×",
                    f"≥ {floor:.2f}",
                    _check(ratio, floor.__le__),
                ),
                Row(b, f"agent, {label}: CPU per event", tp[name]["server_cpu_us_per_event"], "µs"),
                Row(b, f"agent, {label}: runs/s", tp[name].get("rounds_per_s"), "runs/s"),
                Row(
                    b,
                    f"agent, {label}: events per run under load",
                    tp[name].get("events_per_round"),
                    "events",
                ),
                Row(
                    b, f"agent, {label}: CPU per run", tp[name].get("server_cpu_ms_per_round"), "ms"
                ),
                Row(
                    b,
                    f"agent, {label}: CPU per run over the relay's",
                    tp[name].get("cpu_ratio_to_relay"),
                    "×",
                ),
            ]
    dl = results.get("deltas")
    if dl:
        b = f"2b delta events ({dl['sessions']} sessions, a chunk every {dl['pace_ms']:g} ms)"
        if "relay" in dl:
            out.append(
                Row(
                    b,
                    "bare relay: CPU per delta event (marginal; the floor)",
                    dl["relay"]["cpu_us_per_delta"],
                    "µs",
                )
            )
        for name, label, most in (("sqlite", "SQLite", 30), ("nostore", "no persistence", 20)):
            if name in dl:
                figure = dl[name]["cpu_us_per_delta"]
                out += [
                    Row(
                        b,
                        f"server CPU per delta event, {label} (marginal)",
                        figure,
                        "µs",
                        f"≤ {most} µs",
                        _check(figure, lambda v, most=most: v <= most),
                    ),
                    Row(
                        b,
                        f"  … delta events per run of {dl['chunks']} chunks",
                        dl[name]["deltas_per_run"],
                        "events",
                    ),
                ]
    stop = results.get("stop_latency")
    if stop:
        b = "3 stop latency"
        un = stop["unloaded"]
        out += [
            Row(b, "unloaded p50", un["p50_ms"], "ms"),
            Row(
                b,
                "  … of which until agent_stopped was emitted (p50)",
                un.get("before_emit_p50_ms"),
                "ms",
            ),
            Row(
                b,
                "unloaded p99",
                un["p99_ms"],
                "ms",
                "< 5 ms",
                _check(un["p99_ms"], lambda v: v < 5),
            ),
        ]
        half = stop.get("half")
        if half:
            want = half.get("requested_background_events_per_s")
            out += [
                Row(
                    b,
                    f"200 sessions at half bare rate: p99 (asked {want}/s)",
                    half["p99_ms"],
                    "ms",
                    "< 50 ms",
                    _check(half["p99_ms"], lambda v: v < 50),
                ),
                Row(
                    b,
                    "  … background events/s achieved",
                    half["background_events_per_s"],
                    "events/s",
                ),
            ]
        sat = stop["saturation"]
        worst = max(stop[k]["worst_ms"] for k in ("half", "saturation") if k in stop)
        out += [
            Row(b, "200 sessions at saturation: p50", sat["p50_ms"], "ms"),
            Row(
                b,
                "  … of which until agent_stopped was emitted (p50)",
                sat.get("before_emit_p50_ms"),
                "ms",
            ),
            Row(b, "200 sessions at saturation: p99", sat["p99_ms"], "ms"),
            Row(b, "  … background events/s achieved", sat["background_events_per_s"], "events/s"),
        ]
        mid = stop.get("agent_half")
        if mid:
            want = mid.get("requested_background_events_per_s")
            out += [
                Row(
                    b,
                    f"200 sessions at half the agent's own max ({want}/s): p50",
                    mid["p50_ms"],
                    "ms",
                ),
                Row(b, "  … p99", mid["p99_ms"], "ms"),
                Row(
                    b,
                    "  … background events/s achieved",
                    mid["background_events_per_s"],
                    "events/s",
                ),
            ]
        out += [
            Row(
                b,
                "worst single stop at saturation",
                _single(round(worst, 1)),
                "ms",
                "≤ 250 ms",
                worst <= 250,
            ),
        ]
    conc = results.get("concurrency")
    if conc:
        b = "4 concurrency (~1 s/LLM call)"
        for level, data in conc["levels"].items():
            out.append(
                Row(
                    b,
                    f"{level} runs: p99 event delay",
                    data["p99_delay_ms"],
                    "ms",
                    "< 100 ms",
                    data["met"],
                )
            )
            out.append(
                Row(b, f"{level} runs: /healthz p99 (loop lag)", data["healthz_p99_ms"], "ms")
            )
        best = conc["max_runs_within_bound"]
        out.append(
            Row(b, "most active runs within bound", _single(best), "runs", "≥ 500", best >= 500)
        )
        # the loop-lag target is set at 100 runs: report it there when that level ran
        lag_level = "100" if "100" in conc["levels"] else str(best) if best else None
        lag_level = lag_level or next(iter(conc["levels"]), None)
        if lag_level:
            fig = conc["levels"][lag_level]["healthz_p99_ms"]
            out.append(
                Row(
                    b,
                    f"event-loop lag p99 at {lag_level} runs",
                    fig,
                    "ms",
                    "< 20 ms",
                    _check(fig, lambda v: v < 20),
                )
            )
    mem = results.get("memory")
    if mem:
        b = "5 memory"
        out += [
            Row(b, "RSS per idle connection, bare", mem["baseline"]["idle_kib_per_conn"], "KiB"),
            Row(b, "RSS per idle connection, agent", mem["agent"]["idle_kib_per_conn"], "KiB"),
            Row(
                b,
                "idle agent / bare",
                mem["idle_ratio"],
                "×",
                "≤ 2",
                _check(mem["idle_ratio"], lambda v: v <= 2),
            ),
            Row(b, "RSS per active run", mem["agent"].get("active_kib_per_run"), "KiB"),
        ]
    st = results.get("storage")
    if st:
        b = f"6 storage ({st['sessions']} sessions, 1 event/append)"
        out.append(Row(b, "SQLiteStore.append_events", st["sqlite"]["events_per_s"], "events/s"))
        out.append(Row(b, "  … latency of one append, p99", st["sqlite"]["append_p99_ms"], "ms"))
        mongo = st["mongodb"]
        out.append(
            Row(
                b,
                "MongoStore.append_events (FerretDB)"
                + (f" — skipped: {mongo['skipped']}" if "skipped" in mongo else ""),
                mongo.get("events_per_s"),
                "events/s",
            )
        )
        if "append_p99_ms" in mongo:
            out.append(Row(b, "  … latency of one append, p99", mongo["append_p99_ms"], "ms"))
    rep = results.get("replicas")
    if rep:
        b = "7 two processes, one store"
        for name, label in (("sqlite", "SQLite"), ("mongodb", "FerretDB")):
            data = rep.get(name) or {}
            if "skipped" in data or not data:
                out.append(Row(b, f"{label}: skipped {data.get('skipped', '')}", None, ""))
                continue
            local, tail = _single(data["local_p99_ms"]), _single(data["tail_p99_ms"])
            stop = _single(data["stop_p99_ms"])
            out.append(Row(b, f"{label}: event delay on the owner, p99", local, "ms"))
            out.append(
                Row(
                    b,
                    f"{label}: cross-process tail delay, p99",
                    tail,
                    "ms",
                    "< 250 ms",
                    _check(tail, lambda v: v < 250),
                )
            )
            out.append(
                Row(
                    b,
                    f"{label}: stop via the other process, p99",
                    stop,
                    "ms",
                    "< 500 ms",
                    _check(stop, lambda v: v < 500),
                )
            )
            if "floor_p99_ms" in data:
                out.append(
                    Row(
                        b,
                        f"  … floor: one append then tail_events, bare store, p99 "
                        f"({data['floor_events_stored']} events stored)",
                        _single(data["floor_p99_ms"]),
                        "ms",
                    )
                )
    wk = results.get("workers")
    if wk:
        b = f"8 --workers N ({wk['cpus']} CPUs, ~1 s/LLM call)"
        for n, lock in (wk.get("sqlite_lock_wait") or {}).items():
            out.append(
                Row(
                    b,
                    f"SQLite write-lock wait, {n} plain writer process(es), p99",
                    _single(lock["p99_ms"]),
                    "ms",
                )
            )
        for name, label in (("sqlite", "SQLite"), ("mongodb", "FerretDB")):
            for n, data in (wk.get(name) or {}).items():
                if isinstance(data, dict) and "most_runs_within_bound" in data:
                    out.append(
                        Row(
                            b,
                            f"{label}, {n} process(es): most runs with p99 < 100 ms",
                            _single(data["most_runs_within_bound"]),
                            "runs",
                        )
                    )
    out += _attack_rows(results.get("attacks"))
    return out + _outage_rows(results.get("outage"))


def _attack_rows(attacks: dict[str, Any] | None) -> list[Row]:
    """Another session's run and health-check latency under each attack, next to unloaded."""
    if not attacks or "unloaded" not in attacks:
        return []
    b = "9 a tenant's latency under attack"
    out: list[Row] = []
    for name, figures in attacks.items():
        for key, label in (
            ("run", "one-step run"),
            ("healthz", "/healthz"),
            ("health_port", "health_port"),
        ):
            ratio = figures.get("ratio_to_unloaded", {}).get(f"{key}_median_ms")
            out.append(
                Row(
                    b,
                    f"{name}: {label}, median (p95 {figures[f'{key}_p95_ms']} ms)",
                    _single(figures[f"{key}_median_ms"]),
                    "ms",
                    "" if name == "unloaded" else "< 2× unloaded",
                    None if ratio is None or name == "unloaded" else ratio < 2,
                )
            )
    return out


def _outage_rows(outage: dict[str, Any] | None) -> list[Row]:
    """9: the pause a client sees while the store stalls, and the runs' outcome."""
    out: list[Row] = []
    for name, label in (("mongodb", "FerretDB paused"), ("sqlite", "SQLite write-locked")):
        data = (outage or {}).get(name)
        if not data:
            continue
        b = "10 a store stall below the tolerance"
        if "skipped" in data:
            out.append(Row(b, f"{label}: skipped {data['skipped']}", None, ""))
            continue
        stall = data["stall_s"]
        longest = data["pause_max_s"]
        out += [
            Row(
                b,
                f"{label} {stall:g} s: longest pause a client saw",
                _single(longest),
                "s",
                f"< {stall + 3:g} s",
                _check(_single(longest), lambda v, s=stall: v < s + 3),
            ),
            Row(b, f"{label} {stall:g} s: shortest such pause", _single(data["pause_min_s"]), "s"),
            Row(
                b,
                f"{label} {stall:g} s: runs finished, gap-free",
                _single(data["finished"] if data["gap_free"] else 0),
                f"of {data['runs']}",
                "all",
                data["gap_free"] and data["finished"] == data["runs"],
            ),
        ]
    return out


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def table(table_rows: list[Row]) -> str:
    lines = [
        "| benchmark | metric | median | min | max | unit | target | met |",
        "| --- | --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    last = ""
    for row in table_rows:
        fig = row.figure or {}
        met = {True: "yes", False: "**NO**", None: ""}[row.met]
        bench = row.bench if row.bench != last else ""
        last = row.bench
        lines.append(
            f"| {bench} | {row.metric} | {_fmt(fig.get('median'))} | {_fmt(fig.get('min'))} "
            f"| {_fmt(fig.get('max'))} | {row.unit} | {row.target} | {met} |"
        )
    return "\n".join(lines)


def markdown(report: dict[str, Any], table_rows: list[Row]) -> str:
    m = report["machine"]
    head = [
        f"# Benchmark results, {report['started_at']}",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), Python {m['python']}, "
        f"uvicorn {m['versions'].get('uvicorn')} ws={m['uvicorn_ws']} "
        f"(per-message deflate {'on' if m['uvicorn_ws_per_message_deflate'] else 'off'}), "
        f"http={m['uvicorn_http']}, event loop {m.get('event_loop', 'asyncio')}, "
        "load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}; "
        f"commit {m.get('git', {}).get('commit', '?')[:10]}"
        f" ({m.get('git', {}).get('dirty_files', '?')} uncommitted files).",
        "",
        f"Every figure: median of {report['sizes']['reps']} repetitions, with min and max. "
        f"Total time {report['duration_s']:.0f} s.",
        "",
        table(table_rows),
    ]
    if report.get("notes"):
        head += ["", "Notes:", ""] + [f"- {note}" for note in report["notes"]]
    return "\n".join(head) + "\n"


def profile_markdown(report: dict[str, Any], profiles: dict[str, Any], top: int = 15) -> str:
    """Top functions by self time, and the project's functions by inclusive time."""
    lines = [f"# Server profiles (py-spy), {report['started_at']}", ""]
    for workload, views in profiles.items():
        if "skipped" in views:
            lines += [f"## {workload}: skipped ({views['skipped']})", ""]
            continue
        for view, data in views.items():
            what = (
                "GIL holder only: where Python CPU goes"
                if view == "gil"
                else "all non-idle threads"
            )
            lines += [
                f"## {workload} — {what} ({data['samples']} samples, raw: {data['raw']})",
                "",
                "| part of the server | % of samples |",
                "| --- | ---: |",
            ]
            lines += [f"| {part} | {share} |" for part, share in data["subsystems"].items()]
            lines += [
                "",
                "| self % | function | | inclusive % | project function |",
                "| ---: | --- | --- | ---: | --- |",
            ]
            own, mine = data["self"][:top], data["inclusive_project"][:top]
            for i in range(max(len(own), len(mine))):
                left = own[i] if i < len(own) else ["", ""]
                right = mine[i] if i < len(mine) else ["", ""]
                lines.append(f"| {left[1]} | `{left[0]}` | | {right[1]} | `{right[0]}` |")
            lines.append("")
    return "\n".join(lines).replace("``", "")
