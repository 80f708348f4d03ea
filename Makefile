# replay-server's tasks. `make` (or `make help`) lists them; on a fresh machine with
# Python 3.11+ and make, `make serve` and `make test` are all it takes (each creates .venv
# and installs what it needs).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
JOBS   ?= 2
# uv installs (a tenth of pip's time here); pip installs uv itself, into .venv. uv reads
# not pip's configuration but its own: behind a package mirror, set UV_INDEX_URL.
UV     := $(BIN)/uv pip install --quiet --python $(BIN)/python
# the tests `make check` leaves to `make test`: the real harnesses, the container, and each
# test that takes a second or more (marked `slow`: real processes, signals, timeouts, fuzzing)
SLOW   := harness or container or slow

.DEFAULT_GOAL := help
.PHONY: help serve check test lint docs bench clean

help: ## this list (plain `make` shows it too)
	@echo 'usage: make TARGET [PORT=$(PORT)] [JOBS=$(JOBS)] [PYTHON=$(PYTHON)]'
	@awk -F ':.*## ' '/^[a-z]+:.*## / { printf "  %-6s %s\n", $$1, $$2 }' $(firstword $(MAKEFILE_LIST))

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "replay-server needs Python 3.11 or newer: run make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv

# the package and the openai client (the line `serve` prints runs with this venv's python)
$(VENV)/.installed: pyproject.toml | $(BIN)/uv
	$(UV) -e '.[client]'
	@touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(UV) -e '.[dev]'
	@touch $@

# Everything `make test` needs, in one run. Nothing is compiled to bytecode ahead: the
# tests compile what they import, once (they write bytecode: see PYTEST).
$(VENV)/.installed-test: pyproject.toml | $(BIN)/uv
	$(UV) -e '.[test,client]'
	@touch $(VENV)/.installed $(VENV)/.installed-dev $@

serve: $(VENV)/.installed ## serve the bundled example run on http://127.0.0.1:PORT/v1
	$(BIN)/replay-server serve examples/ --port $(PORT)

# (tools run as `python -m`, so that they are this venv's even where .venv was copied)
lint: $(VENV)/.installed-dev ## ruff, and strict mypy on the package, the tests and the docs hook
	$(BIN)/python -m ruff check replay_server tests bench docs/hooks
	$(BIN)/python -m mypy

# Not --quiet: MkDocs then stops counting warnings, and a strict build passes them. The
# variable silences Material's end-of-life notice (fixes until May 2027; its successor,
# Zensical, reads this mkdocs.yml).
docs: $(VENV)/.installed-dev ## build the documentation site, strictly (any warning fails), and throw it away
	@site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && \
	  NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --site-dir "$$site"

# Tests run on JOBS workers; a module whose tests share one costly fixture is one
# xdist_group, run by one worker (--dist loadgroup). They run with bytecode written even
# where PYTHONDONTWRITEBYTECODE is set: without it each worker rewrites and compiles every
# test module again, and each of the hundreds of commands the tests start compiles
# replay_server again, on every run.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(JOBS) --dist loadgroup
check: lint docs ## while developing: lint, docs, the tests but harness, container and slow (JOBS workers)
	$(PYTEST) -m "not ($(SLOW))"

test: $(VENV)/.installed-test lint docs ## the whole suite, as CI runs it (.ci/run), on JOBS workers: see the README's Set up
	$(PYTEST)

# writes bench/results/report.md and throughput.png; BENCH_ARGS=--quick for a smoke run
bench: $(VENV)/.installed ## the benchmark (not a test; needs wrk: apt-get install wrk)
	$(UV) -e '.[bench]'
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean: ## remove .venv and the tools' caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
