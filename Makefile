# One command each: `make serve` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install serve test test-unit test-deps lint bench screenshots clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

serve: install
	$(BIN)/agent-server serve --config config.toml

# What the tests need beyond Python packages: a browser for the UI tests, Go for FerretDB,
# cmake/ninja/g++ for llama-server, the MCP test servers (scripts/test-deps.sh).
test-deps: install
	@if [ -x scripts/test-deps.sh ]; then scripts/test-deps.sh; fi

# Every test, in parallel (pytest-xdist, one worker per core: see pyproject.toml).
test: install test-deps
	$(BIN)/python -m pytest

# The unit layer (tests/agent: the loop, parsing, tools), in one process: no servers to spread.
test-unit: install
	$(BIN)/python -m pytest -n0 tests/agent

lint: install
	$(BIN)/ruff check agent server client tests bench
	$(BIN)/mypy

bench: install
	$(BIN)/python -m bench

# The web UI screenshots in docs/ (not part of `make test`).
screenshots: install test-deps
	$(BIN)/python scripts/ui_screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
