"""Shared fixtures: every test must leave torch.profiler stopped."""

from __future__ import annotations

import os
import subprocess
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


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's temporary folder: the workers of one `pytest -n` run share it."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The guide built with ``mkdocs build --strict``, once per run; tests only read it.

    The repository address is left unset, as on a fork's own build. Workers of one run
    share the build: the first builds it, under a lock, and the others wait for it.
    """
    import fcntl  # (POSIX: imported here, so that the suite's other tests load where it is missing)

    run = _run_folder(tmp_path_factory)
    site, done = run / "site", run / "site.built"
    with open(run / "site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
            env.pop("NEURONPROF_REPO_URL", None)
            cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)]
            subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
            done.touch()
    return site


@pytest.fixture(autouse=True, scope="session")
def _inductor_cache(tmp_path_factory):
    # torch.compile's cache defaults to a shared temp folder; keep tests to their own. The workers
    # of one `pytest -n` run share the run's folder, so its C++ toolchain checks and kernels are
    # built once, not once per worker (the cache is made for use by several processes at once).
    folder = _run_folder(tmp_path_factory) / "inductor"
    folder.mkdir(exist_ok=True)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(folder))
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
