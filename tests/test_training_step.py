"""The "Profile your training step" page: its script, copied alone into a project, prints the page's story."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


# The page's story: `data` is the largest phase and `input_pipeline` the first finding. It
# holds by construction, not by a race: a batch of 32 samples sleeps at least 32 x 5 ms in
# the main process, and a sleep never ends early however busy the machine is.
LOAD_FLOOR_US_PER_STEP = 32 * 5.0 * 1000
PHASES = ("data", "forward", "backward", "optimizer")


@contextlib.contextmanager
def _busy_sibling() -> Iterator[list[str]]:
    """A process that keeps one CPU busy; yields the command prefix that runs beside it on that CPU.

    With ``taskset`` (Linux) the sibling and the measured run share CPU 0, as on a loaded
    two-core machine where another job holds a core; without it they share the machine.
    """
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") and sys.platform.startswith("linux") else []
    sibling = subprocess.Popen([*pin, sys.executable, "-c", "while True: pass"])
    try:
        yield pin
    finally:
        sibling.kill()
        sibling.wait()


def _first_table_phases(out: str) -> list[str]:
    """The phase labels in the order of the first table (sorted by CPU total)."""
    first = out.split("sorted by cpu_total", 1)[0]
    names = [line.split()[0] for line in first.splitlines() if line.strip()]
    return [n for n in names if n in PHASES]


def _row_cpu_total_us(out: str, name: str) -> float:
    first = out.split("sorted by cpu_total", 1)[0]
    line = next(line for line in first.splitlines() if line.split() and line.split()[0] == name)
    return float(line.split()[-1])


def _check_story(out: str, steps: int) -> None:
    assert "Self CPU (µs)" in out
    assert f"{steps} profiled steps" in out
    assert "AdamW" in out
    assert _first_table_phases(out) and _first_table_phases(out)[0] == "data", out[:3000]
    assert set(_first_table_phases(out)) == set(PHASES)
    # The load floor, summed over the recorded steps: what makes `data` the largest phase.
    assert _row_cpu_total_us(out, "data") >= steps * LOAD_FLOOR_US_PER_STEP
    findings = [line.split()[1] for line in out.splitlines() if line[:1].isdigit() and ". [" in line[:6]]
    assert f"finding(s) over {steps} step(s) (cpu)" in out
    assert findings[:1] == ["[input_pipeline]"], out[-3000:]
    # A CPU run: nobody passed modes, so no note about them, and no device waits.
    assert "mode 'device'" not in out and "mode 'runtime'" not in out
    assert "the device waits" not in out


def test_copied_training_script_prints_the_pages_story_beside_a_busy_sibling(tmp_path: Path) -> None:
    """The script, copied alone into a project, prints the page's story on a CPU that another process keeps busy."""
    with _busy_sibling() as pin:
        out = _run_copied_script(tmp_path, pin, dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    _check_story(out, 2)


def test_training_story_holds_unpinned_without_thread_variables_beside_a_busy_sibling(tmp_path: Path) -> None:
    """Run as a reader runs it, beside a process that keeps CPU 0 busy.

    Not pinned to a core and without ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` in the
    environment: the thread count is the one the script sets itself
    (``torch.set_num_threads(1)``), on whichever cores the system gives it.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    with _busy_sibling():
        out = _run_copied_script(tmp_path, [], env)
    _check_story(out, 2)


def _run_copied_script(tmp_path: Path, pin: list[str], env: dict[str, str]) -> str:
    """Copy the example alone into ``tmp_path``, run it (``pin`` before the interpreter), return its output."""
    script = tmp_path / "training_step.py"
    shutil.copy(ROOT / "examples" / "training_step.py", script)
    command = [*pin, sys.executable, str(script), "--active", "2"]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_copied_training_script_explains_a_missing_device(tmp_path: Path) -> None:
    """``--device neuron`` on a machine without it stops with neuronprof's message, not torch's traceback."""
    script = tmp_path / "training_step.py"
    shutil.copy(ROOT / "examples" / "training_step.py", script)
    for device, package in (("neuron", "torch_neuronx"), ("tpu", "torch_tpu")):
        proc = subprocess.run(
            [sys.executable, str(script), "--device", device, "--active", "1"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert f"backend {device!r} is unavailable" in proc.stderr and package in proc.stderr
        assert "neuronprof doctor --probe" in proc.stderr
        assert "Traceback" not in proc.stderr and "Expected one of" not in proc.stderr


def test_training_session_records_the_labelled_phases() -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import training_step
    finally:
        sys.path.pop(0)
    threads = torch.get_num_threads()
    try:
        s = training_step.train(active=2, num_workers=0)
        assert torch.get_num_threads() == 1  # the example's one thread, whatever the machine's default
    finally:
        torch.set_num_threads(threads)
    table = s.table(row_limit=None)
    assert table.steps == 2
    for label in ("data", "forward", "backward", "optimizer"):
        assert table.row(label).calls == 2
    # The phases hold the step's work: each label's total covers the ops run inside it.
    assert table.row("forward").cpu_total_us >= table.row("aten::addmm").cpu_total_us
    assert s.insights() is not None
