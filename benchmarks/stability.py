"""Stability of neuronprof.compare() against torch.utils.benchmark.Timer, on RMSNorm.

RMSNorm three ways (naive, torch.rms_norm, torch.compile) is measured by
``compare()`` several times; each run yields one median wall time per variant.
Beside each run, ``Timer.blocked_autorange`` measures the same functions on the
same inputs, given the same measuring time compare spent timing that variant in
that run, and yields its own median. The two sides alternate which goes first.

Prints, per variant, the coefficient of variation (stdev / mean) of the medians
across runs for both tools, and the same for each variant's speedup over the
first. Target: compare's CV <= 5% on CPU at 4096x4096, and no worse than Timer's.

    python benchmarks/stability.py [--runs 5] [--shape 4096x4096] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.benchmark import Timer

from neuronprof import compare

EPS = 1e-6


def rmsnorm_naive(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rmsnorm_fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.rms_norm(x, (x.shape[-1],), w, EPS)


def timer_median_us(fn: Callable[..., Any], x: torch.Tensor, w: torch.Tensor, min_run_time: float) -> float:
    timer = Timer(stmt="fn(x, w)", globals={"fn": fn, "x": x, "w": w}, num_threads=torch.get_num_threads())
    return float(timer.blocked_autorange(min_run_time=min_run_time).median) * 1e6


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--shape", default="4096x4096")
    parser.add_argument("--repeats", type=int, default=5, help="compare()'s interleaved rounds per run")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    args = parser.parse_args()
    shape = tuple(int(d) for d in args.shape.split("x"))
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    x = torch.randn(*shape)
    w = torch.randn(shape[-1])
    variants = {
        "naive": rmsnorm_naive,
        "torch.rms_norm": rmsnorm_fused,
        "torch.compile": torch.compile(rmsnorm_naive, fullgraph=True),
    }
    out = tempfile.mkdtemp(prefix="neuronprof-bench-")
    started = time.perf_counter()
    ours: dict[str, list[float]] = {name: [] for name in variants}
    theirs: dict[str, list[float]] = {name: [] for name in variants}
    # Timer gets the time compare spent timing each variant in the latest run.
    budgets = {name: 1.0 for name in variants}
    with torch.no_grad():
        # Compile and warm everything once, outside every measured run.
        for fn in variants.values():
            fn(x, w)
        for run in range(args.runs):
            order = ("compare", "timer") if run % 2 == 0 else ("timer", "compare")
            for side in order:
                if side == "compare":
                    cmp = compare(variants, x, w, repeats=args.repeats, backend="cpu", output_dir=out, quiet=True)
                    for row in cmp:
                        ours[row.name].append(row.wall_us)
                        budgets[row.name] = sum(row.wall_samples_us) * row.calls_per_sample / 1e6
                else:
                    for name, fn in variants.items():
                        theirs[name].append(timer_median_us(fn, x, w, max(budgets[name], 0.2)))
            print(
                f"run {run + 1}/{args.runs}: "
                + ", ".join(f"{n} {ours[n][-1]:.0f} / {theirs[n][-1]:.0f} µs" for n in variants)
                + "  (compare / Timer medians)",
                flush=True,
            )

    print(
        f"\nRMSNorm {args.shape} on the CPU, {torch.get_num_threads()} threads, {args.runs} runs, "
        f"compare repeats={args.repeats}; {time.perf_counter() - started:.0f} s"
    )
    header = (
        f"{'variant':<16}{'compare CV':>12}{'Timer CV':>10}{'compare median':>16}{'Timer median':>14}"
        f"{'speedup CV compare':>20}{'Timer':>7}  verdict"
    )
    print(header)
    print("-" * len(header))
    base = next(iter(variants))
    for name in variants:
        ours_cv, theirs_cv = cv(ours[name]), cv(theirs[name])
        # The speedup over the baseline, run by run: what a comparison is read for.
        ours_speedup = cv([b / v for b, v in zip(ours[base], ours[name])])
        theirs_speedup = cv([b / v for b, v in zip(theirs[base], theirs[name])])
        ok = ours_cv <= 0.05 and ours_cv <= theirs_cv
        print(
            f"{name:<16}{ours_cv:>12.1%}{theirs_cv:>10.1%}{statistics.median(ours[name]):>14.0f}µs"
            f"{statistics.median(theirs[name]):>12.0f}µs{ours_speedup:>20.1%}{theirs_speedup:>7.1%}"
            f"  {'ok' if ok else 'missed (target: <= 5% and <= Timer)'}"
        )


if __name__ == "__main__":
    main()
