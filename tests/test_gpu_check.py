"""``scripts/gpu_check.py``: the CUDA proof's dry run on the CPU, as the suite can run it.

The GPU checks themselves (device time against CUDA events, kernel rows, the planted
findings, the overhead verdict) need a CUDA GPU; here they must say they were skipped,
and everything else must run and pass without touching the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # Any attempt to reach a package index fails at once: the script must install nothing.
    env = {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_INDEX": "1"}
    env.pop("PIP_FIND_LINKS", None)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )


def test_dry_run_runs_every_step_and_skips_only_what_needs_a_gpu(tmp_path: Path) -> None:
    done = _run("--dry-run", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["mode"] == "dry-run" and figures["device"] == "cpu"
    assert figures["ranges"] == [
        "matmul",
        "rmsnorm_written_out",
        "rmsnorm_fused",
        "rmsnorm_compiled",
        "planted_item",
        "planted_h2d_copy",
    ]
    checks = figures["checks"]
    assert {name: c["status"] for name, c in checks.items()} == {
        "device_vs_cuda_events": "skipped",
        "summarize_equals_table": "passed",
        "kernel_rows": "skipped",
        "findings": "skipped",
        "overhead": "measured",
        "budget": "passed",
    }
    assert checks["summarize_equals_table"]["rows"] > 0 and checks["summarize_equals_table"]["problems"] == []
    overhead = checks["overhead"]
    assert overhead["ratio_of_medians"] > 0 and len(overhead["seconds"]["neuronprof"]) == overhead["rounds"]
    table = (tmp_path / "table.txt").read_text()
    for name in figures["ranges"]:
        assert name in table, f"the {name} range is a row of the table"
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert any(e.get("name") == "rmsnorm_compiled" for e in trace["traceEvents"])
    assert (tmp_path / "findings.txt").read_text().strip()
    assert "pip install" not in done.stdout + done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the real run would run")
def test_without_a_gpu_the_real_run_refuses_and_says_how(tmp_path: Path) -> None:
    done = _run("--out", str(tmp_path))
    assert done.returncode != 0
    assert "no CUDA GPU is visible to torch here: run with --dry-run" in done.stderr
    assert not (tmp_path / "figures.json").exists()
