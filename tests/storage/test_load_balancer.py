"""HAProxy (the Debian package) round robin in front of three server processes on one store:
`agent-server serve --workers 2` and a lone server.

Sessions go through the balancer only, and every reconnect may land on another process: runs
stream, questions are answered and runs stopped from wherever the client lands, and each
session's events arrive complete, in order, without a gap or a duplicate. The HAProxy config
is docs/examples/haproxy.cfg, the one docs/deploy.md ships.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.client import Client, Frame, kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, reason
from tests.fakes.processes import REPO, free_port, start_server_process

pytestmark = pytest.mark.slow

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
HAVE_HAPROXY = Path(HAPROXY).exists()
CONFIG_TEXT = (REPO / "docs" / "examples" / "haproxy.cfg").read_text()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@asynccontextmanager
async def haproxy(tmp_path: Path, backends: list[int]) -> AsyncIterator[str]:
    """Run HAProxy with the shipped config on a free port; yield its address once every
    backend passes its health check."""
    port = free_port()
    servers = "\n".join(f"    server agent{i} 127.0.0.1:{p} check" for i, p in enumerate(backends))
    config = tmp_path / "haproxy.cfg"
    text = CONFIG_TEXT.format(listen_port=port, servers=servers)
    config = await asyncio.to_thread(_write, config, text)
    proc = await asyncio.create_subprocess_exec(
        HAPROXY,
        "-f",
        str(config),
        "-db",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient() as http, asyncio.timeout(20):
            ok = 0
            while ok < 2 * len(backends):  # a few healthy answers in a row, via round robin
                try:
                    response = await http.get(f"http://127.0.0.1:{port}/healthz")
                    ok = ok + 1 if response.status_code == 200 else 0
                except httpx.TransportError:
                    assert proc.returncode is None, "haproxy exited"
                if ok == 0:
                    await asyncio.sleep(0.1)  # retry interval, bounded by the timeout above
        yield f"127.0.0.1:{port}"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 10)


def choose_reason(body: dict[str, Any]) -> Reply:
    """Runs asked to be stopped hang in Reason; the others stream a little, then go on."""
    if "stop me" in json.dumps(body["messages"]):
        return Reply(chunks=["Thinking ", "slowly"], hang_after=1)
    return reason("Let me ask which city.", delay_s=0.01)


async def asked_then_answered(address: str, n: int) -> tuple[list[Frame], str]:
    """A run whose question is answered after a reconnect (through the balancer)."""
    first = await Client.connect(address)
    session = (await first.recv())["session_id"]
    await first.send({"type": "chat", "content": f"trip {n}"})
    seen = await first.until("agent_request_input", timeout=15)
    await first.close()
    async with await Client.connect(address, session_id=session, after_seq=seen[-1]["seq"]) as c:
        hello = await c.recv()
        assert hello["status"] == "awaiting_input" and hello["pending_input"]
        await c.send({"type": "agent_user_input", "content": f"city {n}"})
        rest = await c.until("response_complete", timeout=15)
    return seen + rest, session


async def stopped_after_reconnect(address: str) -> list[Frame]:
    first = await Client.connect(address)
    await first.recv()
    session = first.seen[0]["session_id"]
    await first.send({"type": "chat", "content": "stop me"})
    seen = await first.until("agent_reason_delta", timeout=15)
    await first.close()
    async with await Client.connect(address, session_id=session, after_seq=seen[-1]["seq"]) as c:
        await c.recv()
        await c.send({"type": "agent_control", "action": "stop"})
        rest = await c.until("response_complete", timeout=15)
    return seen + rest


async def test_round_robin_through_haproxy_with_reconnects(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    if not HAVE_HAPROXY:
        pytest.skip("haproxy is not installed (scripts/test-deps.sh installs it)")
    fake_llm.script("reason", *[choose_reason] * 14)
    fake_llm.script("act", *[act(FakeToolCall("request_input", {"question": "Which city?"}))] * 6)
    env = {
        "AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "agent.db"),
        "AGENT__STORAGE__SHARED": "true",
        "AGENT__LLM__BASE_URL": fake_llm.base_url,  # type: ignore[attr-defined]
    }
    # Three server processes: `serve --workers 2` on one port (the kernel spreads what
    # HAProxy sends there over both) and a lone server on another.
    ports = [free_port() for _ in range(2)]
    procs = await asyncio.gather(
        start_server_process(tmp_path, ports[0], env, extra=["--workers", "2"], capture=True),
        start_server_process(tmp_path, ports[1], env),
    )
    workers_log = asyncio.create_task(procs[0].stdout.read())  # type: ignore[union-attr]
    try:
        async with haproxy(tmp_path, ports) as address:
            answered = await asyncio.gather(*(asked_then_answered(address, n) for n in range(6)))
            stopped = await stopped_after_reconnect(address)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), 20)
        log = (await asyncio.wait_for(workers_log, 20)).decode(errors="replace")

    for frames, _ in answered:
        numbered = [f for f in frames if "seq" in f]
        assert [f["seq"] for f in numbered] == list(range(1, len(numbered) + 1))
        assert kind(frames[-1]) == "response_complete" and kind(frames[-2]) == "agent_completion"
    tool_results = {
        m["content"]
        for r in fake_llm.requests
        if r.phase == "observe"
        for m in r.body["messages"]
        if m["role"] == "tool"
    }
    assert {f"city {n}" for n in range(6)} <= {t.strip('"') for t in tool_results}
    assert [f["seq"] for f in stopped if "seq" in f] == list(range(1, len(stopped) + 1))
    assert [kind(f) for f in stopped[-2:]] == ["agent_stopped", "response_complete"]
    assert stopped[-2]["reason"] == "user"
    # the --workers parent: both workers started and stopped cleanly on SIGTERM
    assert codes[0] == 0, log[-4000:]
