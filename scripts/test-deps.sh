#!/usr/bin/env bash
# What the tests need beyond the Python packages in pyproject.toml, installed idempotently:
#   - Debian's chromium, driven by Playwright in tests/ui (browser downloads are impossible
#     here, so `playwright install` is never run: the tests use /usr/bin/chromium);
#   - the Python `playwright` package in .venv (if pyproject's dev extras do not bring it).
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

if ! "$VENV_PY" -c "import playwright" >/dev/null 2>&1; then
    echo "test-deps: installing the playwright Python package into .venv"
    "$VENV_PY" -m pip install --quiet playwright
fi

echo "test-deps: chromium $(command -v chromium), playwright $("$VENV_PY" -c \
    'import importlib.metadata as m; print(m.version("playwright"))')"
