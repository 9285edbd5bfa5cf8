# gkeflow developer commands. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install demo run test test-fast lint compile check-compiled docs check-docs check-site dist bench clean

help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install gkeflow with its dev tools

demo: $(STAMP) ## Install, then run the training pipeline locally on the bundled data
	$(BIN)/gkeflow run

run: demo ## Alias of demo

test: $(STAMP) ## Install, then run the whole test suite (about 12 minutes on 2 idle cores); lists the 15 slowest
	$(BIN)/python -m pytest --durations=15

test-fast: $(STAMP) ## Unit and compile tests only (about 3 minutes), for the edit loop
	$(BIN)/python -m pytest tests/unit tests/compile

lint: $(STAMP) ## Static checks
	$(BIN)/ruff check components pipelines tests bench examples
	$(BIN)/hadolint images/*.Dockerfile

compile: $(STAMP) ## Regenerate compiled/*.yaml for GKE and Vertex and compiled/components/
	$(BIN)/gkeflow compile

check-compiled: $(STAMP) ## Fail when compiled/ is out of date with the code
	$(BIN)/gkeflow compile --check

docs: $(STAMP) ## Regenerate docs/components.md and build the documentation site into site/
	$(BIN)/gkeflow docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

check-site: $(STAMP) ## Build the documentation site strictly (broken links fail); README <= 300 lines
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@test $$(wc -l < README.md) -le 300 || { echo "README.md has $$(wc -l < README.md) lines; keep it <= 300 and move reference text to docs/"; exit 1; }

check-docs: $(STAMP) ## Fail when docs/components.md is out of date with the components
	$(BIN)/gkeflow docs --check

dist: $(STAMP) ## Build the wheel and sdist into dist/ (version: components/images.py)
	$(BIN)/python -m build --no-isolation --outdir dist .

bench: $(STAMP) ## End-to-end benchmark (see bench/RESULTS.md)
	$(BIN)/python bench/e2e.py

clean: ## Remove the virtual environment, caches and local run output
	rm -rf $(VENV) gkeflow-output site .pytest_cache .ruff_cache *.egg-info
