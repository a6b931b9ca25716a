"""agent/ stays transport-agnostic: it never imports the server, Starlette, or a driver."""

from __future__ import annotations

import ast
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "agent"
FORBIDDEN = {"starlette", "uvicorn", "pymongo", "sqlite3", "server", "websockets", "httpx"}
SDK_ONLY_IN_ADAPTERS = {"openai", "tenacity"}
# The built-in web tools speak HTTP themselves (with retries); nothing else in agent/ may.
ALLOWED_IN_TOOLS = {"httpx", "tenacity"}
# The MCP SDK belongs to the tool modules alone.
SDK_ONLY_IN_TOOLS = {"mcp", "mcp_types"}
# The HTTP stack the openai and MCP SDKs share: the model adapters and the tools use it.
SDK_HTTP = {"httpx2", "anyio"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_agent_imports_no_transport_and_sdks_only_in_adapters():
    files = sorted(AGENT.rglob("*.py"))
    assert files
    for path in files:
        used = _imports(path)
        if "tools" in path.relative_to(AGENT).parts:
            used -= ALLOWED_IN_TOOLS
        assert not used & FORBIDDEN, f"{path} imports {used & FORBIDDEN}"
        if "adapters" not in path.parts:
            assert not used & SDK_ONLY_IN_ADAPTERS, f"{path} imports an SDK"
        if "tools" not in path.relative_to(AGENT).parts:
            assert not used & SDK_ONLY_IN_TOOLS, f"{path} imports the MCP SDK"
        if not {"tools", "adapters"} & set(path.relative_to(AGENT).parts):
            assert not used & SDK_HTTP, f"{path} imports the SDKs' HTTP stack"


def test_the_terminal_client_speaks_only_the_wire_protocol():
    client = AGENT.parent / "client"
    files = sorted(client.rglob("*.py"))
    assert files
    for path in files:
        used = _imports(path)
        assert not used & {"agent", "server"}, f"{path} imports {used & {'agent', 'server'}}"
