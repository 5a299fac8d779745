"""Overhead of neuronprof.session against the same torch.profiler setup written by hand.

Both sides profile the same workload with the same schedule (wait 2, warmup 1,
active 1) and build their table; they run interleaved (A/B, B/A, ...) so drift
on a shared machine hits both alike. Prints the median wall-time ratio.
Target: <= 1.03.

    python benchmarks/overhead.py [--rounds 40] [--size 512]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, schedule

import neuronprof


def make_workload(size: int) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(size, 4 * size), nn.GELU(), nn.Linear(4 * size, size), nn.LayerNorm(size))
    return model.eval(), torch.randn(64, size)


def hand_written(model: nn.Module, x: torch.Tensor) -> str:
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=2, warmup=1, active=1), on_trace_ready=lambda p: None
    ) as prof:
        for _ in range(4):
            with torch.no_grad():
                model(x)
            prof.step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)


def with_neuronprof(model: nn.Module, x: torch.Tensor, out: str) -> str:
    with neuronprof.session(backend="cpu", output_dir=out) as s:
        for _ in s.steps():
            with torch.no_grad():
                model(x)
    return str(s.table(row_limit=20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args()
    model, x = make_workload(args.size)
    out = tempfile.mkdtemp(prefix="neuronprof-bench-")
    # kineto's first start costs about a second; keep it out of both sides.
    hand_written(model, x)
    with_neuronprof(model, x, out)
    a: list[float] = []
    b: list[float] = []
    for r in range(args.rounds):
        order = [("raw", a), ("np", b)] if r % 2 == 0 else [("np", b), ("raw", a)]
        for kind, sink in order:
            t0 = time.perf_counter()
            if kind == "raw":
                hand_written(model, x)
            else:
                with_neuronprof(model, x, out)
            sink.append(time.perf_counter() - t0)
    raw, ours = statistics.median(a), statistics.median(b)
    print(f"hand-written torch.profiler: median {raw * 1e3:8.2f} ms over {len(a)} runs")
    print(f"neuronprof.session:          median {ours * 1e3:8.2f} ms over {len(b)} runs")
    print(f"overhead ratio (neuronprof / hand-written): {ours / raw:.3f}  (target <= 1.03)")


if __name__ == "__main__":
    main()
