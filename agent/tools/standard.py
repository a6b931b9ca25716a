"""The tools that ship with the agent: BUILTIN_TOOLS need nothing; `build_tools` builds the
ones that need configuration or collaborators (an HTTP client, a memory store). A tool whose
requirement is missing is simply not built, and REQUIREMENTS says what it needs, for the
startup error message."""

from __future__ import annotations

import httpx

from agent.tools.base import Tool
from agent.tools.config import ToolsConfig
from agent.tools.current_time import current_time_tool
from agent.tools.extractor import ExtractorPool
from agent.tools.memory import MemoryStore, build_memory_tools
from agent.tools.web_fetch import build_web_fetch
from agent.tools.web_search import build_web_search

__all__ = ["BUILTIN_TOOLS", "REQUIREMENTS", "build_tools"]

BUILTIN_TOOLS: dict[str, Tool] = {current_time_tool.name: current_time_tool}

REQUIREMENTS: dict[str, str] = {
    "web_search": 'a provider: [tools.web_search] provider = "searxng" or "brave"',
    "web_fetch": "an HTTP client and page-text workers",
    "memory_save": "a memory store (storage.backend = sqlite or mongodb)",
    "memory_retrieve": "a memory store (storage.backend = sqlite or mongodb)",
}


def build_tools(
    config: ToolsConfig,
    *,
    http: httpx.AsyncClient | None,
    memory: MemoryStore | None,
    extractor: ExtractorPool | None = None,
) -> list[Tool]:
    """Build every configurable tool whose requirements are met (enabled or not).

    web_fetch needs `http` and `extractor` (its page-text workers; the caller closes them).
    Raise ValueError when a tool is configured but cannot work (Brave without an API key).
    """
    tools: list[Tool] = []
    if http is not None:
        search = build_web_search(
            config.web_search, http=http, api_key=config.web_search.api_key.get_secret_value()
        )
        if search is not None:
            tools.append(search)
    if http is not None and extractor is not None:
        tools.append(build_web_fetch(config.web_fetch, http=http, extractor=extractor))
    if memory is not None:
        tools.extend(build_memory_tools(config.memory, memory))
    return tools
