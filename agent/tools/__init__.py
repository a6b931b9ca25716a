"""Tools the agent can call, and the registry that validates their arguments.

The tools that ship with the agent are in agent/tools/standard.py. The names below are
imported on first use (agent/lazy.py): the page-text worker process imports
`agent.tools.extract_worker` alone, without the HTTP client, the tools or the loop.
"""

from typing import TYPE_CHECKING

from agent.lazy import lazy_exports

if TYPE_CHECKING:
    from agent.tools.base import Tool
    from agent.tools.config import MemoryConfig, ToolsConfig, WebFetchConfig, WebSearchConfig
    from agent.tools.current_time import current_time_tool
    from agent.tools.extractor import ExtractorPool
    from agent.tools.http_client import create_http_client
    from agent.tools.memory import MemoryRecord, MemoryStore
    from agent.tools.registry import ToolRegistry
    from agent.tools.standard import BUILTIN_TOOLS, REQUIREMENTS, build_tools

__all__ = [
    "BUILTIN_TOOLS",
    "ExtractorPool",
    "REQUIREMENTS",
    "MemoryConfig",
    "MemoryRecord",
    "MemoryStore",
    "Tool",
    "ToolRegistry",
    "ToolsConfig",
    "WebFetchConfig",
    "WebSearchConfig",
    "build_tools",
    "create_http_client",
    "current_time_tool",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BUILTIN_TOOLS": "agent.tools.standard",
        "REQUIREMENTS": "agent.tools.standard",
        "build_tools": "agent.tools.standard",
        "ExtractorPool": "agent.tools.extractor",
        "MemoryConfig": "agent.tools.config",
        "ToolsConfig": "agent.tools.config",
        "WebFetchConfig": "agent.tools.config",
        "WebSearchConfig": "agent.tools.config",
        "MemoryRecord": "agent.tools.memory",
        "MemoryStore": "agent.tools.memory",
        "Tool": "agent.tools.base",
        "ToolRegistry": "agent.tools.registry",
        "create_http_client": "agent.tools.http_client",
        "current_time_tool": "agent.tools.current_time",
    },
)
