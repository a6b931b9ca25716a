"""Tools the agent can call, and the registry that validates their arguments."""

from agent.tools.base import Tool
from agent.tools.current_time import current_time_tool
from agent.tools.registry import ToolRegistry

__all__ = ["BUILTIN_TOOLS", "Tool", "ToolRegistry", "current_time_tool"]

BUILTIN_TOOLS: dict[str, Tool] = {current_time_tool.name: current_time_tool}
