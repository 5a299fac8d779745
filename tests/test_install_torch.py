"""`make install` on a machine where PyTorch's CPU index does not answer: one line, then PyPI; no retry storm."""

from __future__ import annotations

import contextlib
import functools
import http.server
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install_torch.py"


def _closed_port_url() -> str:
    """An index address on this machine where nothing listens: the connection is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"


@contextlib.contextmanager
def _index(folder: Path) -> Iterator[str]:
    """A wheel index (a folder with a torch/ page) served on 127.0.0.1."""
    (folder / "torch").mkdir(parents=True)
    (folder / "torch" / "index.html").write_text("<html><body></body></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_an_unreachable_index_is_asked_once_and_pip_goes_to_pypi_alone() -> None:
    index = _closed_port_url()
    proc = _run("--spec", "torch==2.13.0", "--index", index, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and proc.stderr == "", proc.stdout + proc.stderr
    assert lines[0].startswith(f"{index} does not answer (") and "installing torch==2.13.0 from PyPI" in lines[0]
    # The pip command: PyPI only, pip's own retries cut down.
    assert "--extra-index-url" not in lines[1] and index not in lines[1]
    assert lines[1].split()[-1] == "torch==2.13.0"
    assert "--retries 1" in lines[1] and "--timeout 30" in lines[1]


def test_an_index_that_answers_is_searched_besides_pypi(tmp_path: Path) -> None:
    with _index(tmp_path) as index:
        proc = _run("--spec", "torch==2.13.0", "--index", index, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [proc.stdout.strip()]  # the command alone: nothing to say
    assert proc.stdout.strip().endswith(f"--extra-index-url {index} torch==2.13.0")


def test_no_index_means_pypi_without_asking() -> None:
    proc = _run("--spec", "torch==2.13.0", "--index", "", "--dry-run")
    assert proc.returncode == 0 and "does not answer" not in proc.stdout and "--extra-index-url" not in proc.stdout


@pytest.mark.slow
def test_a_real_install_says_which_torch_build_it_installed_in_two_lines() -> None:
    """pip itself runs: with this torch already there it installs nothing, and asks no index."""
    proc = _run("--spec", f"torch=={torch.__version__}", "--index", _closed_port_url())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kind = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and "Retrying" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert lines[1] == f"torch {torch.__version__} installed ({kind})"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_install_runs_the_one_try_installer(tmp_path: Path) -> None:
    """The Makefile's recipe is this script, given TORCH_SPEC and TORCH_INDEX (make -n prints, runs nothing)."""
    index = _closed_port_url()
    proc = subprocess.run(
        ["make", "-n", "-B", f"VENV={tmp_path / 'venv'}", f"TORCH_INDEX={index}", "install"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf'scripts/install_torch.py --spec "torch==[^"]+" --index "{re.escape(index)}"', proc.stdout), (
        proc.stdout
    )
    assert "--extra-index-url" not in proc.stdout


@pytest.mark.slow
def test_numpy_comes_with_the_base_install_and_torch_imports_without_its_warning() -> None:
    """numpy is a dependency of neuronprof itself: torch warns on every import without it."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    dependencies = re.search(r"^dependencies = \[(.*?)\]", text, re.M | re.S)
    assert dependencies is not None and '"numpy"' in dependencies.group(1)
    proc = subprocess.run(
        [sys.executable, "-c", "import torch, neuronprof; torch.ones(1).numpy()"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "NumPy" not in proc.stderr, proc.stderr
