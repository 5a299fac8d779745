"""Shared fixtures: every test must leave torch.profiler stopped."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="rewrite tests/golden/ from the current renders (tests/test_golden_renders.py) instead of comparing",
    )


@pytest.fixture(autouse=True)
def _no_profiler_left_running():
    yield
    if "torch" not in sys.modules:
        return
    import torch

    from neuronprof._session import _active_session

    leaked = bool(torch._C._autograd._profiler_enabled())
    active = _active_session()
    if leaked or active is not None:
        # Stop it so one failure does not cascade through the rest of the suite.
        if active is not None:
            active.__exit__(None, None, None)
        pytest.fail(f"test left a profiler running (torch: {leaked}, neuronprof session: {active!r})")


@pytest.fixture(autouse=True, scope="session")
def _inductor_cache(tmp_path_factory):
    # torch.compile's cache defaults to a shared temp folder; keep tests to their own.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
    yield


@pytest.fixture(autouse=True)
def _unpublished_guide(monkeypatch):
    # Findings link to the published guide when NEURONPROF_DOCS_URL is set; the tests that
    # want it set it themselves, so a developer's own setting changes no expected output.
    monkeypatch.delenv("NEURONPROF_DOCS_URL", raising=False)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """A fresh output folder for a session."""
    return tmp_path / "out"
