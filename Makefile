# `make demo` and `make test` are all a newcomer needs; both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A pinned torch, the CPU-only build: a bare `pip install torch` would pull the
# multi-GB CUDA build on Linux. TORCH_INDEX is PyTorch's CPU wheel index, searched in
# addition to PyPI (everything else still comes from PyPI); its `+cpu` build wins for
# `torch==2.13.0`. scripts/install_torch.py asks the index once (5 s) and, when it does
# not answer (a mirror, a firewall), installs from PyPI in one line instead of pip's
# retries, and says which build it installed (numpy comes with neuronprof itself).
# On a GPU host: `make TORCH_INDEX= ...` (and a CUDA TORCH_SPEC if needed).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PIP := $(BIN)/python -m pip
export NO_MKDOCS_2_WARNING := 1

.PHONY: demo test quick goldens compat install install-dev lint typecheck docs docs-serve docs-check bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml scripts/install_torch.py | $(BIN)/python
	$(BIN)/python scripts/install_torch.py --spec "$(TORCH_SPEC)" --index "$(TORCH_INDEX)"
	$(PIP) install -q --disable-pip-version-check -e .
	touch $@

# The dev extra brings the training-tool integrations (transformers, accelerate,
# lightning); naming the pinned torch again keeps pip from replacing it for them (the
# build installed above satisfies it, so PyPI alone is asked).
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
	$(BIN)/python -m pytest -q -n 2 --dist loadfile
	$(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

# The fast loop while editing: every test but those marked `slow` (real training loops,
# subprocesses, torch.compile, the docs site...); `make test` still runs them all.
quick: install-dev
	$(BIN)/python -m pytest -q -m "not slow"

# Rewrite tests/golden/ from the current renders of the hand-built models in
# tests/test_golden_renders.py; review the change with `git diff tests/golden`.
goldens: install-dev
	$(BIN)/python -m pytest -q tests/test_golden_renders.py --update-goldens

# `TORCH_SPEC=torch==2.15.0 make compat`: the core tests (session, tables, export,
# agreement) against another torch, in a virtual environment of its own (COMPAT_VENV,
# one per torch release by default), so .venv and `make test` are left as they are.
COMPAT_VENV ?= .venv-compat-$(subst *,x,$(subst =,,$(subst <,,$(subst >,,$(TORCH_SPEC)))))
COMPAT_TESTS := tests/test_session.py tests/test_table_totals.py tests/test_exports.py tests/test_agreement.py
COMPAT_PIP := $(COMPAT_VENV)/bin/python -m pip

compat:
	test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python scripts/install_torch.py --spec "$(TORCH_SPEC)" --index "$(TORCH_INDEX)"
	$(COMPAT_PIP) install -q --disable-pip-version-check -e . "$(TORCH_SPEC)" "pytest>=7" "hypothesis>=6" pandas
	$(COMPAT_VENV)/bin/python -c "import torch; print('compat: torch', torch.__version__)"
	$(COMPAT_VENV)/bin/python -m pytest -q -p no:cacheprovider $(COMPAT_TESTS)

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
	rm -rf $(VENV) .venv-compat-* .cache site build dist
