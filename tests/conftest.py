"""Shared fixtures: a scripted LLM server, and the agent server under uvicorn, both real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from server.app import create_app
from server.cli import uvicorn_config
from server.runner import AgentServer
from server.settings import Settings, load_settings
from tests.fakes.client import Client
from tests.fakes.llama_cpp import SHARED_ENV, LlamaServer, qwen_model
from tests.fakes.openai_server import FakeLLM
from tests.fakes.servers import ServerHandle, bind_loopback, run_server, serve

_WORKER_NICENESS = 10
_SHARED_LLAMA = pytest.StashKey[LlamaServer]()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """One worker per core and one more: the model server's tests mostly wait on it.
    PYTEST_XDIST_AUTO_NUM_WORKERS still decides when it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist, the controller runs the real model server (llama.cpp, one thread)
    for the whole session and the workers lower their own priority: the model's tests are the
    longest chain of the suite, and at equal priority the other workers' servers and browsers
    took half its core."""
    config = session.config
    if hasattr(config, "workerinput"):
        os.nice(_WORKER_NICENESS)
    elif config.option.numprocesses and _runs_model_tests(config):
        try:
            server = LlamaServer(qwen_model(), log=Path(tempfile.mkdtemp()) / "llama-server.log")
            server.launch()  # the model loads while the workers start
        except (OSError, RuntimeError, subprocess.SubprocessError):
            return  # the model's tests start their own server and report what is missing
        config.stash[_SHARED_LLAMA] = server
        os.environ[SHARED_ENV] = json.dumps({"base_url": server.base_url, "log": server.log_path})


def pytest_sessionfinish(session: pytest.Session) -> None:
    server = session.config.stash.get(_SHARED_LLAMA, None)
    if server is not None:
        server.close()
        shutil.rmtree(Path(str(server.log_path)).parent, ignore_errors=True)


def _runs_model_tests(config: pytest.Config) -> bool:
    models = Path(__file__).parent / "models"
    if "not slow" in (config.option.markexpr or ""):
        return False
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == models or models in path.parents or path in models.parents:
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `slow` first (a stable sort): pytest-xdist hands out whole files in this
    order, so the longest ones (the llama.cpp module above all) start at once instead of
    finishing last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _no_real_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach a real model: point the defaults at a closed local port."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    for name in list(os.environ):
        if name.startswith("AGENT__"):
            monkeypatch.delenv(name)


@asynccontextmanager
async def served_fake_llm() -> AsyncIterator[FakeLLM]:
    """A FakeLLM served on a free loopback port; its `base_url` set."""
    fake = FakeLLM()
    async with serve(fake.app) as address:
        fake.base_url = f"http://{address}/v1"  # type: ignore[attr-defined]
        yield fake


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with served_fake_llm() as fake:
        yield fake


@dataclass
class Running:
    address: str
    settings: Settings
    app: Any
    handle: ServerHandle

    async def stop(self) -> None:
        """Shut the server down as SIGTERM would."""
        await self.handle.stop()

    async def client(self, **params: Any) -> Client:
        return await Client.connect(self.address, **params)


ServerFactory = Callable[..., AbstractAsyncContextManager[Running]]


@pytest.fixture
def server_factory(fake_llm: FakeLLM, tmp_path: Path) -> ServerFactory:
    """Start the agent server with settings overrides, e.g. {"agent": {"default_max_steps": 3}}."""

    @asynccontextmanager
    async def start(
        extra_tools: list[Any] | None = None,
        prompts: Any = None,
        store: Any = None,
        **sections: dict[str, Any],
    ) -> AsyncIterator[Running]:
        sock = bind_loopback()
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        overrides: dict[str, dict[str, Any]] = {
            "llm": {"base_url": fake_llm.base_url, "max_retries": 1, "timeout_s": 5},
            "storage": {"sqlite_path": str(tmp_path / "agent.db")},
            # no title call after a first answer: a test that counts model calls would see it
            # come or not; tests/server/test_titles_and_search.py turns it on
            "agent": {"session_titles": False},
            "server": {
                "shutdown_timeout_s": 5,  # a browser on this server's own page is allowed
                "allowed_origins": ["http://localhost:8765", f"http://{address}"],
            },
        }
        for name, values in sections.items():
            overrides.setdefault(name, {}).update(values)
        settings = load_settings(None, overrides)
        app = create_app(settings, extra_tools=extra_tools, prompts=prompts, store=store)
        config = uvicorn_config(app, settings).__dict__
        options = {
            k: config[k]
            for k in (
                "http",
                "h11_max_incomplete_event_size",
                "timeout_keep_alive",
                "ws",
                "ws_max_size",
                "ws_ping_interval",
                "ws_ping_timeout",
                "ws_per_message_deflate",
            )
        }
        async with run_server(app, AgentServer, sock, **options) as handle:
            yield Running(handle.address, settings, app, handle)

    return start


@pytest.fixture
async def server(server_factory: ServerFactory) -> AsyncIterator[Running]:
    async with server_factory() as running:
        yield running
