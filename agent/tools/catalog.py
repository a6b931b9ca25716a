"""ToolCatalog: the Toolbox a run uses: local tools (built-in and Python modules) plus the
tools of the MCP servers that are up, filtered by tenant, with the approval rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.errors import ModelBehaviorError
from agent.ports import ToolContext, ToolSpec
from agent.tools.mcp import McpServer, McpTool
from agent.tools.mcp_content import Ask
from agent.tools.registry import ToolRegistry

__all__ = ["ToolCatalog"]

ASK_KEY = "ask"  # ToolContext.extra key of the run's Ask (MCP elicitation)


class ToolCatalog:
    """Every tool a tenant may use, by name; calls go to the tool's own source."""

    def __init__(
        self,
        registry: ToolRegistry,
        servers: Iterable[McpServer] = (),
        *,
        approval: Iterable[str] = (),
        sources: Mapping[str, str] | None = None,
    ) -> None:
        self.registry = registry
        self.servers = {s.name: s for s in servers}
        self._approval = frozenset(approval)
        self._sources = dict(sources or {})

    # -- what exists -----------------------------------------------------------------------------

    def names(self, tenant_id: str | None = None) -> list[str]:
        """Local tools, then the tools of every running server the tenant may use."""
        return [*self.registry.names, *self._mcp_tools(tenant_id)]

    def _mcp_tools(self, tenant_id: str | None) -> dict[str, McpTool]:
        found: dict[str, McpTool] = {}
        for server in self.servers.values():
            if tenant_id is None or server.visible_to(tenant_id):
                found.update(server.tools)
        return found

    def known(self, tenant_id: str) -> list[str]:
        """Names a `chat.tools` list may give: local tools and the tools of the tenant's
        servers, including those of a server that is down right now (they stay valid names)."""
        names = self.names(tenant_id)
        for server in self.servers.values():
            if server.visible_to(tenant_id):
                names.extend(n for n in sorted(server.seen) if n not in server.tools)
        return names

    def specs(self, names: Sequence[str] | None) -> list[ToolSpec]:
        mcp = self._mcp_tools(None)
        if names is None:
            return [*self.registry.specs(None), *(t.spec for t in mcp.values())]
        local = set(self.registry.names)
        out: list[ToolSpec] = []
        for name in names:
            if name in local:
                out.extend(self.registry.specs([name]))
            elif name in mcp:
                out.append(mcp[name].spec)
        return out

    def needs_approval(self, name: str) -> bool:
        if name in self._approval:
            return True
        tool = self._mcp_tools(None).get(name)
        return tool is not None and self.servers[tool.server].needs_approval(tool)

    def describe(self, tenant_id: str) -> list[dict[str, Any]]:
        """The tools a tenant can use now, for `GET /api/tools`."""
        out = []
        for spec in self.registry.specs(None):
            out.append(self._entry(spec, self._sources.get(spec.name, "builtin")))
        for tool in self._mcp_tools(tenant_id).values():
            out.append(self._entry(tool.spec, f"mcp:{tool.server}"))
        return out

    def _entry(self, spec: ToolSpec, source: str) -> dict[str, Any]:
        return {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
            "source": source,
            "needs_approval": self.needs_approval(spec.name),
        }

    def health(self) -> dict[str, dict[str, Any]]:
        return {name: server.health() for name, server in self.servers.items()}

    # -- calls -----------------------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any], context: ToolContext) -> Any:
        if name in self.registry.names:
            return await self.registry.call(name, arguments, context)
        tool = self._mcp_tools(context.tenant_id).get(name)
        if tool is None:
            server = self.servers.get(name.split("__", 1)[0])
            if server is not None and server.visible_to(context.tenant_id):
                return await server.call(_missing(server, name), arguments, None)
            known = ", ".join(sorted(self.names(context.tenant_id))) or "none"
            raise ModelBehaviorError(f"There is no tool named {name!r}. Available tools: {known}.")
        ask: Ask | None = context.extra.get(ASK_KEY)
        return await self.servers[tool.server].call(tool, arguments, ask)


def _missing(server: McpServer, name: str) -> McpTool:
    """A placeholder for a tool of a server that is down: the call reports the outage."""
    return McpTool(server.name, name, ToolSpec(name, "", {}), False)
