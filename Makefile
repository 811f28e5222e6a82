# NoETL Cloud - the two commands that matter: `make up` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)

.PHONY: install prerequisites up demo down status test test-unit lint lock schedule bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

# PostgreSQL server binaries and a Java runtime for the emulators (installed when missing and
# possible); the Google Cloud CLI with its emulators must already be present (docs/local.md).
prerequisites:
	@bash local/prerequisites.sh

## The local stack (PostgreSQL, Pub/Sub, Firestore, GCS, S3) with every role, then the demo (docs/demo.md).
up: $(STAMP) prerequisites
	$(BIN)/noetl-cloud local up --roles all
	$(BIN)/noetl-cloud demo

## The demo again, against the running stack (it starts what is missing).
demo: $(STAMP)
	$(BIN)/noetl-cloud demo

down:
	@test -x $(BIN)/noetl-cloud && $(BIN)/noetl-cloud local down || true

status: $(STAMP)
	$(BIN)/noetl-cloud local status

## Every tier (unit, integration, e2e) against the real local stack; the console's tests drive Chromium.
test: $(STAMP)
	@bash local/prerequisites.sh --browser  # what `prerequisites` installs, and chromium
	$(BIN)/noetl-cloud local up --roles all
	$(BIN)/pytest

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

lint: $(STAMP)
	$(BIN)/ruff check shared functions tests bench
	$(BIN)/mypy
	@command -v terraform >/dev/null && terraform fmt -check -recursive infra || echo "terraform not installed: skipped fmt check"

## infra/modules/stack/maintenance_schedule.tf from the package's maintenance schedule
## (shared/noetl_cloud/maintenance/schedule.py; docs/operations.md).
schedule: $(STAMP)
	$(BIN)/python -m noetl_cloud.maintenance.schedule

## functions/requirements.lock: the image's runtime dependencies with their hashes (after changing
## pyproject.toml's dependencies; docs/deploy.md, "The image").
lock:
	$(PYTHON) functions/lock_requirements.py

## Every benchmark, one after another, each against a baseline measured in the same run; writes
## docs/performance.md and docs/performance.png (bench/report.py).
bench: $(STAMP) prerequisites
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk >/dev/null)
	@$(BIN)/python -c "import procrastinate" 2>/dev/null || $(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'  # bench/peers.py's peer
	$(BIN)/noetl-cloud local up
	$(BIN)/python bench/report.py

clean: down
	rm -rf $(VENV) local/.state
