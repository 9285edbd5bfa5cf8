# gkeflow developer commands. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install demo run test test-fast lint compile check-compiled docs check-docs check-site dist bench bench-quality clean
.PHONY: locks check-locks image-base image-test image-test-gpu image-test-tpu

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

# Tests run in pytest-xdist workers, one per core and one more (tests/conftest.py);
# TESTWORKERS=N runs N, TESTWORKERS=0 runs them in this process.
TESTWORKERS ?= auto

test: $(STAMP) ## Install, then run the whole test suite (7-9 minutes on 2 cores); lists the 15 slowest
	$(BIN)/python -m pytest -n $(TESTWORKERS) --dist worksteal --durations=15

test-fast: $(STAMP) ## Unit and compile tests not marked slow (about 2 minutes), for the edit loop
	$(BIN)/python -m pytest -n $(TESTWORKERS) --dist worksteal -m "not slow" tests/unit tests/compile

lint: $(STAMP) ## Static checks: ruff, hadolint, and the import contracts (layers, no cycles)
	$(BIN)/ruff check components pipelines tests bench examples
	$(BIN)/hadolint images/*.Dockerfile
	$(BIN)/lint-imports --no-cache

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

locks: $(STAMP) ## Re-resolve the images' hashed locks (images/requirements-*.lock) from pyproject.toml
	$(BIN)/python -m gkeflow.pipelines.targets.image_locks write

check-locks: $(STAMP) ## Fail when the images' locks are stale against pyproject.toml
	$(BIN)/python -m gkeflow.pipelines.targets.image_locks check

# The base image, pulled, or (where nothing can be pulled) a stand-in from Debian packages.
IMAGE_BASE := docker.io/library/python:3.11.11-slim-bookworm
image-base:
	@podman image exists $(IMAGE_BASE) || timeout 120 podman pull -q $(IMAGE_BASE) \
	  || images/container-base.sh $(IMAGE_BASE)

image-test: $(STAMP) image-base ## Build the slim and CPU images with podman, run the compiled training steps in the images they are compiled for
	GKEFLOW_IMAGE_TEST=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/images -k "not gpu" \
	  --ignore=tests/images/test_tpu_image.py

image-test-gpu: $(STAMP) image-base ## Build the GPU image with podman (import check only: no GPU needed)
	GKEFLOW_IMAGE_TEST=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/images -k gpu

image-test-tpu: $(STAMP) image-base ## Build the TPU image with podman: import check, Keras-on-JAX training on the CPU, its SavedModel loads in the host TF (no TPU needed)
	GKEFLOW_IMAGE_TEST=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/images/test_tpu_image.py

bench: $(STAMP) ## End-to-end benchmark (see bench/RESULTS.md)
	$(BIN)/python bench/e2e.py

bench-quality: $(STAMP) ## Model quality on 13 real tables, 3 splits each, against default GBDTs and a linear model (bench/quality.py; about 15 minutes)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/quality.py --models auto,gbdt,mlp --splits 3

clean: ## Remove the virtual environment, caches and local run output
	rm -rf $(VENV) gkeflow-output site .pytest_cache .ruff_cache *.egg-info
