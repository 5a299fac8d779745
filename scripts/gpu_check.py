#!/usr/bin/env python3
"""Prove neuronprof's CUDA path on one GPU in one command; on a CPU, a dry run of the same steps.

    python scripts/gpu_check.py                 # on a machine with a CUDA GPU
    python scripts/gpu_check.py --dry-run       # anywhere: the same run on the CPU, GPU checks skipped

It installs nothing from the network. neuronprof is imported from this checkout's
``src/``; msgspec (the fast trace reader) is used when installed, else installed from a
wheel carried in ``.whl/`` with ``pip --no-index``, else neuronprof's pure-Python reader
is used. One run takes about 2-4 minutes on a recent GPU and stops itself at 8: each
stage has its own bound (``BOUNDS``), the deadline is checked before each one starts,
and the stages that did not run are named in the output and in ``figures.json``.

* ``profile``: profiles a step of a matmul, RMSNorm three ways (written out,
  ``torch.rms_norm``, ``torch.compile`` of the written-out one), a planted ``.item()``
  and a host→device copy of a pageable tensor, each in its own ``record_function`` range;
* ``device_vs_cuda_events``: the table's device time per call of each compute range
  agrees with CUDA-event timing of the same code run outside the profiler, within
  ``TOLERANCE`` (relative) or ``TOLERANCE_US``, whichever is larger (CUDA events also
  count the gaps between a range's kernels, which the profiler's kernel sum does not);
* ``summarize_equals_table``: ``summarize`` of the session's export has the table's
  rows, calls and times (to the trace's 0.001 µs rounding per call);
* ``kernel_rows``: the table has device kernel rows, and the trace's kernel events carry
  what HTA reads (``correlation``, ``stream``, ``grid``, ``block``);
* ``findings``: ``s.insights()`` has a ``hidden_sync`` finding whose evidence names
  ``aten::item`` or ``aten::_local_scalar_dense`` (the planted ``.item()``; the pageable
  copy's own ``aten::copy_ → cudaStreamSynchronize`` does not count), and a
  ``host_device_copy`` finding, host→device, from ``aten::to``, ``aten::_to_copy`` or
  ``aten::copy_`` (the planted copy);
* ``overhead``: per-step time inside the block, the session (``s.step()``) against
  hand-written ``torch.profiler`` code (``torch.cuda.synchronize()`` then ``prof.step()``)
  in the same loop and schedule, the two alternated ``ROUNDS`` times. Compared: the
  recorded steps before the one that ends the cycle; the ratio of the per-round medians'
  medians must be within the plain runs' own spread ((max - min) / median), or 5 %,
  whichever is larger. The cycle's end (the last step: kineto's stop and trace
  processing in both; the session takes no save there, the first export does) and the
  block's end (the session's checks; torch.profiler's exit) are timed separately and
  reported as their own figures, not judged.

Figures go to ``--out`` (default ``gpu_check_output/``): ``figures.json`` (every number
and each check's result), ``table.txt``, ``findings.txt`` and the exported trace. The exit
status is 0 when every check ran and passed (or was skipped in a dry run). In
``--dry-run`` (no GPU needed, what the test suite runs) the device, kernel and findings
checks are skipped with the reason, and the overhead is measured but not judged (a CPU
shared with other work is no place to judge it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".whl"
BUDGET_S = 8 * 60
# Each stage's own limit, in seconds; the deadline (BUDGET_S from the start) cuts any of them shorter.
BOUNDS = {
    "profile": 240.0,  # Inductor's first compile is most of it
    "device_vs_cuda_events": 60.0,
    "summarize_equals_table": 60.0,
    "kernel_rows": 30.0,
    "findings": 30.0,
    "overhead": 120.0,
}
TOLERANCE = 0.15
TOLERANCE_US = 20.0
ROUNDS = 5
OVERHEAD_FLOOR = 0.05
OVERHEAD_SCHEDULE = {"wait": 1, "warmup": 1, "active": 5}
COMPUTE = ("matmul", "rmsnorm_written_out", "rmsnorm_fused", "rmsnorm_compiled")
ITEM_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
H2D_COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_"})
GPU_ONLY = {
    "device_vs_cuda_events": "dry run: the CPU has no device time and no CUDA events",
    "kernel_rows": "dry run: the CPU launches no kernels",
    "findings": "dry run: on the CPU .item() waits for nothing and nothing is copied",
}


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


class OverBound(BaseException):
    """Raised in the main thread when a stage runs past its bound (a BaseException: no ``except Exception`` eats it)."""


@contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Raise ``OverBound`` in the block once ``seconds`` have passed (a ``SIGALRM`` timer).

    Handlers run in the main thread, between bytecodes: a stage stuck in one C call is
    stopped when the call returns. Off the main thread (or without ``setitimer``): unbounded.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def ring(signum: int, frame: Any) -> None:
        raise OverBound

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_stages(
    stages: Sequence[tuple[str, float, Callable[[], dict[str, Any]]]], deadline: float
) -> dict[str, dict[str, Any]]:
    """Run each stage within its bound and before ``deadline`` (``time.monotonic()`` seconds).

    A stage that cannot start before the deadline is ``"not run"``; one that runs past its
    bound (or the deadline) is ``"stopped"``. Once the first stage (the profiled run)
    has not passed, the stages that need its results are not run either.
    """
    results: dict[str, dict[str, Any]] = {}
    for index, (name, bound, stage) in enumerate(stages):
        left = deadline - time.monotonic()
        if left <= 0:
            results[name] = {"status": "not run", "why": f"the {BUDGET_S // 60}-minute budget was spent before it"}
            continue
        if index and results[stages[0][0]]["status"] != "passed":
            results[name] = {"status": "not run", "why": f"the {stages[0][0]} stage did not pass"}
            continue
        limit = min(bound, left)
        started = time.monotonic()
        try:
            with bounded(limit):
                result = stage()
        except OverBound:
            cut = "its own bound" if limit == bound else f"the {BUDGET_S // 60}-minute deadline"
            result = {"status": "stopped", "why": f"stopped after {limit:.0f} s, {cut}"}
        result["seconds"] = round(time.monotonic() - started, 3)
        results[name] = result
    return results


def check_device_time(table: Any, events_us: Callable[[str], float]) -> dict[str, Any]:
    """The table's device time per call of each ``COMPUTE`` range against ``events_us(range)`` (µs per call)."""
    per_range = {}
    ok = True
    for name in COMPUTE:
        row = next((r for r in table.rows if r.name == name and not r.on_device), None)
        total = None if row is None or not row.calls else row.device_total_us
        table_us = None if row is None or total is None else total / row.calls
        measured = events_us(name)
        allowed = max(TOLERANCE * measured, TOLERANCE_US)
        agrees = table_us is not None and abs(table_us - measured) <= allowed
        ok = ok and agrees
        per_range[name] = {
            "table_us_per_call": table_us,
            "cuda_events_us_per_call": measured,
            "allowed_us": allowed,
            "agrees": agrees,
        }
    return {
        "status": "passed" if ok else "failed",
        "tolerance": f"{TOLERANCE:.0%} or {TOLERANCE_US} µs",
        "ranges": per_range,
    }


