"""agent/ stays transport-agnostic: it never imports the server, Starlette, or a driver."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "agent"
FORBIDDEN = {"starlette", "uvicorn", "pymongo", "sqlite3", "server", "websockets", "httpx"}
SDK_ONLY_IN_ADAPTERS = {"openai", "aiohttp", "tenacity"}
# The built-in web tools speak HTTP themselves (with retries); nothing else in agent/ may.
ALLOWED_IN_TOOLS = {"httpx", "tenacity"}
# The MCP SDK belongs to the tool modules alone.
SDK_ONLY_IN_TOOLS = {"mcp", "mcp_types"}
# The MCP SDK's HTTP stack: the tools use it.
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
        if "tools" not in path.relative_to(AGENT).parts:
            assert not used & SDK_HTTP, f"{path} imports the MCP SDK's HTTP stack"


def test_the_terminal_client_speaks_only_the_wire_protocol():
    client = AGENT.parent / "client"
    files = sorted(client.rglob("*.py"))
    assert files
    for path in files:
        used = _imports(path)
        assert not used & {"agent", "server"}, f"{path} imports {used & {'agent', 'server'}}"


def test_the_page_text_worker_starts_without_the_rest_of_the_agent():
    """Each page-text worker process imports its own module and nothing heavy of the agent
    (the package's names load on first use): a worker starts in tens of ms, not hundreds."""
    probe = (
        "import sys, agent.tools.extract_worker; "
        "print(' '.join(sorted(m.split('.')[0] if not m.startswith('agent') else m "
        "for m in sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert [m for m in loaded if m.startswith("agent")] == [
        "agent",
        "agent.lazy",
        "agent.tools",
        "agent.tools.extract_worker",
    ]
    assert not {"httpx", "httpx2", "openai", "pydantic", "trafilatura"} & set(loaded)


def test_the_packages_public_names_load_on_first_use():
    import agent
    import agent.tools
    from agent.loop import run_agent
    from agent.tools.standard import build_tools

    assert agent.run_agent is run_agent and agent.tools.build_tools is build_tools
    assert {"run_agent", "RunLimits"} <= set(dir(agent)) and "ToolRegistry" in dir(agent.tools)
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        agent.nothing_here  # noqa: B018
