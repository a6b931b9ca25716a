#!/usr/bin/env bash
# What the tests need beyond the Python packages in pyproject.toml, installed idempotently:
#   - Debian's haproxy, the load balancer of tests/storage/test_load_balancer.py;
#   - Debian's chromium-headless-shell (Chromium's headless-only build, what Playwright runs
#     for headless tests), driven by Playwright in tests/ui (browser downloads are impossible
#     here, so `playwright install` is never run);
#   - the Python `playwright` package in .venv, at its pin in requirements-dev.txt (if
#     `make dev` did not bring it);
#   - Go >= 1.22, which builds FerretDB (tests/fakes/ferretdb.py) on first use: Debian's
#     golang-go when its candidate is new enough (Debian 13), else a versioned golang-1.2x-go
#     package (bookworm-backports), linked as /usr/local/bin/go; when apt has none, what to
#     install is printed (set MONGODB_URI to a real MongoDB to skip FerretDB instead);
#   - cmake, ninja and g++, which build llama-server (tests/fakes/llama_cpp.py) on first use;
#   - the MCP servers tests/mcp talks to: `mcp-server-time` (PyPI, in .venv) and, from npm,
#     pinned versions of @modelcontextprotocol/server-everything and server-filesystem in
#     ~/.cache/agent-server/npm (tests skip them when node is missing);
#   - the AG-UI reference client, @ag-ui/client and @ag-ui/core (pinned), into the same folder,
#     for tests/agui/client.mjs.
# Safe to run again and again; needs root (or sudo) only when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV_PY="${VENV_PY:-.venv/bin/python}"
export DEBIAN_FRONTEND=noninteractive

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
APT_UPDATED=""
apt_install() {
    if [ -z "$APT_UPDATED" ]; then $SUDO apt-get update -qq; APT_UPDATED=1; fi
    $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v chromium-headless-shell >/dev/null 2>&1; then
    echo "test-deps: installing chromium-headless-shell (Debian package)"
    if ! apt_install chromium-headless-shell fonts-dejavu-core; then
        # The UI tests also run on the full browser, about three times slower.
        command -v chromium >/dev/null 2>&1 || exit 1
        echo "test-deps: could not install it; the UI tests use $(command -v chromium)"
    fi
fi

# The C++ toolchain for llama-server.
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "test-deps: installing ${missing[*]} (to build llama-server)"
    apt_install "${missing[@]}"
fi

# Go for FerretDB: its module says `go 1.22`.
GO_MIN_MINOR=22
go_minor() {  # "go version go1.23.4 linux/amd64" -> 23; nothing if Go is missing
    { "${1:-go}" version 2>/dev/null || true; } | sed -n 's/.*go1\.\([0-9][0-9]*\).*/\1/p'
}
apt_minor() {  # the candidate version of an apt package as a Go minor version, or nothing
    { apt-cache policy "$1" 2>/dev/null || true; } | sed -n 's/^ *Candidate: \([0-9]*:\)\{0,1\}1\.\([0-9][0-9]*\).*/\2/p'
}
have="$(go_minor go)"
if [ -z "$have" ] || [ "$have" -lt "$GO_MIN_MINOR" ]; then
    [ -n "$APT_UPDATED" ] || { $SUDO apt-get update -qq; APT_UPDATED=1; }
    installed=""
    candidate="$(apt_minor golang-go)"
    if [ -n "$candidate" ] && [ "$candidate" -ge "$GO_MIN_MINOR" ]; then
        echo "test-deps: installing golang-go (Go 1.$candidate, to build FerretDB)"
        apt_install golang-go
        installed=1
    else
        for minor in 26 25 24 23 22; do
            if [ -n "$(apt_minor "golang-1.$minor-go")" ]; then
                echo "test-deps: installing golang-1.$minor-go (to build FerretDB)"
                apt_install "golang-1.$minor-go"
                $SUDO ln -sf "/usr/lib/go-1.$minor/bin/go" /usr/local/bin/go
                installed=1
                break
            fi
        done
    fi
    if [ -z "$installed" ]; then
        echo "test-deps: Go >= 1.$GO_MIN_MINOR is needed to build FerretDB for the storage tests," >&2
        echo "  and apt offers none (golang-go here is 1.${candidate:-?}). Install one of:" >&2
        echo "  - Debian 12: enable bookworm-backports, then" >&2
        echo "      apt-get install -t bookworm-backports golang-1.23-go" >&2
        echo "      ln -s /usr/lib/go-1.23/bin/go /usr/local/bin/go" >&2
        echo "  - Debian 13 / Ubuntu 24.04: apt-get install golang-go" >&2
        echo "  - anywhere: the go1.23 tarball from https://go.dev/dl into /usr/local/go" >&2
        echo "  or run the tests against a real MongoDB: MONGODB_URI=mongodb://... make test" >&2
    fi
fi

if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
    echo "test-deps: installing haproxy (Debian package)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
    $SUDO apt-get install -y -qq --no-install-recommends haproxy >/dev/null \
        || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends haproxy >/dev/null; }
fi

# `make dev` installs both from requirements-dev.txt; a venv made another way gets the same pins.
pinned() { grep -m1 -E "^$1==" requirements-dev.txt | cut -d' ' -f1; }

if ! "$VENV_PY" -c "import playwright" >/dev/null 2>&1; then
    echo "test-deps: installing the playwright Python package into .venv"
    "$VENV_PY" -m pip install --quiet "$(pinned playwright)"
fi

if ! "$VENV_PY" -c "import mcp_server_time" >/dev/null 2>&1; then
    echo "test-deps: installing mcp-server-time into .venv"
    "$VENV_PY" -m pip install --quiet "$(pinned mcp-server-time)"
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

# A real model server for tests/models (built and assembled once, cached; see above).
"$VENV_PY" -m tests.fakes.llama_cpp

echo "test-deps: go $(command -v go || echo missing), chromium $(command -v chromium-headless-shell), playwright $("$VENV_PY" -c \
    'import importlib.metadata as m; print(m.version("playwright"))')"
