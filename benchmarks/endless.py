"""Memory of an endless schedule (repeat=0): neuronprof.session against raw torch.profiler.

A 20-layer MLP is profiled with wait=1, warmup=1, active=1, repeat=0 for
``--cycles`` cycles (default 300), each side in its own fresh process. RSS is read
after the first ``--cycles // 6`` cycles and at the end; prints each side's growth
and the difference. Target: neuronprof grows within 25 MB of raw torch.profiler.

    python benchmarks/endless.py [--cycles 300]
"""

from __future__ import annotations

import argparse
import textwrap

from _child import run_child

CHILD = textwrap.dedent(
    """
    import gc, json, sys, torch, neuronprof
    torch.set_num_threads(1)
    def rss_mb():
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith("VmRSS")).split()[1]) / 1024
    side, cycles, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(20)]); x = torch.randn(4, 32)
    if side == "torch":
        prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=1, repeat=0))
    else:
        prof = neuronprof.session(backend="cpu", wait=1, warmup=1, active=1, repeat=0, output_dir=out)
    first = 3 * max(1, cycles // 6)
    marks = {}
    with prof as p:
        for step in range(1, 3 * cycles + 1):
            model(x); p.step()
            if step in (first, 3 * cycles):
                gc.collect(); marks["start" if step == first else "end"] = rss_mb()
    print("RESULT" + json.dumps(marks))
    """
)


def run(side: str, cycles: int) -> dict[str, float]:
    return run_child(CHILD, side, str(cycles), prefix="neuronprof-endless-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=300)
    args = parser.parse_args()
    growth = {}
    for side in ("torch", "neuronprof"):
        marks = run(side, args.cycles)
        growth[side] = marks["end"] - marks["start"]
        print(f"{side:10s}: RSS {marks['start']:7.1f} -> {marks['end']:7.1f} MiB (+{growth[side]:.1f})")
    diff = growth["neuronprof"] - growth["torch"]
    print(f"growth over raw torch.profiler across {args.cycles} cycles: {diff:+.1f} MiB  (target <= 25)")


if __name__ == "__main__":
    main()
