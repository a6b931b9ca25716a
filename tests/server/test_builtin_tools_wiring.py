"""The configurable built-in tools, wired through settings and create_app."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.app import create_app
from server.settings import ConfigError, load_settings
from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, act, observe


def test_tool_tables_parse_and_the_key_comes_from_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[tools]\nenabled = ["web_search", "web_fetch"]\n'
        '[tools.web_search]\nprovider = "brave"\napi_key_env = "MY_BRAVE"\n'
        '[tools.web_fetch]\nallow_hosts = ["10.0.0.0/8"]\n'
    )
    settings = load_settings(config, environ={"MY_BRAVE": "k-123"})
    assert settings.tools.web_search.api_key.get_secret_value() == "k-123"
    assert settings.tools.web_fetch.allow_hosts == ("10.0.0.0/8",)
    create_app(settings)
    with pytest.raises(ConfigError, match="MY_BRAVE"):
        create_app(load_settings(config, environ={}))


def test_enabled_tool_without_its_requirement_is_a_startup_error() -> None:
    settings = load_settings(None, {"tools": {"enabled": ["web_search"]}})
    with pytest.raises(ConfigError, match="needs a provider"):
        create_app(settings)
    mongo = load_settings(
        None, {"tools": {"enabled": ["memory_save"]}, "storage": {"backend": "mongodb"}}
    )
    create_app(mongo)  # MongoDB has a memory store too; nothing connects before startup


def test_an_unknown_tool_error_lists_every_tool_also_those_needing_setup() -> None:
    settings = load_settings(None, {"tools": {"enabled": ["web_serch"]}})
    with pytest.raises(ConfigError) as refused:
        create_app(settings)
    message = str(refused.value)
    assert "unknown tool 'web_serch'" in message
    for name in ("get_current_time", "web_search", "web_fetch", "memory_save", "memory_retrieve"):
        assert name in message


def test_bad_tool_config_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tools.web_fetch.max_redirects"):
        load_settings(None, {"tools": {"web_fetch": {"max_redirects": -1}}})
    with pytest.raises(ConfigError, match="tools.web_search.nope"):
        load_settings(None, {"tools": {"web_search": {"nope": 1}}})


async def test_memory_tools_in_a_real_run(server_factory, fake_llm: FakeLLM) -> None:
    save = FakeToolCall("memory_save", {"content": "Prefers tea", "category": "preference"})
    recall = FakeToolCall("memory_retrieve", {"query": "tea"})
    fake_llm.script("act", act(save), act(recall))
    fake_llm.script("observe", observe("saved"), observe("ok", final="You like tea."))
    tools = {"enabled": ["get_current_time", "memory_save", "memory_retrieve", "web_fetch"]}
    async with server_factory(tools=tools) as running:
        async with await running.client() as c:
            await c.recv()
            frames = await c.run("remember I like tea", agent_max_steps=2)
    done = [f for f in frames if kind(f) == "tool_complete"]
    assert done[0]["result"]["status"] == "saved"
    assert done[1]["result"]["memories"][0]["content"] == "Prefers tea"
