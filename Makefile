# durabl — everything a fresh machine needs is installed from here.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# The test targets run the tests in TEST_WORKERS processes (pytest-xdist; 0: in this one).
# Most tests wait on subprocesses, servers, leases and timeouts, not on the CPU: a serial
# run keeps about a quarter of one core busy. Each module runs on one worker (the fault
# campaign shares its servers across its module), in the order tests/conftest.py gives.
TEST_WORKERS ?= 4
XDIST := -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder
EXAMPLE := examples/shop
# Debian packages some tests use (they skip without them): the admin's browser tests
# (chromium, its driver, a font) and the PostgreSQL tests through PgBouncer.
DEBIAN_TEST_PACKAGES := chromium chromium-driver fonts-dejavu-core pgbouncer

.DEFAULT_GOAL := help
.PHONY: help demo test test-unit lint typecheck check-example test-packages format bench docs clean chaos

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): setup.cfg pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# setuptools prints a boxed notice on every editable install ("Editable installation",
	@# information only); it is not about this project, so it is not shown.
	PYTHONWARNINGS='ignore:Editable installation' \
		$(BIN)/python -m pip install --quiet -e '.[test,dev,django,postgres,schemas,cron,metrics,otel]'
	@touch $(STAMP)

demo: $(STAMP) ## Run the demo: a few hundred jobs on a local SQLite file, live progress
	$(BIN)/python -m durabl demo

test: $(STAMP) lint typecheck check-example test-packages ## Lint, type-check, check the example project, run every test
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

test-unit: $(STAMP) ## Only the fast unit tests
	$(BIN)/python -m pytest tests/unit $(XDIST) $(PYTEST_ARGS)

.PHONY: test-mongo
test-mongo: $(STAMP) ## Only the real-MongoDB lane: MONGO_URL's replica set, else the SecantusDB wire server
	DURABL_REQUIRE_MONGO=1 $(BIN)/python -m pytest tests -k "mongodb or changestream_real" -rs $(XDIST) $(PYTEST_ARGS)

CHAOS_MINUTES ?= 30
chaos: $(STAMP) test-packages ## The long fault campaign: CHAOS_MINUTES of random faults on every store (seed printed; DURABL_CHAOS_REPLAY replays a run)
	DURABL_CHAOS_MINUTES=$(CHAOS_MINUTES) $(BIN)/python -m pytest tests/chaos/test_campaign.py \
		-k long -m chaos -s -rs -o faulthandler_timeout=0 $(PYTEST_ARGS)

lint: $(STAMP) ## ruff (lint and format check) and the import contracts (layers)
	$(BIN)/ruff check durabl durabl_django tests bench examples
	$(BIN)/ruff format --check durabl durabl_django tests bench examples
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP) ## mypy --strict
	$(BIN)/mypy

check-example: $(STAMP) ## The example Django project: manage.py check, makemigrations --check
	$(BIN)/python $(EXAMPLE)/manage.py check
	@# makemigrations opens Django's database: a throwaway directory keeps the example clean
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		SHOP_DATA_DIR="$$tmp" $(BIN)/python $(EXAMPLE)/manage.py makemigrations --check --dry-run

test-packages: ## Install the Debian packages some tests use, if missing: chromium (admin browser tests), pgbouncer
	@missing=""; \
	for package in $(DEBIAN_TEST_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q 'install ok installed' \
			|| missing="$$missing $$package"; \
	done; \
	if [ -z "$$missing" ]; then \
		exit 0; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "test-packages: installing$$missing with apt-get (no recommended packages)"; \
		log=$$(mktemp) && \
		{ DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			-o Dpkg::Use-Pty=0 $$missing; } >"$$log" 2>&1 \
			|| { tail -n 5 "$$log"; echo "test-packages: apt-get could not install them; the tests that need them will skip"; }; \
		rm -f "$$log"; \
	else \
		echo "test-packages:$$missing missing and apt-get as root is not available; the tests that need them will skip"; \
	fi

format: $(STAMP) ## Format the code
	$(BIN)/ruff format durabl durabl_django tests bench examples
	$(BIN)/ruff check --fix durabl durabl_django tests bench examples

$(VENV)/.bench-deps: $(STAMP) setup.cfg
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install --quiet -e '.[bench]'
	@touch $(VENV)/.bench-deps

bench: $(VENV)/.bench-deps ## Cost per job; throughput and latency vs Huey, django-tasks (SQLite), Procrastinate (PostgreSQL)
	$(BIN)/python bench/cost_per_job.py
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/throughput.py --store postgres

docs: ## Where the docs are
	@echo "Docs are Markdown in docs/: start with docs/quickstart.md"

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build *.egg-info
