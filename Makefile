# Trellis: `make run` serves the controller, `make test` runs what CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Test processes (pytest-xdist's -n) of `make test-fast` (JOBS) and `make test` (TEST_JOBS):
# `auto` is one per core; 0 runs the tests in pytest's own process (e.g. for --pdb). Extra pytest
# arguments go in ARGS: `make test-fast ARGS='-k mfa -x'`. `make test` runs three on the project's
# 2-core machines: its end-to-end tests spend much of their time waiting for servers they
# started, whose CPU is not the test process's (with one per core the cores were busy 1.6 of 2).
JOBS ?= auto
TEST_JOBS ?= 3
ARGS ?=
# Seconds of schemathesis fuzzing (tests/e2e/test_schemathesis.py, TRELLIS_FUZZ_SECONDS) in
# `make test` and in `make fuzz`: `make fuzz FUZZ_SECONDS=1800`. Seconds of the mixed soak
# (tests/e2e/test_soak.py, TRELLIS_SOAK_SECONDS) in `make test`. Both load both cores for their
# whole length: `make test` keeps them short, the targets of their own run them long.
TEST_FUZZ_SECONDS ?= 30
FUZZ_SECONDS ?= 600
TEST_SOAK_SECONDS ?= 20
# Test modules are compiled (and their asserts rewritten) once and cached in __pycache__, even
# where the environment says not to write bytecode: that costs every run some 10 s otherwise.
PYTEST_FLAGS := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q --dist worksteal
PYTEST := $(PYTEST_FLAGS) -n $(JOBS)

.PHONY: help run init serve settings cluster test test-fast test-diff fuzz check bench clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed -e 's/\$$\$$/$$/g' | awk -F ':.*## ' '{ printf "%-10s %s\n", $$1, $$2 }'

$(STAMP): pyproject.toml
	@if [ -d $(VENV) ]; then echo "make: pyproject.toml changed: updating $(VENV)"; \
	 else echo "make: first run: creating $(VENV) and installing Trellis with its dev tools (under a minute)"; fi
	@test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	@# uv installs in seconds what pip takes half a minute for (pip if uv cannot be had). What
	@# trellis imports is compiled now, as pip would; the dev tools compile as `make test` imports them.
	@if $(BIN)/pip install --quiet --disable-pip-version-check uv; then \
	   $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e . && \
	   $(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'; \
	 else $(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'; fi
	@# the bulk advice's compiled loops (trellis advise), compiled now and cached (some 15 s)
	@$(BIN)/python -m api.advice_parquet
	@touch $(STAMP)
	@echo "make: installed into $(VENV)"

init: $(STAMP)  ## create .trellis (database, PKI, admin) if absent
	@$(BIN)/trellis init

serve: $(STAMP)  ## serve HTTPS on $$TRELLIS_BIND (trellis serve --help lists the settings)
	@$(BIN)/trellis serve

settings: $(STAMP)  ## print the settings table of docs/operations.md from controller/settings.py
	@$(BIN)/python -m controller.settings --markdown

run: init serve  ## init if needed, then serve in the foreground (Ctrl-C stops)

# `make cluster CLUSTER_ARGS='--api-port 2280 --ctrl-port 2262'` (python -m cluster --help).
CLUSTER_ARGS ?=
cluster: $(STAMP)  ## three controllers on one PostgreSQL and two routers on 127.0.0.1-3, to try failover (Ctrl-C stops)
	@$(BIN)/python -m cluster $(CLUSTER_ARGS)

test: $(STAMP)  ## every test (what CI runs): unit, API, e2e, bench smoke runs, a short fuzz (TEST_FUZZ_SECONDS)
	TRELLIS_FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) TRELLIS_SOAK_SECONDS=$(TEST_SOAK_SECONDS) $(PYTEST_FLAGS) -n $(TEST_JOBS) $(ARGS)

test-fast: $(STAMP)  ## the edit loop: unit and API tests (in memory; no server, no fuzz; property tests on a quarter of their examples)
	TRELLIS_EXAMPLES_SCALE=0.25 $(PYTEST) -m 'not slow' tests/unit tests/api $(ARGS)

test-diff: $(STAMP)  ## the differential tier alone: Trellis beside OpenZiti v1.6.0 (builds ziti once)
	$(BIN)/pytest -q -n 0 tests/differential $(ARGS)

fuzz: $(STAMP)  ## the schemathesis fuzz alone, for longer (FUZZ_SECONDS)
	TRELLIS_FUZZ_SECONDS=$(FUZZ_SECONDS) $(BIN)/pytest -q -n 0 tests/e2e/test_schemathesis.py $(ARGS)

check: $(STAMP)  ## ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)  ## benchmarks
	$(BIN)/pytest -q -m bench --benchmark-enable tests/bench
	$(BIN)/python -m bench engine --tier L

clean:  ## remove the venv and caches (keeps .trellis)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
