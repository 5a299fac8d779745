"""Run a Python snippet in a fresh interpreter with one test backend loaded.

torch renames PrivateUse1 once per process, so every backend (and every
stand-in package) needs its own process. :func:`run_script` starts one with
``tests/backends/standins``, ``tests/backends`` and the repository's ``src/``
on ``PYTHONPATH``, loads the requested backend before the snippet runs, and
gives the snippet a ``report(obj)`` function that hands a JSON-able value back
to the test (read it with :func:`result`).

Typical test::

    from run_in_subprocess import run_script, result, skip_if_unavailable

    def test_neuron_column():
        proc = run_script('''
            import torch
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
                torch.ones(4) + 1
            report(p.key_averages().table(sort_by="self_device_time_total"))
        ''', backend="neuron")
        skip_if_unavailable(proc)
        assert "Self NEURON" in result(proc)

Every profile prints kineto ``USDT:`` lines on stderr; :func:`clean_stderr`
drops them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "BACKENDS_DIR",
    "PLACEHOLDER_DIR",
    "REPO_ROOT",
    "RESULT_PREFIX",
    "STANDINS_DIR",
    "UNAVAILABLE_EXIT",
    "check",
    "clean_stderr",
    "result",
    "run_script",
    "skip_if_unavailable",
    "unavailable_reason",
]

BACKENDS_DIR = Path(__file__).resolve().parent
STANDINS_DIR = BACKENDS_DIR / "standins"
PLACEHOLDER_DIR = BACKENDS_DIR / "placeholder"
REPO_ROOT = BACKENDS_DIR.parent.parent
RESULT_PREFIX = "NEURONPROF-TEST-RESULT:"
UNAVAILABLE_PREFIX = "NEURONPROF-TESTBACKEND-UNAVAILABLE:"
UNAVAILABLE_EXIT = 77

_PACKAGES = {"neuron": "torch_neuronx", "tpu": "torch_tpu"}

_PREAMBLE = """\
import json as _json
import sys as _sys

def report(obj):
    print({prefix!r} + _json.dumps(obj), flush=True)

try:
{load}
except Exception as _exc:
    if type(_exc).__name__ != "TestBackendUnavailable":
        raise
    print({unavailable!r} + _exc.reason.replace("\\n", " | "), file=_sys.stderr, flush=True)
    _sys.exit({code})
"""


def _load_code(backend: str | None, emit: bool) -> str:
    if backend is None:
        return "    pass"
    if backend in _PACKAGES:
        return f"    import {_PACKAGES[backend]}"
    return f"    import testbackend\n    testbackend.register({backend!r}, emit={emit!r})"


def run_script(
    code: str,
    *,
    backend: str | None = None,
    emit: bool = True,
    placeholder: bool = False,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) in a new Python process; return its result.

    Args:
        code: the snippet; it may call ``report(obj)`` to return a value.
        backend: ``None`` (load nothing), ``"neuron"`` (``import torch_neuronx``,
            the stand-in), ``"tpu"`` (``import torch_tpu``, the stand-in), or
            any other name, registered with ``testbackend.register(name, emit=emit)``.
        emit: for a plain backend name, whether the plugin emits device kernels.
            For the stand-ins set ``NEURONPROF_STANDIN_EMIT=0`` in ``env`` instead.
        placeholder: put the PyPI placeholder ``torch_neuronx`` first on the
            path, so ``import torch_neuronx`` raises ``ImportError("WRONG PACKAGE ...")``.
            Use with ``backend=None``.
        env: extra environment variables (added to a copy of ``os.environ``).
        timeout: seconds before the process is killed.
        cwd: working directory (default: the repository root).

    The process exits with :data:`UNAVAILABLE_EXIT` when the test backend
    cannot be built; :func:`skip_if_unavailable` turns that into a skip.
    """
    if placeholder and backend == "neuron":
        raise ValueError("placeholder=True makes 'import torch_neuronx' fail; use backend=None with it")
    paths = [str(STANDINS_DIR), str(BACKENDS_DIR), str(REPO_ROOT / "src")]
    if placeholder:
        paths.insert(0, str(PLACEHOLDER_DIR))
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    existing = full_env.get("PYTHONPATH")
    full_env["PYTHONPATH"] = os.pathsep.join(paths + ([existing] if existing else []))
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    preamble = _PREAMBLE.format(
        prefix=RESULT_PREFIX,
        load=_load_code(backend, emit),
        unavailable=UNAVAILABLE_PREFIX,
        code=UNAVAILABLE_EXIT,
    )
    script = preamble + "\n" + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script],
        env=full_env,
        cwd=str(cwd) if cwd is not None else str(REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def clean_stderr(text: str) -> str:
    """``text`` without kineto's ``USDT:`` lines."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("USDT:"))


def unavailable_reason(proc: subprocess.CompletedProcess[str]) -> str | None:
    """Why the test backend could not be built in ``proc``, or ``None``."""
    if proc.returncode != UNAVAILABLE_EXIT:
        return None
    for line in proc.stderr.splitlines():
        if line.startswith(UNAVAILABLE_PREFIX):
            return line[len(UNAVAILABLE_PREFIX) :].strip()
    return None


def skip_if_unavailable(proc: subprocess.CompletedProcess[str]) -> None:
    """``pytest.skip`` with the reason when the test backend could not be built."""
    reason = unavailable_reason(proc)
    if reason is not None:
        import pytest

        pytest.skip(f"PrivateUse1 test backend unavailable: {reason}")


def check(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """Skip if the backend is unavailable, fail with the output if ``proc`` failed."""
    skip_if_unavailable(proc)
    if proc.returncode != 0:
        raise AssertionError(
            f"subprocess exited with {proc.returncode}\n--- stdout ---\n{proc.stdout}"
            f"\n--- stderr ---\n{clean_stderr(proc.stderr)}"
        )
    return proc


def result(proc: subprocess.CompletedProcess[str]) -> Any:
    """The value the snippet passed to its last ``report(...)`` call."""
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise AssertionError(
        f"the subprocess reported nothing (exit {proc.returncode})\n--- stdout ---\n{proc.stdout}"
        f"\n--- stderr ---\n{clean_stderr(proc.stderr)}"
    )
