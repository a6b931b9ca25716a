"""Soak: hundreds of sessions with random stops, disconnects and answers, then an audit.

    .venv/bin/python -m bench.soak [--sessions 300] [--runs 4] [--rounds 3] [--seconds 180]

Every stored event stream must be gap-free and duplicate-free, every run must end with exactly
one `response_complete` as its last event, no run may be left active, and memory must level
off: the rounds are equal, so after the first (which warms caches) RSS and the number of live
objects must stop growing. Exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

from server.app import create_app
from server.runner import AgentServer
from server.settings import load_settings
from tests.fakes.client import Client, kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason
from tests.fakes.servers import run_server, serve


def _random_reply(rng: random.Random) -> Any:
    def reply(phase: str) -> Reply:
        delay = rng.choice([0.0, 0.002, 0.01])
        if phase == "reason":
            return reason("Thinking about it " * rng.randint(1, 5), delay_s=delay)
        if phase == "act":
            pick = rng.random()
            if pick < 0.3:
                return act(FakeToolCall("request_input", {"question": "Which one?"}))
            if pick < 0.7:
                return act(FakeToolCall("get_current_time", {"timezone": "Europe/Paris"}))
            return Reply()
        if phase == "observe":
            done = rng.random() < 0.5
            return observe("Noted.", final="All done." if done else None, delay_s=delay)
        return Reply(chunks=["Here ", "you ", "go."], delay_s=delay)

    return reply


async def _session(address: str, rng: random.Random, runs: int, stats: dict[str, int]) -> str:
    client = await Client.connect(address)
    session = (await client.recv(timeout=30))["session_id"]
    last_seq = 0
    for _ in range(runs):
        await client.send({"type": "chat", "content": "soak", "agent_max_steps": 3})
        while True:
            try:
                frame = await client.recv(timeout=60)
            except Exception:  # noqa: BLE001 - the socket may be closed under load; resume
                stats["reconnects"] += 1
                client = await Client.connect(address, session_id=session, after_seq=last_seq)
                await client.recv(timeout=30)
                continue
            last_seq = frame.get("seq", last_seq)
            name = kind(frame)
            if name == "response_complete":
                stats["runs"] += 1
                break
            roll = rng.random()
            if name == "agent_request_input":
                if roll < 0.7:
                    await client.send({"type": "agent_user_input", "content": "that one"})
                    stats["answers"] += 1
                else:
                    await client.send({"type": "agent_control", "action": "stop"})
                    stats["stops"] += 1
            elif roll < 0.01:
                await client.send({"type": "agent_control", "action": "stop"})
                stats["stops"] += 1
            elif roll < 0.02:
                await client.close()
                stats["disconnects"] += 1
                client = await Client.connect(address, session_id=session, after_seq=last_seq)
                await client.recv(timeout=30)
    await client.close()
    return str(session)


def _audit(session: str, events: list[dict[str, Any]]) -> list[str]:
    problems = []
    seqs = [e["seq"] for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"{session}: seq not 1..{len(seqs)}")
    by_run: dict[str, list[str]] = defaultdict(list)
    for e in events:
        by_run[e["run_id"]].append(kind(e))
    for run_id, kinds in by_run.items():
        if kinds.count("response_complete") != 1 or kinds[-1] != "response_complete":
            problems.append(
                f"{session}/{run_id}: does not end with one response_complete "
                f"(last events: {', '.join(kinds[-4:])})"
            )
    return problems


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def soak(sessions: int, runs: int, rounds: int, seconds: float, seed: int) -> int:
    rng = random.Random(seed)
    fake = FakeLLM(default=_random_reply(rng), record=False)
    with tempfile.TemporaryDirectory() as tmp:
        async with serve(fake.app) as llm:
            settings = load_settings(
                None,
                {
                    "llm": {"base_url": f"http://{llm}/v1", "max_retries": 0},
                    "storage": {"sqlite_path": str(Path(tmp) / "soak.db")},
                    "agent": {
                        "max_concurrent_runs_per_tenant": sessions,
                        "request_input_timeout_s": 5,
                    },
                },
            )
            app = create_app(settings)
            async with run_server(app, AgentServer) as handle:
                hub = app.state.services.hub
                stats: dict[str, int] = defaultdict(int)
                ids: list[str] = []
                samples = []  # (rss MiB, live objects) after each round
                started = time.monotonic()
                for _ in range(rounds):  # equal rounds: memory must level off, not climb
                    ids += await asyncio.wait_for(
                        asyncio.gather(
                            *(
                                _session(handle.address, random.Random(rng.random()), runs, stats)
                                for _ in range(sessions)
                            )
                        ),
                        seconds,
                    )
                    try:
                        await asyncio.wait_for(hub.wait_empty(), 30)
                    except TimeoutError:
                        held = [
                            (lv.session_id, len(lv.subscribers), lv.run is not None, lv.status)
                            for lv in hub.sessions.values()
                        ]
                        print("STUCK", held[:5], len(held), file=sys.stderr)
                        raise
                    gc.collect()
                    samples.append((_rss_mib(), len(gc.get_objects())))
                elapsed = time.monotonic() - started
                problems = []
                async with httpx.AsyncClient(base_url=f"http://{handle.address}") as http:
                    for session in ids:
                        body = (await http.get(f"/api/sessions/{session}/events")).json()
                        problems += _audit(session, body["events"])
                if hub.active_runs():
                    problems.append(f"{hub.active_runs()} runs still active")
    report = {
        "sessions_per_round": sessions,
        "rounds": rounds,
        "elapsed_s": round(elapsed, 1),
        **stats,
        "rss_mib_after_each_round": [round(rss, 1) for rss, _ in samples],
        "objects_after_each_round": [objects for _, objects in samples],
        "problems": problems[:20],
    }
    print(json.dumps(report, indent=2))
    # The first round warms caches and the allocator; later rounds must not keep growing.
    first_rss, first_objects = samples[0]
    last_rss, last_objects = samples[-1]
    leaked = last_objects > first_objects * 1.10 or last_rss > first_rss * 1.25
    if leaked:
        print(f"memory kept growing: {samples}", file=sys.stderr)
    return 1 if problems or leaked else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=180, help="limit per round")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    return asyncio.run(soak(args.sessions, args.runs, args.rounds, args.seconds, args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
