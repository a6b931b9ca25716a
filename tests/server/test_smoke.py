from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM


async def test_a_default_run_streams_every_phase(server, fake_llm: FakeLLM) -> None:
    async with await server.client() as c:
        first = await c.recv()
        assert first["type"] == "session"
        frames = await c.run("What time is it?")
        print([kind(f) for f in frames])
        assert kind(frames[-1]) == "response_complete"
