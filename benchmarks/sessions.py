"""Memory growth over many profiling sessions in one process: neuronprof against raw torch.profiler.

A long-running service or notebook opens session after session. torch itself
keeps memory after each profile until the collector runs (pytorch#193348), so
the raw side is the fair baseline only with ``gc.collect()`` after each
profile, as its users are told to do. Each side runs in its own fresh process:

* torch: ``torch.profiler.profile()`` around ``--steps`` + 1 small steps, its table
  read (``key_averages()``), then ``gc.collect()``; and the same without
  ``gc.collect()``, for reference (torch's own growth).
* neuronprof: ``neuronprof.session(backend="cpu", wait=0, warmup=1, active=steps)``, its
  table read (``s.table()``), nothing else.

Growth is the process's RSS (Linux ``VmRSS``) after ``--sessions`` sessions less
its RSS after ``--warmup`` sessions (one-time costs: imports, caches, the
allocator's first arenas). Prints each side's growth (MiB, and KiB per session)
and the ratio neuronprof / torch with gc.collect(). Target: <= 1.0, where a
growth below 8 MiB on both sides counts as 8 MiB (the allocator's noise).

    python benchmarks/sessions.py [--sessions 1000] [--warmup 20] [--steps 3]
"""

from __future__ import annotations

import argparse
import textwrap

from _child import run_child

CHILD = textwrap.dedent(
    """
    import gc, json, sys
    import torch
    side, sessions, warmup, steps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.set_num_threads(1)
    x = torch.ones(64, 64)

    def work():
        for _ in range(20):
            torch.relu(x @ x)

    def rss_kb():
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith("VmRSS")).split()[1])

    if side.startswith("torch"):
        from torch.profiler import ProfilerActivity, profile

        def one():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(1 + steps):  # as many steps as the session's warmup + active
                    work()
                    prof.step()
            prof.key_averages()
            if side == "torch":
                gc.collect()
    else:
        import neuronprof

        def one():
            with neuronprof.session(backend="cpu", wait=0, warmup=1, active=steps, output_dir=out) as s:
                for _ in s.steps():
                    work()
            s.table()

    for _ in range(warmup):
        one()
    start = rss_kb()
    for _ in range(sessions):
        one()
    print("RESULT" + json.dumps({"growth_kb": rss_kb() - start}))
    """
)

FLOOR_MIB = 8.0


def growth(side: str, sessions: int, warmup: int, steps: int) -> float:
    """MiB the process grew by over ``sessions`` sessions of ``side`` after ``warmup`` ones."""
    result = run_child(CHILD, side, str(sessions), str(warmup), str(steps), prefix="neuronprof-sessions-")
    return float(result["growth_kb"]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    figures = {
        side: growth(side, args.sessions, args.warmup, args.steps) for side in ("torch", "neuronprof", "torch-no-gc")
    }
    n = args.sessions
    for side, label in (
        ("torch", "torch.profiler + gc.collect()"),
        ("neuronprof", "neuronprof.session"),
        ("torch-no-gc", "torch.profiler, no gc.collect()"),
    ):
        print(
            f"{label:33s} grows {figures[side]:8.1f} MiB over {n} sessions ({figures[side] * 1024 / n:6.1f} KiB each)"
        )
    ratio = max(figures["neuronprof"], FLOOR_MIB) / max(figures["torch"], FLOOR_MIB)
    print(
        f"memory growth ratio (neuronprof / torch with gc.collect()): {ratio:.2f}  "
        f"(target <= 1.0; floor {FLOOR_MIB:.0f} MiB)"
    )


if __name__ == "__main__":
    main()
