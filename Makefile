# One command each: `make serve` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEV    := $(VENV)/.installed-dev

.PHONY: install dev serve test test-unit test-deps lint bench screenshots clean

# The server alone (what `make serve` needs); `make dev` adds the test, lint and bench tools.
install: $(STAMP)

dev: $(DEV)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

$(DEV): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(DEV)

serve: install
	$(BIN)/agent-server serve --config config.toml

# What the tests need beyond Python packages: a browser for the UI tests, Go for FerretDB,
# cmake/ninja/g++ for llama-server, the MCP test servers (scripts/test-deps.sh).
test-deps: dev
	@if [ -x scripts/test-deps.sh ]; then scripts/test-deps.sh; fi

# Every test, in parallel (pytest-xdist, one worker per core: see pyproject.toml).
test: dev test-deps
	$(BIN)/python -m pytest

# The unit layer (tests/agent: the loop, parsing, tools), in one process: no servers to spread.
test-unit: dev
	$(BIN)/python -m pytest -n0 tests/agent

lint: dev
	$(BIN)/ruff check agent server client tests bench
	$(BIN)/mypy

bench: dev
	$(BIN)/python -m bench

# The web UI screenshots in docs/ (not part of `make test`).
screenshots: dev test-deps
	$(BIN)/python scripts/ui_screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
