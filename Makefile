# Trellis: `make run` serves the controller, `make test` runs what CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help run init serve test check bench clean

help:  ## list targets
	@grep -E '^[a-z]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

init: $(STAMP)  ## create .trellis (database, PKI, admin) if absent
	$(BIN)/trellis init

serve: $(STAMP)  ## serve HTTPS on $$TRELLIS_BIND (default 127.0.0.1:1280)
	$(BIN)/trellis serve

run: init serve  ## init if needed, then serve in the foreground (Ctrl-C stops)

test: $(STAMP)  ## the full test suite (what CI runs)
	$(BIN)/pytest -q

check: $(STAMP)  ## ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)  ## benchmarks
	$(BIN)/pytest -q -m bench --benchmark-enable tests/bench
	$(BIN)/python -m bench engine --tier L

clean:  ## remove the venv and caches (keeps .trellis)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
