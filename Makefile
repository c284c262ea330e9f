# chartgen — the two set-up commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
HOST ?= 127.0.0.1
PORT ?= 9315

NODE_TOOLS := tests/conformance/node_modules/.installed

.PHONY: run test bench lint chaos clean venv node-tools

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

test: $(STAMP) $(NODE_TOOLS)
	$(BIN)/python -m pytest -q -p no:cacheprovider

chaos: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/chaos tests/alerts/test_crash_safety.py \
		tests/brokers/test_order_crash_safety.py tests/brokers/test_binance_broker.py \
		tests/engine/test_live_engine_sim.py tests/daemon/test_sigterm_burst.py \
		tests/mcp_bridge/test_http_edge.py tests/mcp_bridge/test_passphrase_attempts.py \
		tests/mcp_bridge/test_oauth_registrations.py tests/mcp_bridge/test_render_flood_daemon.py \
		tests/engine/test_refused_location.py tests/brokers/test_order_guard_daemon.py \
		tests/alerts/test_alert_actions_daemon.py tests/brokers/test_halt_daemon.py \
		tests/brokers/test_unattended_daemon.py

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) tests/conformance/node_modules .pytest_cache .ruff_cache build *.egg-info
