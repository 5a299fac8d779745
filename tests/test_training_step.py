"""The "Profile your training step" page: its script, copied alone into a project, prints a table and findings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_copied_training_script_prints_table_and_findings(tmp_path: Path) -> None:
    # A reader's project: the file alone, run as a script, with DataLoader worker processes.
    script = tmp_path / "training_step.py"
    shutil.copy(ROOT / "examples" / "training_step.py", script)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, str(script), "--active", "2", "--workers", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    # The table: its header, the record_function labels of each phase, the optimizer and the steps recorded.
    assert "Self CPU (µs)" in out
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    # Sorted by CPU total, the phases that hold most of the step are among the first rows.
    for label in ("forward", "backward"):
        assert label in names, label
    assert "2 profiled steps" in out
    assert "AdamW" in out
    # The findings of s.insights() follow the table.
    assert "finding(s) over 2 step(s) (cpu)" in out
    # The page promises a data-loading finding: the example's Dataset loads slowly on purpose.
    assert "[input_pipeline]" in out


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
    s = training_step.train(active=2, num_workers=0)
    table = s.table(row_limit=None)
    assert table.steps == 2
    for label in ("data", "forward", "backward", "optimizer"):
        assert table.row(label).calls == 2
    # The phases hold the step's work: each label's total covers the ops run inside it.
    assert table.row("forward").cpu_total_us >= table.row("aten::addmm").cpu_total_us
    assert s.insights() is not None
