"""``scripts/gpu_check.py``: the CUDA proof's dry run on the CPU, and its GPU checks on hand-built inputs.

The GPU checks (device time against CUDA events, kernel rows, the planted findings, the
overhead verdict) need a CUDA GPU to run for real; in the dry run they must say they were
skipped, and everything else must run and pass without touching the network. Each GPU
check is also driven here with hand-built tables, traces, findings and timings, so that
it is shown to fail on a bad input and pass on a good one before a GPU ever runs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from neuronprof import OpRow, Table
from neuronprof.analysis.insights import DeviceEvent, Evidence, Finding, HostEvent, Insights, Timeline, analyze

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
assert _spec is not None and _spec.loader is not None
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # Any attempt to reach a package index fails at once: the script must install nothing.
    env = {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_INDEX": "1"}
    env.pop("PIP_FIND_LINKS", None)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )


@pytest.mark.slow
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
        "profile": "passed",
        "device_vs_cuda_events": "skipped",
        "summarize_equals_table": "passed",
        "kernel_rows": "skipped",
        "findings": "skipped",
        "overhead": "measured",
        "budget": "passed",
    }
    assert checks["summarize_equals_table"]["rows"] > 0 and checks["summarize_equals_table"]["problems"] == []
    assert checks["budget"]["not_run_or_stopped"] == []
    overhead = checks["overhead"]
    assert overhead["ratio_of_medians"] > 0 and len(overhead["step_seconds"]["neuronprof"]) == overhead["rounds"]
    # The compared steps: the recorded ones before the one that ends the cycle; the ends apart.
    schedule = gpu_check.OVERHEAD_SCHEDULE
    assert all(len(r) == schedule["active"] - 1 for r in overhead["step_seconds"]["neuronprof"])
    assert set(overhead["ends_median_seconds"]["neuronprof"]) == {"cycle_end", "block_end"}
    assert "per recorded step, neuronprof / torch.profiler" in done.stdout
    table = (tmp_path / "table.txt").read_text()
    for name in figures["ranges"]:
        assert name in table, f"the {name} range is a row of the table"
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert any(e.get("name") == "rmsnorm_compiled" for e in trace["traceEvents"])
    assert (tmp_path / "findings.txt").read_text().strip()
    assert "pip install" not in done.stdout + done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the real run would run")
@pytest.mark.slow
def test_without_a_gpu_the_real_run_refuses_and_says_how(tmp_path: Path) -> None:
    done = _run("--out", str(tmp_path))
    assert done.returncode != 0
    assert "no CUDA GPU is visible to torch here: run with --dry-run" in done.stderr
    assert not (tmp_path / "figures.json").exists()


# -- the GPU checks on hand-built inputs ------------------------------------------------


def _table(us_per_call: Mapping[str, float | None], kernels: int = 1, calls: int = 3) -> Table:
    rows = [
        OpRow(name, calls, 10.0 * calls, 20.0 * calls, 0.0, None if us is None else us * calls)
        for name, us in us_per_call.items()
    ]
    rows += [OpRow(f"kernel_{i}", calls, 0.0, 0.0, 5.0 * calls, 5.0 * calls, on_device=True) for i in range(kernels)]
    return Table(tuple(rows), backend="cuda", device_label="CUDA", steps=calls)


def test_device_time_check_passes_within_tolerance_and_fails_outside_it_or_without_device_time() -> None:
    events = {"matmul": 1000.0, "rmsnorm_written_out": 300.0, "rmsnorm_fused": 100.0, "rmsnorm_compiled": 10.0}
    good = {"matmul": 1100.0, "rmsnorm_written_out": 290.0, "rmsnorm_fused": 115.0, "rmsnorm_compiled": 25.0}
    result = gpu_check.check_device_time(_table(good), events.__getitem__)
    assert result["status"] == "passed", result
    assert result["ranges"]["rmsnorm_compiled"]["allowed_us"] == gpu_check.TOLERANCE_US  # 20 µs beats 15 % of 10

    off = gpu_check.check_device_time(_table({**good, "rmsnorm_fused": 130.0}), events.__getitem__)
    assert off["status"] == "failed"
    assert [n for n, r in off["ranges"].items() if not r["agrees"]] == ["rmsnorm_fused"]

    blank = gpu_check.check_device_time(_table({**good, "matmul": None}), events.__getitem__)
    assert blank["status"] == "failed" and blank["ranges"]["matmul"]["table_us_per_call"] is None
    missing = gpu_check.check_device_time(_table({k: v for k, v in good.items() if k != "matmul"}), events.__getitem__)
    assert missing["status"] == "failed"


def _trace(path: Path, kernel_args: list[dict[str, object]]) -> Path:
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5, "args": {"External id": 1}}]
    events += [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 10, "dur": 5, "args": a} for a in kernel_args]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_kernel_check_needs_kernel_rows_and_every_field_hta_reads(tmp_path: Path) -> None:
    full = {"correlation": 7, "stream": 7, "grid": [1, 1, 1], "block": [128, 1, 1], "External id": 1}
    good = _trace(tmp_path / "good.json", [full, full])
    assert gpu_check.check_kernels(_table({}), good)["status"] == "passed"

    no_grid = {k: v for k, v in full.items() if k != "grid"}
    bad = gpu_check.check_kernels(_table({}), _trace(tmp_path / "no_grid.json", [full, no_grid]))
    assert bad["status"] == "failed" and bad["args_missing"] == ["grid"]
    assert gpu_check.check_kernels(_table({}, kernels=0), good)["status"] == "failed"
    assert gpu_check.check_kernels(_table({}), _trace(tmp_path / "none.json", []))["status"] == "failed"


def _planted_step(item: bool, copy: bool) -> Insights:
    """A step as CUDA records the script's planted ranges, with the engine's real rules on it.

    The host→device copy of a pageable tensor synchronises inside ``aten::copy_``
    (``cudaStreamSynchronize``), so it alone gives a ``hidden_sync`` finding too.
    """
    host = [
        HostEvent("ProfilerStep#1", 0, 200_000, category="step"),
        HostEvent("matmul", 500, 5_500, category="annotation"),
        HostEvent("aten::mm", 1_000, 5_000, ext_id=1),
        HostEvent("cudaLaunchKernel", 2_000, 4_000, category="runtime", ext_id=1, correlation=10),
        HostEvent("cudaDeviceSynchronize", 190_000, 199_000, category="runtime"),  # the loop's own
    ]
    device = [DeviceEvent("gemm", 5_000, 60_000, ext_id=1, correlation=10)]
    if item:
        host += [
            HostEvent("planted_item", 60_500, 90_500, category="annotation"),
            HostEvent("aten::item", 61_000, 90_000, ext_id=2),
            HostEvent("aten::_local_scalar_dense", 62_000, 89_000, ext_id=3),
            HostEvent("cudaMemcpyAsync", 63_000, 64_000, category="runtime", ext_id=3, correlation=20),
            HostEvent("cudaStreamSynchronize", 64_500, 88_000, category="runtime", ext_id=3),
        ]
        device.append(DeviceEvent("Memcpy DtoH (Device -> Pageable)", 86_000, 87_000, "memcpy", 3, 20))
    if copy:
        host += [
            HostEvent("planted_h2d_copy", 99_000, 151_000, category="annotation"),
            HostEvent("aten::to", 100_000, 150_000, ext_id=4),
            HostEvent("aten::_to_copy", 101_000, 149_000, ext_id=5),
            HostEvent("aten::copy_", 102_000, 148_000, ext_id=6),
            HostEvent("cudaMemcpyAsync", 103_000, 110_000, category="runtime", ext_id=6, correlation=30),
            HostEvent("cudaStreamSynchronize", 110_500, 147_000, category="runtime", ext_id=6),
        ]
        device.append(DeviceEvent("Memcpy HtoD (Pageable -> Device)", 111_000, 146_000, "memcpy", 6, 30))
    return analyze(Timeline(tuple(host), tuple(device), "cuda", "CUDA"))


def test_findings_check_needs_the_item_itself_not_the_copys_own_sync() -> None:
    copy_only = _planted_step(item=False, copy=True)
    assert {"hidden_sync", "host_device_copy"} <= set(copy_only.kinds())  # a kinds-only check would pass
    result = gpu_check.check_findings(copy_only)
    assert result["status"] == "failed" and result["planted_item"] == []
    assert result["missing"] == ["hidden_sync from aten::_local_scalar_dense or aten::item (the planted .item())"]

    both = gpu_check.check_findings(_planted_step(item=True, copy=True))
    assert both["status"] == "passed", both
    assert both["planted_item"] == ["aten::item makes the host wait for the device in every step"]
    assert both["planted_h2d_copy"] == ["aten::to copies data host→device in every step"]

    item_only = gpu_check.check_findings(_planted_step(item=True, copy=False))
    assert item_only["status"] == "failed" and item_only["planted_h2d_copy"] == []


def test_findings_check_wants_the_copy_host_to_device_from_a_copy_op() -> None:
    def copy(ops: tuple[str, ...], detail: str) -> Finding:
        return Finding("host_device_copy", "a copy", Evidence(ops, 1.0, 5.0, 0.1, detail), 5.0, "move it")

    item = Finding("hidden_sync", "item", Evidence(("aten::item",), 1.0, 5.0, 0.1), 5.0, "keep it")
    back = copy(("aten::to", "aten::copy_"), "aten::to copies data device→host on every call")
    other = copy(("aten::index",), "aten::index copies data host→device on every call")
    there = copy(("aten::to", "aten::copy_"), "aten::to copies data host→device on every call")
    assert gpu_check.check_findings(Insights((item, back, other)))["status"] == "failed"
    assert gpu_check.check_findings(Insights((item, there)))["status"] == "passed"


def test_overhead_verdict_judges_the_steps_and_only_reports_the_ends() -> None:
    plain = [[0.0100, 0.0101, 0.0099, 0.0100], [0.0102, 0.0100, 0.0101, 0.0100], [0.0100] * 4]
    ends = {
        "torch.profiler": {"cycle_end": [0.05] * 3, "block_end": [0.001] * 3},
        # The session's end (the copy of kineto's save, gc.collect()) costs more than five steps:
        # its own figure, not part of the verdict.
        "neuronprof": {"cycle_end": [0.09] * 3, "block_end": [0.08] * 3},
    }
    same = gpu_check.overhead_verdict({"torch.profiler": plain, "neuronprof": plain}, ends, judged=True)
    assert same["status"] == "passed" and same["ratio_of_medians"] == pytest.approx(1.0)
    assert same["noise"] == gpu_check.OVERHEAD_FLOOR
    assert same["ends_median_seconds"]["neuronprof"] == {"cycle_end": 0.09, "block_end": 0.08}

    slower = [[t * 1.3 for t in r] for r in plain]
    worse = gpu_check.overhead_verdict({"torch.profiler": plain, "neuronprof": slower}, ends, judged=True)
    assert worse["status"] == "failed" and worse["ratio_of_medians"] == pytest.approx(1.3)
    # Noisy plain runs widen the allowance: the same 30 % is then within the noise.
    noisy = [*plain[:2], [0.0140] * 4]
    wide = gpu_check.overhead_verdict({"torch.profiler": noisy, "neuronprof": slower}, ends, judged=True)
    assert wide["noise"] == pytest.approx(0.4, rel=0.01) and wide["status"] == "passed"

    assert gpu_check.overhead_verdict({"torch.profiler": plain, "neuronprof": slower}, ends, False)["status"] == (
        "measured"
    )
    one = gpu_check.overhead_verdict({"torch.profiler": plain[:1], "neuronprof": plain[:1]}, ends, judged=True)
    assert one["status"] == "failed" and "two rounds" in one["why"]


def test_stages_stop_at_their_bound_and_at_the_deadline_and_say_what_did_not_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The budget's clock stands still: what is left of it is exactly what each call below
    # gives, however long this machine takes between the calls. Only the stages' own
    # timers (SIGALRM) run on the real clock.
    now = time.monotonic()
    monkeypatch.setattr(gpu_check, "time", SimpleNamespace(monotonic=lambda: now))
    ran: list[str] = []

    def passes(name: str) -> Callable[[], dict[str, object]]:
        def stage() -> dict[str, object]:
            ran.append(name)
            return {"status": "passed"}

        return stage

    def forever() -> dict[str, object]:
        while True:
            time.sleep(0.01)

    stages = [("profile", 5.0, passes("profile")), ("stuck", 0.2, forever), ("after", 5.0, passes("after"))]
    results = gpu_check.run_stages(stages, deadline=now + 60)
    assert results["stuck"]["status"] == "stopped" and "its own bound" in results["stuck"]["why"]
    assert results["after"]["status"] == "passed" and ran == ["profile", "after"]

    spent = gpu_check.run_stages(stages, deadline=now - 1)
    assert {n: r["status"] for n, r in spent.items()} == {"profile": "not run", "stuck": "not run", "after": "not run"}
    assert "budget was spent" in spent["after"]["why"]

    cut = gpu_check.run_stages([("profile", 5.0, passes("p")), ("stuck", 600.0, forever)], now + 0.3)
    assert cut["stuck"]["status"] == "stopped" and "deadline" in cut["stuck"]["why"]

    failed = gpu_check.run_stages([("profile", 5.0, lambda: {"status": "failed"}), *stages[2:]], now + 60)
    assert failed["after"] == {"status": "not run", "why": "the profile stage did not pass"}