def check_summarize(table: Any, export: Path) -> dict[str, Any]:
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


def check_kernels(table: Any, export: Path) -> dict[str, Any]:
    """Kernel rows in the table, and the fields HTA reads on every kernel event of the trace."""
    kernels = [r for r in table.rows if r.on_device]
    events = [e for e in json.loads(export.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    wanted = ("correlation", "stream", "grid", "block")
    missing = sorted({k for e in events for k in wanted if k not in e.get("args", {})})
    ok = bool(kernels) and bool(events) and not missing
    return {
        "status": "passed" if ok else "failed",
        "kernel_rows": len(kernels),
        "kernel_events": len(events),
        "args_missing": missing,
        "top_kernels": [r.name for r in kernels[:5]],
    }


def check_findings(insights: Any) -> dict[str, Any]:
    """The planted ``.item()`` and host→device copy, each named by the ops its finding's evidence gives."""
    item = [f for f in insights.findings if f.kind == "hidden_sync" and ITEM_OPS & set(f.evidence.ops)]
    copy = [
        f
        for f in insights.findings
        if f.kind == "host_device_copy" and H2D_COPY_OPS & set(f.evidence.ops) and "host→device" in f.evidence.detail
    ]
    missing = []
    if not item:
        missing.append(f"hidden_sync from {' or '.join(sorted(ITEM_OPS))} (the planted .item())")
    if not copy:
        missing.append(f"host→device host_device_copy from {', '.join(sorted(H2D_COPY_OPS))} (the planted copy)")
    return {
        "status": "failed" if missing else "passed",
        "planted_item": [f.title for f in item],
        "planted_h2d_copy": [f.title for f in copy],
        "missing": missing,
        "all": [f"{f.kind}: {f.title}" for f in insights.findings],
    }


def overhead_verdict(
    steps: Mapping[str, Sequence[Sequence[float]]], ends: Mapping[str, Mapping[str, Sequence[float]]], judged: bool
) -> dict[str, Any]:
    """Judge the session's per-step time against torch.profiler's.

    Args:
        steps: For ``"torch.profiler"`` and ``"neuronprof"``, one list per round of the
            compared steps' times (seconds).
        ends: For each of the two, ``"cycle_end"`` and ``"block_end"`` times per round
            (seconds): reported (medians), never judged.
        judged: False in a dry run: the figures only.
    """
    medians = {who: [statistics.median(r) for r in rounds if r] for who, rounds in steps.items()}
    plain, ours = medians.get("torch.profiler", []), medians.get("neuronprof", [])
    figures: dict[str, Any] = {
        "compared": "median time of a recorded step before the one that ends the cycle, per round",
        "step_seconds": {who: [list(r) for r in rounds] for who, rounds in steps.items()},
        "round_medians_seconds": medians,
        "not_judged": "cycle_end (the step that ends the cycle) and block_end (the with-block's exit), medians",
        "ends_median_seconds": {
            who: {part: statistics.median(times) for part, times in parts.items() if times}
            for who, parts in ends.items()
        },
    }
    if len(plain) < 2 or len(ours) < 2 or len(plain) != len(ours):
        return {"status": "failed", "why": "fewer than two rounds of timed steps for each", **figures}
    base = statistics.median(plain)
    ratio = statistics.median(ours) / base
    noise = max((max(plain) - min(plain)) / base, OVERHEAD_FLOOR)
    figures.update(ratio_of_medians=ratio, noise=noise, rounds=len(plain))
    if not judged:
        return {"status": "measured", "why": "dry run: measured, not judged", **figures}
    return {"status": "passed" if ratio - 1 <= noise else "failed", **figures}


def _time_overhead(
    work: Workload, rounds: int
) -> tuple[dict[str, list[list[float]]], dict[str, dict[str, list[float]]]]:
    """Alternate hand-written torch.profiler code and a session, timing each step and each end."""
    import neuronprof

    torch = work.torch
    activities = [torch.profiler.ProfilerActivity.CPU]
    if work.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    total = sum(OVERHEAD_SCHEDULE.values())
    # The recorded steps except the last, whose end stops the cycle and processes its trace.
    first = OVERHEAD_SCHEDULE["wait"] + OVERHEAD_SCHEDULE["warmup"]
    compared = slice(first, total - 1)

    def plain() -> tuple[list[float], float, float]:
        times = []
        schedule = torch.profiler.schedule(**OVERHEAD_SCHEDULE)
        with torch.profiler.profile(activities=activities, schedule=schedule) as prof:
            for _ in range(total):
                start = time.perf_counter()
                work.step()
                work.sync()
                prof.step()
                times.append(time.perf_counter() - start)
            exit_start = time.perf_counter()
        return times, times[-1], time.perf_counter() - exit_start

    def session() -> tuple[list[float], float, float]:
        times = []
        wait, warmup, active = (OVERHEAD_SCHEDULE[k] for k in ("wait", "warmup", "active"))
        with neuronprof.session(backend=work.device, wait=wait, warmup=warmup, active=active) as s:
            for _ in range(total):
                start = time.perf_counter()
                work.step()
                s.step()  # the device sync, then the schedule's step: as the plain loop does
                times.append(time.perf_counter() - start)
            exit_start = time.perf_counter()
        return times, times[-1], time.perf_counter() - exit_start

    plain()  # kineto's one-time start-up cost is nobody's overhead
    steps: dict[str, list[list[float]]] = {"torch.profiler": [], "neuronprof": []}
    ends: dict[str, dict[str, list[float]]] = {who: {"cycle_end": [], "block_end": []} for who in steps}
    for _ in range(rounds):
        for who, loop in (("torch.profiler", plain), ("neuronprof", session)):
            times, cycle_end, block_end = loop()
            steps[who].append(times[compared])
            ends[who]["cycle_end"].append(cycle_end)
            ends[who]["block_end"].append(block_end)
    return steps, ends


def run(out: Path, dry_run: bool, budget_s: float = BUDGET_S) -> dict[str, Any]:
    started = time.monotonic()
    deadline = started + budget_s
    reader = _fast_reader(dry_run)
    sys.path.insert(0, str(ROOT / "src"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(out / "inductor-cache"))
    import torch

    import neuronprof

    if not dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU is visible to torch here: run with --dry-run, or on a GPU machine")
    device = "cpu" if dry_run else "cuda"
    got: dict[str, Any] = {}

    def profile() -> dict[str, Any]:
        work = got["work"] = Workload(torch, device, dry_run)
        for _ in range(3):  # compile and warm every range before anything is measured
            work.step()
        work.sync()
        with neuronprof.session(backend=device, wait=1, warmup=1, active=3, output_dir=out) as s:
            for _ in s.steps():
                work.step()
        got["table"] = table = s.table(row_limit=None)
        got["export"] = s.export(out / "trace.json", overwrite=True)
        got["insights"] = insights = s.insights()
        (out / "table.txt").write_text(str(table) + "\n")
        (out / "findings.txt").write_text(str(insights) + "\n")
        return {"status": "passed", "ranges": list(work.ranges)}

    def gpu_only(name: str, check: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        return (lambda: {"status": "skipped", "why": GPU_ONLY[name]}) if dry_run else check

    stages = [
        ("profile", profile),
        (
            "device_vs_cuda_events",
            gpu_only(
                "device_vs_cuda_events",
                lambda: check_device_time(got["table"], lambda n: _cuda_event_us(got["work"], n)),
            ),
        ),
        ("summarize_equals_table", lambda: check_summarize(got["table"], got["export"])),
        ("kernel_rows", gpu_only("kernel_rows", lambda: check_kernels(got["table"], got["export"]))),
        ("findings", gpu_only("findings", lambda: check_findings(got["insights"]))),
        (
            "overhead",
            lambda: overhead_verdict(*_time_overhead(got["work"], 2 if dry_run else ROUNDS), judged=not dry_run),
        ),
    ]
    checks = run_stages([(name, BOUNDS[name], stage) for name, stage in stages], deadline)
    elapsed = time.monotonic() - started
    not_run = [name for name, c in checks.items() if c["status"] in ("not run", "stopped")]
    checks["budget"] = {
        "status": "passed" if elapsed <= budget_s and not not_run else "failed",
        "seconds": elapsed,
        "limit_seconds": budget_s,
        "not_run_or_stopped": not_run,
    }
    return {
        "mode": "dry-run" if dry_run else "cuda",
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "neuronprof": neuronprof.__version__,
        "trace_reader": reader,
        "ranges": list(got["work"].ranges) if "work" in got else [],
        "checks": checks,
    }


def _overhead_line(check: Mapping[str, Any]) -> Optional[str]:
    if "ratio_of_medians" not in check:
        return None
    ends = check["ends_median_seconds"]
    parts = ", ".join(
        f"{who} cycle end {e.get('cycle_end', 0) * 1000:.1f} ms, block end {e.get('block_end', 0) * 1000:.1f} ms"
        for who, e in ends.items()
    )
    return (
        f"  per recorded step, neuronprof / torch.profiler = {check['ratio_of_medians']:.3f} "
        f"(noise {check['noise']:.1%}); measured apart, not judged: {parts}"
    )


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dry-run", action="store_true", help="run on the CPU; skip what needs a GPU")
    parser.add_argument("--out", type=Path, default=Path("gpu_check_output"), help="folder for the figures")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    figures = run(args.out, args.dry_run)
    (args.out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    bad = [name for name, c in figures["checks"].items() if c["status"] in ("failed", "stopped", "not run")]
    for name, check in figures["checks"].items():
        print(f"{name:24} {check['status']}" + (f" ({check['why']})" if "why" in check else ""))
        line = _overhead_line(check) if name == "overhead" else None
        if line:
            print(line)
    not_run = figures["checks"]["budget"]["not_run_or_stopped"]
    if not_run:
        print(f"did not run to the end: {', '.join(not_run)}")
    print(f"figures: {args.out / 'figures.json'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
