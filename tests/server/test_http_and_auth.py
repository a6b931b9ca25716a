"""HTTP API shapes and pagination; tokens, tenants and their isolation."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from server.settings import ConfigError, load_settings
from tests.fakes.client import Client
from tests.fakes.openai_server import FakeLLM

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
TOKENS = {ALICE: {"tenant": "acme", "user": "alice"}, BOB: {"tenant": "globex", "user": "bob"}}


async def test_healthz_and_session_listing(server, fake_llm: FakeLLM):
    async with await server.client() as c:
        first = (await c.recv())["session_id"]
        await c.run("Plan my trip to Rome next week")
    async with await server.client() as c:
        second = (await c.recv())["session_id"]
        await c.run("second chat")
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        sessions = (await http.get("/api/sessions")).json()["sessions"]
        assert [s["session_id"] for s in sessions] == [second, first]
        assert sessions[1]["title"] == "Plan my trip to Rome next week"
        assert sessions[0]["status"] == "idle"
        assert sessions[0]["updated_at"] >= sessions[0]["created_at"]
        assert set(sessions[0]) == {"session_id", "status", "created_at", "updated_at", "title"}
        limited = (await http.get("/api/sessions?limit=1")).json()["sessions"]
        assert [s["session_id"] for s in limited] == [second]
        latest = (await http.get("/api/sessions/latest")).json()
        assert latest["session_id"] == second
        for bad in ("0", "abc", "501", "-1"):
            response = await http.get(f"/api/sessions?limit={bad}")
            assert response.status_code == 400 and response.json()["code"] == "invalid_query"


async def test_without_tokens_the_one_local_user_is_named(server):
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        me = (await http.get("/api/me")).json()
    assert me.pop("model")["bundled"] is False  # a configured model, not the bundled one
    assert me == {"tenant_id": "local", "user_id": "local", "auth": False}


async def test_latest_is_404_without_sessions(server_factory, tmp_path):
    async with server_factory() as s:
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            response = await http.get("/api/sessions/latest")
    assert response.status_code == 404


async def test_a_head_request_reads_a_session_and_deletes_nothing(server, fake_llm):
    """Starlette adds HEAD to every GET route; a monitor or proxy that sends one must not
    remove the conversation."""
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.run("keep me")
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        head = await http.head(f"/api/sessions/{session}")
        after = await http.get(f"/api/sessions/{session}")
    assert head.status_code == 200 and head.content == b""
    assert after.status_code == 200 and after.json()["session_id"] == session


async def test_the_ui_page_may_not_be_framed_by_another_site(server):
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        page = await http.get("/")
    assert page.status_code == 200 and "<html" in page.text.lower()
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["content-security-policy"] == "frame-ancestors 'none'"


async def test_no_such_path_or_method_answers_in_the_api_error_shape(server):
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        missing = await http.get("/api/nothing")
        wrong = await http.put("/api/sessions/abc", json={"title": "x"})
        also_wrong = await http.post("/api/sessions")
        empty_limit = await http.get("/api/sessions?limit=")
        slashed = [await http.get(p) for p in ("/api/sessions/", "/healthz/", "/api/tools/")]
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    for response in slashed:  # not a redirect built from the request's Host header
        assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert wrong.status_code == 405 and wrong.json()["code"] == "method_not_allowed"
    assert set(wrong.headers["allow"].split(", ")) == {"GET", "HEAD", "PATCH", "DELETE"}
    assert also_wrong.status_code == 405
    assert set(also_wrong.headers["allow"].split(", ")) == {"GET", "HEAD"}
    assert empty_limit.status_code == 200  # an empty value is the default


async def test_messages_api_roles_order_and_pagination(server, fake_llm: FakeLLM):
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        frames = await c.run("hello")
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        body = (await http.get(f"/api/sessions/{session}/messages")).json()
        assert body["session_id"] == session
        messages = body["messages"]
        assert body["total"] == len(messages)
        assert [m["sequence"] for m in messages] == list(range(len(messages)))
        assert messages[0]["role"] == "user" and messages[0]["content"] == "hello"
        assert messages[-1]["role"] == "assistant" and messages[-1]["phase"] == "final"
        assert messages[-1]["content"] == frames[-2]["final_answer"]
        assert all(m["run_id"] == frames[0]["run_id"] for m in messages)
        for m in messages:
            assert {"message_id", "role", "content", "sequence", "ts"} <= set(m)
        last_two = (await http.get(f"/api/sessions/{session}/messages?limit=2")).json()
        assert last_two["messages"] == messages[-2:] and last_two["total"] == len(messages)
        first_ts = messages[0]["ts"]
        since = await http.get(f"/api/sessions/{session}/messages?since={first_ts - 1}&limit=1")
        assert since.json()["messages"] == messages[:1]
        none = await http.get(f"/api/sessions/{session}/messages?since={messages[-1]['ts']}")
        assert none.json()["messages"] == []
        assert (await http.get(f"/api/sessions/{session}/messages?limit=0")).status_code == 400
        assert (await http.get("/api/sessions/nope/messages")).status_code == 404
        assert (await http.get("/api/sessions/nope/events")).status_code == 404
        bad = await http.get(f"/api/sessions/{session}/events?after_seq=x")
        assert bad.status_code == 400


async def test_tokens_scope_everything_by_tenant(server_factory, fake_llm: FakeLLM):
    async with server_factory(auth={"tokens": TOKENS}) as s:
        with pytest.raises(InvalidStatus) as refused:
            await Client.connect(s.address)
        assert refused.value.response.status_code == 403
        assert json.loads(refused.value.response.body)["code"] == "unauthorized"
        with pytest.raises(InvalidStatus):
            await Client.connect(s.address, token="wrong-token-0123456789")
        alice = await Client.connect(s.address, headers={"Authorization": f"Bearer {ALICE}"})
        session = (await alice.recv())["session_id"]
        await alice.run("alice's secret plan")
        await alice.close()
        bob = await Client.connect(s.address, token=BOB, session_id=session)
        assert (await bob.recv())["code"] == "session_not_found"
        with pytest.raises(ConnectionClosed):
            await bob.recv()
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            assert (await http.get("/api/sessions")).status_code == 401
            assert (await http.get("/healthz")).status_code == 200
            as_bob = {"Authorization": f"Bearer {BOB}"}
            as_alice = {"Authorization": f"Bearer {ALICE}"}
            assert (await http.get("/api/sessions", headers=as_bob)).json() == {"sessions": []}
            for path in ("messages", "events"):
                url = f"/api/sessions/{session}/{path}"
                assert (await http.get(url, headers=as_bob)).status_code == 404
                assert (await http.get(url, headers=as_alice)).status_code == 200
            assert (await http.get("/api/sessions/latest", headers=as_bob)).status_code == 404
            mine = (await http.get("/api/sessions", headers=as_alice)).json()["sessions"]
            assert [m["session_id"] for m in mine] == [session]
            # Whom a token names: the page shows it (a sign-in link may be someone else's).
            me = (await http.get("/api/me", headers=as_bob)).json()
            assert me.pop("model")["bundled"] is False
            assert me == {"tenant_id": "globex", "user_id": "bob", "auth": True}
            assert (await http.get("/api/me")).status_code == 401


def test_without_tokens_the_server_refuses_a_public_host():
    with pytest.raises(ConfigError, match="loopback"):
        load_settings(None, {"server": {"host": "0.0.0.0"}}, environ={})
    settings = load_settings(
        None, {"server": {"host": "0.0.0.0"}, "auth": {"tokens": TOKENS}}, environ={}
    )
    assert settings.server.host == "0.0.0.0"


async def test_a_connection_that_never_chats_leaves_no_session_behind(server, fake_llm):
    async with await server.client() as idle:
        idle_id = (await idle.recv())["session_id"]
        async with await server.client(session_id=idle_id) as second_tab:
            assert (await second_tab.recv())["resumed"] is True  # while held, it exists
    async with await server.client() as used:
        used_id = (await used.recv())["session_id"]
        await used.run("hello")
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        sessions = (await http.get("/api/sessions")).json()["sessions"]
    assert [s["session_id"] for s in sessions] == [used_id]
    async with await server.client(session_id=idle_id) as late:
        assert (await late.recv())["code"] == "session_not_found"
