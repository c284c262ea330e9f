# chartgen — the two set-up commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
HOST ?= 127.0.0.1
PORT ?= 9315

NODE_TOOLS := tests/conformance/node_modules/.installed

.PHONY: run test test-servers test-all bench lint chaos clean venv node-tools

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# Node 22, the MCP conformance suite and the MCP Inspector (npm packages, pinned by the lockfile)
$(NODE_TOOLS): tests/conformance/package.json tests/conformance/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd tests/conformance && npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else echo "npm not found: the MCP conformance and Inspector tests will be skipped"; fi

node-tools: $(NODE_TOOLS)

run: $(STAMP)
	$(BIN)/chartgen --serve --trade --sim --host $(HOST) --port $(PORT)

# `make test`: every test except those marked slow (the chaos and crash suites, listed in
# tests/conftest.py SLOW_SUITES, other long daemon runs and the 10,000-bar indicator check) or servers (the storage and cluster
# suites that start PostgreSQL or nats-server, SERVER_SUITES); `make test-servers`: the servers
# ones not slow; `make chaos`: the slow ones; `make test-all`: all three, as CI runs them (.ci/run).
test: $(STAMP) $(NODE_TOOLS)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow and not servers"

test-servers: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "servers and not slow"

chaos: $(STAMP) $(NODE_TOOLS)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow

test-all: test test-servers chaos

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) tests/conformance/node_modules .pytest_cache .ruff_cache build *.egg-info
