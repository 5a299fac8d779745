"""The "Profile your training step" page: its script, copied alone into a project, prints the page's story."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from neuronprof import analysis
from neuronprof.analysis.insights import FINDING_KINDS, Insights

ROOT = Path(__file__).resolve().parents[1]


# The data set sleeps 5 ms per sample: a batch of 32 takes at least 32 x 5 ms to load in the
# main process, however busy the machine (a sleep never ends early).
LOAD_FLOOR_US_PER_STEP = 32 * 5.0 * 1000
PHASES = ("data", "forward", "backward", "optimizer")
RECORDED = ROOT / "tests" / "recorded" / "training_step.pt.trace.json.gz"
"""Two steps of the example's ``train()``, recorded by ``tests/recorded/record.py``."""
RECORDED_STEPS = 2


def _first_table_rows(out: str) -> list[tuple[str, float]]:
    """(name, CPU total) of the rows of the first table printed (sorted by CPU total)."""
    first = out.split("sorted by cpu_total", 1)[0]
    rows = []
    for line in first.splitlines()[2:]:
        cells = line.split()
        if len(cells) >= 4 and cells[-1].replace(".", "", 1).isdigit():
            rows.append((cells[0], float(cells[-1])))
    return rows


@pytest.mark.slow
def test_copied_training_script_prints_table_and_findings(tmp_path: Path) -> None:
    """The script, copied alone into a project, runs and prints its tables and findings.

    Run as a reader runs it: not pinned to a core and without ``OMP_NUM_THREADS`` /
    ``MKL_NUM_THREADS`` in the environment (the script sets its one thread itself). Which
    phase is the largest and which finding comes first depend on this machine's load: they
    are checked on a recorded run below
    (``test_the_examples_recorded_steps_lead_with_the_input_pipeline``).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = _run_copied_script(tmp_path, dict(env, PYTHONDONTWRITEBYTECODE="1"))
    assert "Self CPU (µs)" in out
    assert f"{RECORDED_STEPS} profiled steps" in out
    assert "AdamW" in out
    rows = _first_table_rows(out)
    assert {name for name, _ in rows} >= set(PHASES), out[:3000]
    totals = [total for _, total in rows]
    assert totals == sorted(totals, reverse=True), "the first table is sorted by CPU total"
    # The load floor, summed over the recorded steps: a sleep's lower bound, not a race.
    assert dict(rows)["data"] >= RECORDED_STEPS * LOAD_FLOOR_US_PER_STEP
    assert f"finding(s) over {RECORDED_STEPS} step(s) (cpu)" in out
    findings = [line for line in out.splitlines() if line[:1].isdigit() and ". [" in line[:6]]
    assert all(line.split()[1].strip("[]") in FINDING_KINDS for line in findings), findings
    # A CPU run: nobody passed modes, so no note about them, and no device waits.
    assert "mode 'device'" not in out and "mode 'runtime'" not in out
    assert "the device waits" not in out


def test_the_examples_recorded_steps_lead_with_the_input_pipeline() -> None:
    """The page's story, on fixed input: `data` is the largest phase and `input_pipeline` the first finding."""
    table = analysis.summarize(RECORDED, sort_by="cpu_total", row_limit=None)
    assert table.steps == RECORDED_STEPS and "AdamW" in " ".join(table.names())
    # What the recording is for: the loader leads the step (checked here, so that a
    # disturbed re-recording is caught before the findings are read from it).
    phases = [r.name for r in table.rows if r.name in PHASES]
    assert phases[0] == "data" and set(phases) == set(PHASES)
    assert table.row("data").cpu_total_us >= RECORDED_STEPS * LOAD_FLOOR_US_PER_STEP
    found = analysis.advise(RECORDED)
    assert isinstance(found, Insights) and found.steps == RECORDED_STEPS and found.backend == "cpu"
    assert found.kinds()[:1] == ["input_pipeline"], found
    first = found.findings[0]
    assert first.evidence.ops == ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",)
    assert first.evidence.share_of_step is not None and first.evidence.share_of_step > 0.5
    assert "num_workers" in first.suggestion
    text = str(found)
    assert text.splitlines()[1].startswith("1. [input_pipeline]")
    assert "the device waits" not in text and "mode 'device'" not in text


def _run_copied_script(tmp_path: Path, env: dict[str, str]) -> str:
    """Copy the example alone into ``tmp_path``, run it, return its output."""
    script = tmp_path / "training_step.py"
    shutil.copy(ROOT / "examples" / "training_step.py", script)
    command = [sys.executable, str(script), "--active", str(RECORDED_STEPS)]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
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


@pytest.mark.slow
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
