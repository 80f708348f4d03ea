# Two commands for a fresh machine with Python 3.11+ and make:
#   make serve   serve the bundled example run (creates .venv and installs if needed)
#   make test    the whole suite: lint, types, tests (same .venv, plus the test extras)

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PORT   ?= 8000

.PHONY: serve test lint bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "replay-server needs Python 3.11 or newer: run make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $@

serve: $(VENV)/.installed
	$(BIN)/replay-server serve examples/ --port $(PORT)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check replay_server tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

# The benchmark (not part of the tests; needs wrk: apt-get install wrk). Writes
# bench/results/report.md and throughput.png. BENCH_ARGS=--quick for a smoke run.
bench: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[bench]'
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
