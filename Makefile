# Two commands for a fresh machine with Python 3.11+ and make:
#   make serve   serve the bundled example run (creates .venv and installs if needed)
#   make test    the whole suite: lint, types, every test (same .venv, plus the test extras);
#                what CI runs (.ci/run)
# While developing:
#   make check   lint, types, and the tests that need neither the real harnesses nor a
#                container, on JOBS=2 workers (the dev extra only; under two minutes)

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
JOBS   ?= 2
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check
# the tests `make check` leaves to `make test`
SLOW   := harness or container

.PHONY: serve check test lint bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "replay-server needs Python 3.11 or newer: run make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(PIP) -e '.[dev]'
	@touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-dev
	$(PIP) -e '.[test]'
	@touch $@

serve: $(VENV)/.installed
	$(BIN)/replay-server serve examples/ --port $(PORT)

# (tools run as `python -m`, so that they are this venv's even where .venv was copied)
lint: $(VENV)/.installed-dev
	$(BIN)/python -m ruff check replay_server tests bench
	$(BIN)/python -m mypy

check: lint
	$(BIN)/python -m pytest -m "not ($(SLOW))" -n $(JOBS)

test: $(VENV)/.installed-test lint
	$(BIN)/python -m pytest

# The benchmark (not part of the tests; needs wrk: apt-get install wrk). Writes
# bench/results/report.md and throughput.png. BENCH_ARGS=--quick for a smoke run.
bench: $(VENV)/.installed
	$(PIP) -e '.[bench]'
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
