"""An idle-socket flood that reconnects cannot deny other tenants or health probes (issue 42,
MEDIUM). Bounded: 120 sockets, at most 40,000 connections or 60 s, loopback only.

4,300 idle sockets, each reopened as soon as the server closed it: 225 of ~350 `/healthz`
probes got 503 and 12 of 17 runs of another tenant failed, the 8 health slots held by the
flood for their 2 s head allowance each.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.health import HealthListener
from server.settings import ConfigError, load_settings
from tests.fakes.client import Client, kind
from tests.fakes.openai_server import FakeLLM
from tests.fakes.processes import REPO, free_port, start_server_process
from tests.security.harness import TENANT_TOKENS, bearer, raw_exchange, status_of
from tests.storage.test_load_balancer import HAVE_HAPROXY, haproxy


async def test_a_reconnecting_flood_leaves_runs_and_health_probes_served(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """The server, the flood and the tenant are three processes, as in the attack: 120
    sockets from 127.0.0.2 against a cap of 40, each reopened as soon as it is closed (at
    most 40,000 connections or 60 s); the tenant comes from 127.0.0.1."""
    health_port = free_port()
    env = {
        "AGENT__SERVER__MAX_CONNECTIONS": "40",
        "AGENT__SERVER__MAX_SILENT_PER_SOURCE": "16",
        "AGENT__SERVER__HEALTH_PORT": str(health_port),
    }
    async with agent_server(tmp_path, fake_llm, env) as address:
        outcome = await tenant_under_flood(address, address, 120, health_port)
    assert outcome.probes == [(200, {"status": "ok"})] * 3
    assert outcome.on_main_port == 200  # it took the slot of the oldest silent socket


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_HAPROXY, reason="haproxy is not installed")
async def test_the_shipped_haproxy_limits_keep_a_flood_from_the_servers(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """docs/examples/haproxy.cfg in front of one server: 300 sockets from 127.0.0.2, each
    reopened when closed (at most 400,000 connections or 60 s), against its per-address
    limits; the tenant comes from 127.0.0.1 through it."""
    async with agent_server(tmp_path, fake_llm, {}) as backend:
        async with haproxy(tmp_path, [int(backend.rsplit(":", 1)[1])]) as balancer:
            # Refused at once, the sockets over the limit reconnect at once: a larger budget.
            outcome = await tenant_under_flood(balancer, backend, 300, None, budget=400_000)
    assert outcome.on_main_port == 200


@asynccontextmanager
async def agent_server(
    tmp_path: Path, fake_llm: FakeLLM, env: dict[str, str]
) -> AsyncIterator[str]:
    port = free_port()
    env = {
        "AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "a.db"),
        "AGENT__AUTH__TOKENS": json.dumps(TENANT_TOKENS),
        "AGENT__LLM__BASE_URL": fake_llm.base_url,  # type: ignore[attr-defined]
        "AGENT__SERVER__REQUEST_TIMEOUT_S": "2",
        **env,
    }
    server = await start_server_process(tmp_path, port, env)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        await server.wait()


@dataclass
class Outcome:
    probes: list[tuple[int, Any]]
    on_main_port: int | None


async def tenant_under_flood(
    address: str, backend: str, sockets: int, health_port: int | None, budget: int = 40_000
) -> Outcome:
    """Flood `address` from 127.0.0.2 (another process); meanwhile the tenant, from
    127.0.0.1, runs three times through it and probes health after each run (on
    `health_port` if given); every run must complete. The flood must outlast all that."""
    flood = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "tests.security.flood", address, str(sockets), str(budget), "60", "127.0.0.2"),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
    )
    assert flood.stdout is not None
    probes: list[tuple[int, Any]] = []
    try:
        assert await asyncio.wait_for(flood.stdout.readline(), 30) == b"filled\n"
        async with (
            httpx.AsyncClient() as http,
            await Client.connect(address, headers=bearer("b")) as tenant,
        ):
            assert (await tenant.recv(timeout=10))["type"] == "session"
            runs = []
            for n in range(3):
                runs.append(await tenant.run(f"run {n}", timeout=20))
                if health_port is not None:
                    probe = await http.get(f"http://127.0.0.1:{health_port}/healthz", timeout=10)
                    probes.append((probe.status_code, probe.json()))
            main = f"GET /healthz HTTP/1.1\r\nHost: {backend}\r\n\r\n".encode()
            on_main_port = status_of(await raw_exchange(address, main, timeout=10))
        assert flood.returncode is None, "the flood ended before the tenant was done"
    finally:
        if flood.returncode is None:
            flood.terminate()
        await flood.wait()
    assert [kind(run[-1]) for run in runs] == ["response_complete"] * 3
    assert not [f for run in runs for f in run if kind(f) == "error"]
    return Outcome(probes, on_main_port)


async def test_the_health_listener_answers_only_health_checks() -> None:
    listener = HealthListener(lambda: {"status": "ok"}, max_connections=2, head_timeout_s=0.5)
    await listener.start("127.0.0.1", free_port())
    address = f"127.0.0.1:{listener.port}"
    try:
        ok = await raw_exchange(address, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(ok) == 200 and ok.endswith(b'{"status": "ok"}')
        head = await raw_exchange(address, b"HEAD /healthz HTTP/1.1\r\n\r\n")
        assert status_of(head) == 200 and head.endswith(b"\r\n\r\n")
        assert status_of(await raw_exchange(address, b"GET /api/sessions HTTP/1.1\r\n\r\n")) == 404
        assert status_of(await raw_exchange(address, b"POST /healthz HTTP/1.1\r\n\r\n")) == 404
        assert status_of(await raw_exchange(address, b"GET /" + b"a" * 9000)) == 431
        assert await raw_exchange(address, b"GET /healthz", timeout=5) == b""  # head deadline
    finally:
        await listener.aclose()


def test_the_health_port_must_be_another_port() -> None:
    overrides = {"server": {"port": 9000, "health_port": 9000}}
    with pytest.raises(ConfigError, match="health_port must differ from server.port"):
        load_settings(None, overrides)
