"""Pre-task research: one web search before a session's first task, shown and remembered."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM
from tests.fakes.servers import serve


def _searxng(queries: list[str], *, fail: bool = False) -> Starlette:
    async def search(request: Request) -> Response:
        queries.append(request.query_params["q"])
        if fail:
            return JSONResponse({"error": "down"}, status_code=503)
        return JSONResponse(
            {
                "results": [
                    {
                        "title": "Lyon travel guide",
                        "url": "https://example.org/lyon",
                        "content": "Trains to Lyon leave hourly.",
                    },
                ]
            }
        )

    return Starlette(routes=[Route("/search", search)])


def _options(address: str) -> dict:
    return {
        "agent": {"pre_task_research": True},
        "tools": {
            "enabled": ["get_current_time", "web_search"],
            "web_search": {"provider": "searxng", "base_url": f"http://{address}"},
        },
    }


async def test_the_first_task_is_researched_once_and_the_summary_stays(
    server_factory, fake_llm: FakeLLM
):
    queries: list[str] = []
    async with serve(_searxng(queries)) as searx, server_factory(**_options(searx)) as s:
        async with await s.client() as c:
            await c.recv()
            first = await c.run("How do I get to Lyon?")
            await c.run("And back?")
    research = [f for f in first if kind(f) == "agent_research"]
    assert len(research) == 1 and research[0]["sources"] == ["https://example.org/lyon"]
    assert "Trains to Lyon leave hourly." in research[0]["summary"]
    assert [kind(f) for f in first[:3]] == ["agent_user_message", "agent_start", "agent_research"]
    assert queries == ["How do I get to Lyon?"]  # only the session's first task
    reasons = [r for r in fake_llm.requests if r.phase == "reason"]
    for request in reasons:  # every Reason of the session sees the background
        assert any("Trains to Lyon leave hourly." in m["content"] for m in request.body["messages"])


async def test_a_failing_search_never_blocks_the_task(server_factory, fake_llm: FakeLLM):
    queries: list[str] = []
    async with serve(_searxng(queries, fail=True)) as searx, server_factory(**_options(searx)) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("How do I get to Lyon?")
    assert queries and "agent_research" not in [kind(f) for f in frames]
    assert frames[-2]["stop_reason"] == "finished"
