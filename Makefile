# `make demo` and `make test` are all a newcomer needs; both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A pinned torch: on CPU-only machines this resolves to the local CPU build, while
# a bare `pip install torch` would pull a multi-GB CUDA build. Override on GPU hosts.
TORCH_SPEC ?= torch==2.13.0
PIP := $(BIN)/python -m pip
export NO_MKDOCS_2_WARNING := 1

.PHONY: demo test install install-dev lint typecheck docs docs-serve docs-check bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -q --disable-pip-version-check "$(TORCH_SPEC)"
	$(PIP) install -q --disable-pip-version-check -e .
	touch $@

# The dev extra brings the training-tool integrations (transformers, accelerate,
# lightning); naming the pinned torch again keeps pip from replacing it for them.
$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(PIP) install -q --disable-pip-version-check -e ".[dev,docs,plot]" "$(TORCH_SPEC)"
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

demo: install
	$(BIN)/python examples/rmsnorm.py

test: install-dev
	$(BIN)/ruff check src tests examples benchmarks scripts
	$(BIN)/mypy
	$(BIN)/python -m pytest -q
	$(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

lint: install-dev
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/mypy

docs-serve: install-dev
	$(BIN)/mkdocs serve

docs-check: install-dev
	$(BIN)/python scripts/docs_check.py

bench: install-dev
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) .cache site build dist
