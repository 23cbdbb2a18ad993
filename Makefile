# durabl — everything a fresh machine needs is installed from here.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help demo test test-unit lint typecheck format bench docs clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): setup.cfg pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev,django]'
	@touch $(STAMP)

demo: $(STAMP) ## Run the demo: a few hundred jobs on a local SQLite file, live progress
	$(BIN)/python -m durabl demo

test: $(STAMP) lint typecheck ## Lint, type-check and run every test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: $(STAMP) ## Only the fast unit tests
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

lint: $(STAMP) ## ruff (lint and format check)
	$(BIN)/ruff check durabl durabl_django tests bench
	$(BIN)/ruff format --check durabl durabl_django tests bench

typecheck: $(STAMP) ## mypy --strict
	$(BIN)/mypy

format: $(STAMP) ## Format the code
	$(BIN)/ruff format durabl durabl_django tests bench
	$(BIN)/ruff check --fix durabl durabl_django tests bench

$(VENV)/.bench-deps: $(STAMP) setup.cfg
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	@touch $(VENV)/.bench-deps

bench: $(VENV)/.bench-deps ## Cost per job (store operations); throughput and latency vs Huey, django-tasks
	$(BIN)/python bench/cost_per_job.py
	$(BIN)/python bench/throughput.py

docs: ## Where the docs are
	@echo "Docs are Markdown in docs/: start with docs/quickstart.md"

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build *.egg-info
