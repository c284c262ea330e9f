# chartgen — the two set-up commands of the README: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
HOST ?= 127.0.0.1
PORT ?= 9315

.PHONY: run test bench lint chaos clean venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/chartgen --serve --trade --sim --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

chaos: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/chaos tests/alerts/test_crash_safety.py tests/brokers/test_order_crash_safety.py tests/daemon/test_sigterm_burst.py

bench: $(STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
