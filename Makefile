# One command each: `make serve` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEV    := $(VENV)/.installed-dev

.PHONY: install dev serve test test-unit test-deps lint bench eval screenshots clean lock

# The server alone (what `make serve` needs); `make dev` adds the test, lint and bench tools.
# Both install the exact versions in requirements.txt / requirements-dev.txt (pinned, with
# hashes: what the suite passed with), then the project itself without resolving again.
install: $(STAMP)

dev: $(DEV)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

$(DEV): $(STAMP) requirements-dev.txt
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements-dev.txt
	touch $(DEV)

# Rewrite the lockfiles from pyproject.toml after its dependencies change. Versions already
# pinned stay where they still fit; `make lock UPGRADE=1` moves every pin to the newest release.
# The dev file is constrained by the runtime one, so a version is the same in both.
LOCK := CUSTOM_COMPILE_COMMAND="make lock" $(BIN)/pip-compile --quiet --generate-hashes \
	--allow-unsafe --strip-extras --no-emit-find-links $(if $(UPGRADE),--upgrade)
lock: dev
	$(LOCK) -o requirements.txt pyproject.toml
	$(LOCK) --extra dev -c requirements.txt -o requirements-dev.txt pyproject.toml

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

# The task benchmark on real models (docs/eval.md; not part of `make test`): our loop beside
# the OpenAI Agents SDK's Runner, on the bundled llama.cpp models or any endpoint:
# `make eval EVAL_ARGS="--base-url http://host:8000/v1 --model NAME"`. The SDK wants an older
# websockets than the server's lock, so the eval has a venv of its own.
EVAL_VENV := .venv-eval
$(EVAL_VENV)/.installed: pyproject.toml
	test -x $(EVAL_VENV)/bin/python || $(PYTHON) -m venv $(EVAL_VENV)
	$(EVAL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(EVAL_VENV)/bin/python -m pip install --quiet -e '.[eval]'
	touch $@

eval: test-deps $(EVAL_VENV)/.installed
	$(EVAL_VENV)/bin/python -m bench.eval $(EVAL_ARGS)

# The web UI screenshots in docs/ (not part of `make test`).
screenshots: dev test-deps
	$(BIN)/python scripts/ui_screenshots.py

clean:
	rm -rf $(VENV) $(EVAL_VENV) .pytest_cache .mypy_cache .ruff_cache
