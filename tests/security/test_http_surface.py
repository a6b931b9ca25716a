"""Credentials in logs, odd numbers, per-tenant metrics, SSRF edges and message floods
(issue 13, items 4 to 8)."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from agent.tools.ssrf import AddressGuard, Refused
from server.redact import redact
from server.settings import load_settings
from tests.conftest import ServerFactory
from tests.fakes.client import Client
from tests.fakes.openai_server import FakeLLM, Reply, observe, reason
from tests.fakes.processes import free_port, start_server_process

TOKEN_A = "tenant-a-token-0123456789"
TOKEN_A2 = "tenant-a-second-0123456789"
TOKEN_B = "tenant-b-token-0123456789"
OPERATOR = "operator-token-0123456789"
TOKENS = {
    TOKEN_A: {"tenant": "a", "user": "alice"},
    TOKEN_A2: {"tenant": "a", "user": "amir"},
    TOKEN_B: {"tenant": "b", "user": "bob"},
    OPERATOR: {"tenant": "ops", "user": "olga", "operator": True},
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def token_subprotocol(token: str) -> str:
    encoded = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
    return f"agent-server.bearer.{encoded}"


# -- item 4: tokens never reach a log line; browsers can keep them out of URLs ---------------


async def test_no_token_reaches_the_access_log(tmp_path: Path) -> None:
    port = free_port()
    near = TOKEN_A[:-1] + "X"  # a near-valid token, rejected
    env = {
        "AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "a.db"),
        "AGENT__AUTH__TOKENS": json.dumps(TOKENS),
        "AGENT__SERVER__LOG_LEVEL": "info",
    }
    proc = await start_server_process(tmp_path, port, env, capture=True)
    try:
        base = f"127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=f"http://{base}") as http:
            await http.get(f"/?token={TOKEN_A}")
            await http.get(f"/api/sessions?token={near}", headers=bearer(TOKEN_B))
        async with connect(f"ws://{base}/ws?token={TOKEN_A}", open_timeout=5) as ws:
            await ws.recv()
        with pytest.raises(InvalidStatus):
            async with connect(f"ws://{base}/ws?token={near}", open_timeout=5):
                pass
        proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.stdout.read(), 20)).decode()  # type: ignore[union-attr]
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    assert "/ws?token=[redacted]" in output and "/?token=[redacted]" in output  # lines kept
    assert "Logging error" not in output  # kept as access lines, not as a formatter's failure
    for secret in (TOKEN_A, near, TOKEN_B, TOKEN_A[:12]):
        assert secret not in output


def test_redaction_covers_query_headers_and_subprotocols() -> None:
    line = f'"GET /ws?session_id=s&token={TOKEN_A}&after_seq=3" Bearer {TOKEN_B}'
    cleaned = redact(line + " " + token_subprotocol(TOKEN_A))
    assert TOKEN_A not in cleaned and TOKEN_B not in cleaned and "session_id=s&" in cleaned
    assert "after_seq=3" in cleaned


async def test_a_browser_can_send_its_token_as_a_subprotocol(
    server_factory: ServerFactory,
) -> None:
    async with server_factory(auth={"tokens": TOKENS}) as running:
        url = f"ws://{running.address}/ws"
        offered: Any = ["agent-server", token_subprotocol(TOKEN_A)]
        async with connect(url, subprotocols=offered, open_timeout=5) as ws:
            assert ws.subprotocol == "agent-server"  # never the one carrying the token
            assert json.loads(await ws.recv())["type"] == "session"
        wrong: Any = ["agent-server", token_subprotocol(TOKEN_A + "x")]
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, subprotocols=wrong, open_timeout=5):
                pass
        assert refused.value.response.status_code == 403


# -- item 5: ASCII digits only, bounded ------------------------------------------------------

ODD = ["%C2%B2", "%E2%91%A0", "%D9%A3", "9223372036854775808", "99999999999999999999999", "-1"]


async def test_odd_numbers_in_queries_are_400_not_500(server: Any) -> None:
    async with await server.client() as client:
        session_id = (await client.recv())["session_id"]
        await client.run("hello")
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        for value in ODD:
            for path in (
                f"/api/sessions?limit={value}",
                f"/api/sessions/{session_id}/events?after_seq={value}",
                f"/api/sessions/{session_id}/events?limit={value}",
                f"/api/sessions/{session_id}/messages?limit={value}",
                f"/api/sessions/{session_id}/messages?since={value}",
            ):
                response = await http.get(path)
                assert response.status_code == 400, (path, response.text[:200])
                assert response.json()["code"] == "invalid_query"
        top = await http.get(f"/api/sessions/{session_id}/events?after_seq=9223372036854775807")
        assert top.status_code == 200 and top.json()["events"] == []


async def test_odd_after_seq_on_the_socket_is_invalid_message(server: Any) -> None:
    async with await server.client() as client:
        session_id = (await client.recv())["session_id"]
        await client.run("hello")
    for value in ["²", "①", "٣", "9223372036854775808"]:
        async with await Client.connect(
            server.address, session_id=session_id, after_seq=value
        ) as client:
            assert (await client.recv())["type"] == "session"
            error = await client.recv()
            assert error["type"] == "error" and error["code"] == "invalid_message"
            frames = await client.run("again")  # the connection stays usable
            assert frames[-1]["type"] == "response_complete"


# -- item 6: /metrics per tenant, process-wide for operators ---------------------------------


async def test_metrics_show_a_tenant_only_its_own_figures(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    async with server_factory(auth={"tokens": TOKENS}) as running:
        async with await Client.connect(running.address, headers=bearer(TOKEN_A)) as client:
            await client.recv()
            await client.run("hello")
            await client.run("again")
        async with httpx.AsyncClient(base_url=f"http://{running.address}") as http:
            a = (await http.get("/metrics", headers=bearer(TOKEN_A2))).json()
            b = (await http.get("/metrics", headers=bearer(TOKEN_B))).json()
            ops = (await http.get("/metrics", headers=bearer(OPERATOR))).json()
            assert (await http.get("/metrics")).status_code == 401
    assert a["scope"] == "tenant" and a["tenant"] == "a" and a["runs_started"] == 2
    assert b["scope"] == "tenant" and b["tenant"] == "b" and b.get("runs_started", 0) == 0
    assert b["runs_active"] == 0 and b["sessions_in_memory"] == 0
    assert ops["scope"] == "process" and ops["runs_started"] == 2 and "tenant" not in ops


async def test_metrics_as_prometheus_text_keep_the_tenant_scope(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    fake_llm.script("reason", Reply(status=500))
    async with server_factory(auth={"tokens": TOKENS}, llm={"max_retries": 0}) as running:
        async with await Client.connect(running.address, headers=bearer(TOKEN_A)) as client:
            await client.recv()
            await client.run("this one fails")
            await client.run("hello")
        async with httpx.AsyncClient(base_url=f"http://{running.address}") as http:
            scraped = await http.get(
                "/metrics", headers={**bearer(TOKEN_A2), "Accept": "text/plain;version=0.0.4"}
            )
            other = await http.get("/metrics?format=prometheus", headers=bearer(TOKEN_B))
            ops = await http.get("/metrics?format=prometheus", headers=bearer(OPERATOR))
            as_json = await http.get("/metrics", headers={**bearer(TOKEN_A2), "Accept": "*/*"})
    assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = set(scraped.text.splitlines())
    assert 'agent_server_runs_started_total{tenant="a"} 2.0' in lines
    assert 'agent_server_runs_failed_total{code="llm_error",tenant="a"} 1.0' in lines
    assert 'agent_server_runs_failed_total{code="storage_error",tenant="a"} 0.0' in lines
    assert 'agent_server_runs_active{tenant="a"} 0.0' in lines
    assert "# TYPE agent_server_verifications_total counter" in lines
    assert 'agent_server_runs_started_total{tenant="b"} 0.0' in other.text.splitlines()
    assert "agent_server_runs_started_total 2.0" in ops.text.splitlines()
    assert as_json.json()["runs_started"] == 2 and as_json.json()["runs_failed_llm_error"] == 1


# -- item 7: SSRF edges ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "address", ["192.0.0.8", "192.0.0.1", "fec0::1", "feff::1", "::ffff:192.0.0.8"]
)
async def test_site_local_and_protocol_assignment_addresses_are_refused(address: str) -> None:
    with pytest.raises(Refused, match="address"):
        await AddressGuard().addresses(address, 80)


async def test_allow_listed_names_open_only_their_ports() -> None:
    bare = AddressGuard(["localhost"])
    assert "127.0.0.1" in await bare.addresses("localhost", 80)
    assert "127.0.0.1" in await bare.addresses("localhost", 443)
    with pytest.raises(Refused):
        await bare.addresses("localhost", 6379)
    with_port = AddressGuard(["localhost:6379"])
    assert "127.0.0.1" in await with_port.addresses("localhost", 6379)
    with pytest.raises(Refused):
        await with_port.addresses("localhost", 80)
    ip_port = AddressGuard(["127.0.0.1:8080", "[::1]:8081", "10.0.0.0/8:9000"])
    assert await ip_port.addresses("127.0.0.1", 8080) == ["127.0.0.1"]
    assert await ip_port.addresses("::1", 8081) == ["::1"]
    assert await ip_port.addresses("10.1.2.3", 9000) == ["10.1.2.3"]
    for host, port in (("127.0.0.1", 8081), ("::1", 8080), ("10.1.2.3", 22)):
        with pytest.raises(Refused):
            await ip_port.addresses(host, port)
    with pytest.raises(ValueError, match="port"):
        AddressGuard(["localhost:99999"])


# -- item 8: inbound floods are rate-limited with a documented error -------------------------


async def test_a_flood_of_frames_gets_rate_limited_then_1008(
    server_factory: ServerFactory,
) -> None:
    server = {"max_messages_per_s": 5, "message_burst": 50}
    async with server_factory(server=server) as running:
        async with await running.client() as client:
            await client.recv()
            for _ in range(2_000):
                try:
                    await client.send("not json")
                except ConnectionClosed:
                    break
            codes = []
            with pytest.raises(ConnectionClosed):
                while True:
                    codes.append((await client.recv())["code"])
            assert client.ws.close_code == 1008
        assert codes[-1] == "rate_limited" and set(codes[:-1]) == {"invalid_json"}
        assert len(codes) <= 50 + 5 + 1  # nothing past the burst was processed
        async with await running.client() as other:  # the server serves on
            await other.recv()
            assert (await other.run("hello"))[-1]["type"] == "response_complete"


async def test_a_megabyte_chat_is_run_and_stored_whole(server, fake_llm: FakeLLM):
    """A chat too long for the window by bytes is counted: the token tables used to load on
    the event loop (~0.5 s), and the estimate and the tool-name scan made a regex match per
    character (~0.3 s a run). Every other session waited that long. The tables now load in a
    thread (tests/agent/test_tokens.py); how long the loop stalls on a megabyte chat is
    measured by `python -m bench.stalls`, not asserted here."""
    fake_llm.script("reason", reason("Reading it.", finish=True))
    fake_llm.script("observe", observe("Read.", final="It is long."))
    content = "lorem ipsum dolor get_current_time " * 29_000  # ~1 MB of words
    async with await server.client() as c:
        await c.recv()
        frames = await c.run(content, timeout=30)
    assert frames[0]["content"] == content and frames[-1]["type"] == "response_complete"
    assert [f for f in frames if f["type"] == "error"] == []


async def _body_cut_short(app: Any, method: str, path: str) -> int:
    """Drive the app as uvicorn does for a client that leaves mid-body: part of the body,
    then `http.disconnect`. Returns the status the app answered with."""
    events = iter(
        [
            {"type": "http.request", "body": b'{"title":', "more_body": True},
            {"type": "http.disconnect"},
        ]
    )
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(events, {"type": "http.disconnect"})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    await app(scope, receive, send)
    return int(next(m for m in sent if m["type"] == "http.response.start")["status"])


async def test_a_client_gone_mid_body_gets_a_400_not_a_500(server, fake_llm: FakeLLM):
    """Starlette raises ClientDisconnect from the body stream: it was an unhandled error (a
    logged traceback and a 500), once per such request."""
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.run("hello")
    app = server.app
    assert await _body_cut_short(app, "PATCH", f"/api/sessions/{session}") == 400
    assert await _body_cut_short(app, "POST", "/agui") == 400


async def test_one_tenant_cannot_hold_every_socket(server_factory: ServerFactory) -> None:
    """`server.max_connections` is one pool: a tenant holding WebSockets open (they answer
    pings) left every other tenant, and /healthz, a 503. A tenant now gets half of it (with
    tokens configured), or `server.max_sockets_per_tenant`."""
    async with server_factory(auth={"tokens": TOKENS}, server={"max_connections": 8}) as running:
        held = [await Client.connect(running.address, headers=bearer(TOKEN_A)) for _ in range(4)]
        with pytest.raises(InvalidStatus) as refused:
            await Client.connect(running.address, headers=bearer(TOKEN_A2))  # same tenant
        assert refused.value.response.status_code == 503
        assert b"too_many_connections" in refused.value.response.body
        async with await Client.connect(running.address, headers=bearer(TOKEN_B)) as other:
            assert (await other.recv())["type"] == "session"
        async with httpx.AsyncClient(base_url=f"http://{running.address}") as http:
            assert (await http.get("/healthz")).status_code == 200
        await held.pop().close()
        async with asyncio.timeout(5):  # until the server has seen that socket go
            while True:
                try:
                    again = await Client.connect(running.address, headers=bearer(TOKEN_A))
                    break
                except InvalidStatus:
                    continue
        assert (await again.recv())["type"] == "session"
        for client in [*held, again]:
            await client.close()


async def test_a_tenant_cannot_start_runs_in_a_loop(server_factory: ServerFactory) -> None:
    """A `chat` then a stop, again and again, wrote tens of megabytes a second to the store.
    With tokens, each tenant may start `agent.run_starts_per_minute_per_tenant` runs a minute
    (600 unless set), in bursts of a sixth of it; other tenants are not held back."""
    agent = {"run_starts_per_minute_per_tenant": 6}  # a burst of one start
    async with server_factory(auth={"tokens": TOKENS}, agent=agent) as running:
        async with await Client.connect(running.address, headers=bearer(TOKEN_A)) as alice:
            await alice.recv()
            first = await alice.run("hello")
            assert first[-1]["type"] == "response_complete"
            await alice.send({"type": "chat", "content": "again"})
            refused = await alice.until("error")
            assert refused[-1]["code"] == "too_many_runs"
            assert "faster than 6 a minute" in refused[-1]["message"]
        async with await Client.connect(running.address, headers=bearer(TOKEN_B)) as bob:
            await bob.recv()
            assert (await bob.run("hello"))[-1]["type"] == "response_complete"


def test_run_starts_are_limited_by_default_only_between_tenants(tmp_path: Path) -> None:
    storage = {"sqlite_path": str(tmp_path / "a.db")}
    alone = load_settings(None, {"storage": storage})
    tenants = load_settings(None, {"storage": storage, "auth": {"tokens": TOKENS}})
    chosen = load_settings(
        None, {"storage": storage, "agent": {"run_starts_per_minute_per_tenant": 30}}
    )
    assert [s.run_starts_per_minute for s in (alone, tenants, chosen)] == [0, 600, 30]
