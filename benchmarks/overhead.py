"""Overhead of neuronprof.session against the same torch.profiler setup written by hand.

Both sides profile the same workload with the same schedule (wait 2, warmup 1,
active 1) and build their table; they run interleaved (A/B, B/A, ...) so drift
on a shared machine hits both alike. Prints the median wall-time ratio.
Target: <= 1.03.

Then the recorded step itself: ``ProfilerStep*`` self CPU per step, neuronprof's
session against a hand-written torch.profiler loop (schedule wait 2, warmup 1,
active 8), interleaved. The session's own per-step work (checks, signal guard,
sync) runs between the recorded steps, so the ratio should be within noise of
1.0; the noise is shown as the ratio of two hand-written runs interleaved the
same way. Run it with ``--with-stack`` for ``with_stack=True`` on both sides.

    python benchmarks/overhead.py [--rounds 40] [--size 512] [--step-rounds 10] [--with-stack]
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


_STEPS = dict(wait=2, warmup=1, active=8)


def _step_self_us(events: object) -> list[float]:
    """``ProfilerStep*`` self CPU per step (µs) from ``key_averages()``."""
    return [e.self_cpu_time_total / e.count for e in events if e.key.startswith("ProfilerStep")]  # type: ignore[attr-defined]


def raw_step_self(model: nn.Module, x: torch.Tensor, with_stack: bool) -> list[float]:
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(**_STEPS), with_stack=with_stack) as prof:
        for _ in range(sum(_STEPS.values())):
            with torch.no_grad():
                model(x)
            prof.step()
    return _step_self_us(prof.key_averages())


def session_step_self(model: nn.Module, x: torch.Tensor, with_stack: bool, out: str) -> list[float]:
    with neuronprof.session(backend="cpu", output_dir=out, with_stack=with_stack, **_STEPS) as s:
        for _ in s.steps():
            with torch.no_grad():
                model(x)
    return _step_self_us(s.profiler.key_averages())


def step_self_ratio(model: nn.Module, x: torch.Tensor, rounds: int, with_stack: bool, out: str) -> None:
    """Print ``ProfilerStep*`` self CPU, session vs hand-written, and hand-written vs itself (the noise)."""
    runs: dict[str, list[float]] = {"np": [], "raw": [], "raw2": []}
    for r in range(rounds):
        order = ["raw", "np", "raw2"] if r % 2 == 0 else ["raw2", "np", "raw"]
        for kind in order:
            if kind == "np":
                runs[kind] += session_step_self(model, x, with_stack, out)
            else:
                runs[kind] += raw_step_self(model, x, with_stack)
    med = {k: statistics.median(v) for k, v in runs.items()}
    label = " (with_stack=True)" if with_stack else ""
    print(f"ProfilerStep* self CPU per step{label}, median over {len(runs['np'])} sessions of 8 steps:")
    print(f"  neuronprof.session {med['np']:8.1f} µs; hand-written {med['raw']:8.1f} µs and {med['raw2']:8.1f} µs")
    print(
        f"  ratio neuronprof / hand-written: {med['np'] / med['raw']:.3f}; noise (hand-written / hand-written): "
        f"{med['raw2'] / med['raw']:.3f}  (target: within noise of 1.0)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--step-rounds", type=int, default=10)
    parser.add_argument("--with-stack", action="store_true")
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
    step_self_ratio(model, x, args.step_rounds, args.with_stack, out)


if __name__ == "__main__":
    main()
