#!/usr/bin/env python3
"""Prove neuronprof's CUDA path on one GPU in one command; on a CPU, a dry run of the same steps.

    python scripts/gpu_check.py                 # on a machine with a CUDA GPU
    python scripts/gpu_check.py --dry-run       # anywhere: the same run on the CPU, GPU checks skipped

It installs nothing from the network. neuronprof is imported from this checkout's
``src/``; msgspec (the fast trace reader) is used when installed, else installed from a
wheel carried in ``.whl/`` with ``pip --no-index``, else neuronprof's pure-Python reader
is used. One run (about 2-4 minutes on a recent GPU; 8 at most, the budget is checked):

* profiles a step of: a matmul, RMSNorm three ways (written out, ``torch.rms_norm``,
  ``torch.compile`` of the written-out one), a planted ``.item()`` and a host→device
  copy, each in its own ``record_function`` range;
* ``device_vs_cuda_events``: the table's device time per call of each compute range
  agrees with CUDA-event timing of the same code run outside the profiler, within
  ``TOLERANCE`` (relative) or ``TOLERANCE_US``, whichever is larger (CUDA events also
  count the gaps between a range's kernels, which the profiler's kernel sum does not);
* ``summarize_equals_table``: ``summarize`` of the session's export has the table's
  rows, calls and times (to the trace's 0.001 µs rounding per call);
* ``kernel_rows``: the table has device kernel rows, and the trace's kernel events carry
  what HTA reads (``correlation``, ``stream``, ``grid``, ``block``);
* ``findings``: ``s.insights()`` names the planted ``.item()`` (``hidden_sync``) and the
  per-step copy (``host_device_copy``);
* ``overhead``: the session against hand-written ``torch.profiler`` code doing the same
  (same schedule, same per-step sync), alternated ``ROUNDS`` times: the ratio of medians
  is within the plain runs' own spread ((max - min) / median), or 5 %, whichever is larger.

Figures go to ``--out`` (default ``gpu_check_output/``): ``figures.json`` (every number
and each check's result), ``table.txt``, ``findings.txt`` and the exported trace. The exit
status is 0 when every check that ran passed. In ``--dry-run`` (no GPU needed, what the
test suite runs) the device, kernel and findings checks are skipped with the reason, and
the overhead is measured but not judged (a CPU shared with other work is no place to
judge it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".whl"
BUDGET_S = 8 * 60
TOLERANCE = 0.15
TOLERANCE_US = 20.0
ROUNDS = 5
OVERHEAD_FLOOR = 0.05
COMPUTE = ("matmul", "rmsnorm_written_out", "rmsnorm_fused", "rmsnorm_compiled")
PLANTED = ("planted_item", "planted_h2d_copy")


def _fast_reader(dry_run: bool) -> str:
    """Make msgspec importable from a carried wheel if it is not; never from the network."""
    try:
        import msgspec

        return f"msgspec {msgspec.__version__}"
    except ImportError:
        pass
    wheels = sorted(WHEELS.glob("msgspec-*.whl"))
    if not wheels:
        return "pure-Python reader (no msgspec installed and no msgspec wheel in .whl/)"
    if dry_run:
        return f"pure-Python reader (a dry run installs nothing; would install {wheels[-1].name})"
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(WHEELS)]
    done = subprocess.run([*command, "msgspec"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"pure-Python reader (installing {wheels[-1].name} failed: {done.stderr.strip()[-200:]})"
    return f"msgspec from {wheels[-1].name}"


class Workload:
    """The step under test, on ``device``; sizes keep the GPU busy (small on the CPU)."""

    def __init__(self, torch: Any, device: str, dry_run: bool) -> None:
        self.torch = torch
        self.device = device
        n, rows, hidden = (256, 64, 256) if dry_run else (4096, 8192, 8192)
        self.a = torch.randn(n, n, device=device)
        self.b = torch.randn(n, n, device=device)
        self.x = torch.randn(rows, hidden, device=device)
        self.w = torch.ones(hidden, device=device)
        self.host_batch = torch.randn(rows, 512)
        # A dry run keeps torch.compile's own machinery (Dynamo) but not Inductor's minutes of compiling.
        self.compiled = torch.compile(self.written_out, backend="eager" if dry_run else "inductor")
        self.ranges: dict[str, Callable[[], Any]] = {
            "matmul": lambda: self.a @ self.b,
            "rmsnorm_written_out": lambda: self.written_out(self.x, self.w),
            "rmsnorm_fused": lambda: torch.rms_norm(self.x, (self.x.shape[-1],), self.w, 1e-6),
            "rmsnorm_compiled": lambda: self.compiled(self.x, self.w),
            "planted_item": lambda: (self.x[0, 0] * 2).item(),
            "planted_h2d_copy": lambda: self.host_batch.to(device),
        }

    def written_out(self, x: Any, w: Any) -> Any:
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def step(self) -> None:
        for name, run in self.ranges.items():
            with self.torch.profiler.record_function(name):
                run()

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()


def _cuda_event_us(work: Workload, name: str, iterations: int = 50) -> float:
    """Mean time of one call of a range, in µs, by CUDA events around ``iterations`` calls."""
    torch = work.torch
    run = work.ranges[name]
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / iterations


def _check_device_time(work: Workload, table: Any, dry_run: bool) -> dict[str, Any]:
    if dry_run:
        return {"status": "skipped", "why": "dry run: the CPU has no device time and no CUDA events"}
    per_range = {}
    ok = True
    for name in COMPUTE:
        row = next((r for r in table.rows if r.name == name and not r.on_device), None)
        total = None if row is None or not row.calls else row.device_total_us
        table_us = None if row is None or total is None else total / row.calls
        events_us = _cuda_event_us(work, name)
        allowed = max(TOLERANCE * events_us, TOLERANCE_US)
        agrees = table_us is not None and abs(table_us - events_us) <= allowed
        ok = ok and agrees
        per_range[name] = {"table_us_per_call": table_us, "cuda_events_us_per_call": events_us, "allowed_us": allowed,
                           "agrees": agrees}
    return {"status": "passed" if ok else "failed", "tolerance": f"{TOLERANCE:.0%} or {TOLERANCE_US} µs",
            "ranges": per_range}


def _check_summarize(table: Any, export: Path) -> dict[str, Any]:
    from neuronprof.analysis import summarize

    offline = summarize(export)
    live = {(r.name, r.on_device): r for r in table.rows}
    theirs = {(r.name, r.on_device): r for r in offline.rows}
    problems = [f"rows only in the table: {sorted(set(live) - set(theirs))}"] if set(live) - set(theirs) else []
    if set(theirs) - set(live):
        problems.append(f"rows only in the export: {sorted(set(theirs) - set(live))}")
    for key in set(live) & set(theirs):
        a, b = live[key], theirs[key]
        tolerance = 0.001 * a.calls + 1e-9
        if a.calls != b.calls:
            problems.append(f"{key[0]}: {a.calls} calls live, {b.calls} in the export")
        for field in ("self_cpu_us", "cpu_total_us", "self_device_us", "device_total_us"):
            x, y = getattr(a, field) or 0.0, getattr(b, field) or 0.0
            if abs(x - y) > tolerance:
                problems.append(f"{key[0]}: {field} {x} live, {y} in the export")
    if (table.steps, table.top_level_calls) != (offline.steps, offline.top_level_calls):
        problems.append("steps or top-level calls differ")
    return {"status": "failed" if problems else "passed", "rows": len(live), "problems": problems[:20]}


def _check_kernels(table: Any, export: Path, dry_run: bool) -> dict[str, Any]:
    if dry_run:
        return {"status": "skipped", "why": "dry run: the CPU launches no kernels"}
    kernels = [r for r in table.rows if r.on_device]
    events = [e for e in json.loads(export.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    wanted = ("correlation", "stream", "grid", "block")
    missing = sorted({k for e in events for k in wanted if k not in e.get("args", {})})
    ok = bool(kernels) and bool(events) and not missing
    return {"status": "passed" if ok else "failed", "kernel_rows": len(kernels), "kernel_events": len(events),
            "args_missing": missing, "top_kernels": [r.name for r in kernels[:5]]}


def _check_findings(insights: Any, dry_run: bool) -> dict[str, Any]:
    kinds = list(insights.kinds())
    if dry_run:
        return {"status": "skipped", "why": "dry run: on the CPU .item() waits for nothing and nothing is copied",
                "kinds": kinds}
    want = {"hidden_sync": "planted_item", "host_device_copy": "planted_h2d_copy"}
    missing = [k for k in want if k not in kinds]
    return {"status": "failed" if missing else "passed", "kinds": kinds, "missing": missing}


def _timed(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _check_overhead(work: Workload, dry_run: bool) -> dict[str, Any]:
    import neuronprof

    torch = work.torch
    activities = [torch.profiler.ProfilerActivity.CPU]
    if work.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    wait, warmup, active = 1, 1, 3
    steps = wait + warmup + active

    def plain() -> None:
        schedule = torch.profiler.schedule(wait=wait, warmup=warmup, active=active)
        with torch.profiler.profile(activities=activities, schedule=schedule) as prof:
            for _ in range(steps):
                work.step()
                work.sync()
                prof.step()

    def session() -> None:
        with neuronprof.session(wait=wait, warmup=warmup, active=active, backend=work.device) as s:
            for _ in s.steps():
                work.step()

    plain()  # kineto's one-time start-up cost is nobody's overhead
    times: dict[str, list[float]] = {"torch.profiler": [], "neuronprof": []}
    rounds = 2 if dry_run else ROUNDS
    for _ in range(rounds):
        times["torch.profiler"].append(_timed(plain))
        times["neuronprof"].append(_timed(session))
    base = statistics.median(times["torch.profiler"])
    ratio = statistics.median(times["neuronprof"]) / base
    noise = max((max(times["torch.profiler"]) - min(times["torch.profiler"])) / base, OVERHEAD_FLOOR)
    figures = {"ratio_of_medians": ratio, "noise": noise, "seconds": times, "rounds": rounds}
    if dry_run:
        return {"status": "measured", "why": "dry run: measured, not judged", **figures}
    return {"status": "passed" if ratio - 1 <= noise else "failed", **figures}


def run(out: Path, dry_run: bool) -> dict[str, Any]:
    started = time.monotonic()
    reader = _fast_reader(dry_run)
    sys.path.insert(0, str(ROOT / "src"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(out / "inductor-cache"))
    import torch

    import neuronprof

    if not dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU is visible to torch here: run with --dry-run, or on a GPU machine")
    device = "cpu" if dry_run else "cuda"
    work = Workload(torch, device, dry_run)
    for _ in range(3):  # compile and warm every range before anything is measured
        work.step()
    work.sync()
    with neuronprof.session(backend=device, wait=1, warmup=1, active=3, output_dir=out) as s:
        for _ in s.steps():
            work.step()
    table = s.table(row_limit=None)
    export = s.export(out / "trace.json", overwrite=True)
    insights = s.insights()
    (out / "table.txt").write_text(str(table) + "\n")
    (out / "findings.txt").write_text(str(insights) + "\n")
    checks = {
        "device_vs_cuda_events": _check_device_time(work, table, dry_run),
        "summarize_equals_table": _check_summarize(table, export),
        "kernel_rows": _check_kernels(table, export, dry_run),
        "findings": _check_findings(insights, dry_run),
        "overhead": _check_overhead(work, dry_run),
    }
    elapsed = time.monotonic() - started
    checks["budget"] = {"status": "passed" if elapsed <= BUDGET_S else "failed", "seconds": elapsed,
                        "limit_seconds": BUDGET_S}
    return {
        "mode": "dry-run" if dry_run else "cuda",
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "neuronprof": neuronprof.__version__,
        "trace_reader": reader,
        "ranges": list(work.ranges),
        "checks": checks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dry-run", action="store_true", help="run on the CPU; skip what needs a GPU")
    parser.add_argument("--out", type=Path, default=Path("gpu_check_output"), help="folder for the figures")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    figures = run(args.out, args.dry_run)
    (args.out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    failed = [name for name, c in figures["checks"].items() if c["status"] == "failed"]
    for name, check in figures["checks"].items():
        print(f"{name:24} {check['status']}" + (f" ({check['why']})" if "why" in check else ""))
    print(f"figures: {args.out / 'figures.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
