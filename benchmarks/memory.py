"""Peak RSS of neuronprof.session(profile_memory=True) against hand-written torch.profiler.

An allocation-heavy loop is profiled with memory tracking on, each side in its
own fresh process (peak RSS is per process), alternating sides for several
rounds. Prints the median peak RSS of each side and their ratio. Target: <= 1.2.

    python benchmarks/memory.py [--rounds 3] [--allocs 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import torch
    side, allocs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    def body():
        kept = []
        for i in range(allocs):
            t = torch.empty(256, 256)
            t.fill_(1.0)
            if i % 10 == 0:
                kept.append(t.sum())
        return kept

    if side == "neuronprof":
        import neuronprof
        with neuronprof.session(backend="cpu", profile_memory=True, output_dir=out) as s:
            for _ in s.steps():
                body()
        table = str(s.table())
    else:
        from torch.profiler import ProfilerActivity, profile, schedule
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                     schedule=schedule(wait=2, warmup=1, active=1), on_trace_ready=lambda p: None) as prof:
            for _ in range(4):
                body()
                prof.step()
        table = prof.key_averages().table(sort_by="self_cpu_memory_usage", row_limit=20)
    print(json.dumps({"maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "chars": len(table)}))
    """
)


def run(side: str, allocs: int, out: str) -> int:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, side, str(allocs), out], capture_output=True, text=True, check=True, env=env
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    return int(json.loads(line)["maxrss_kb"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--allocs", type=int, default=2000)
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="neuronprof-mem-")
    raw: list[int] = []
    ours: list[int] = []
    for r in range(args.rounds):
        sides = ["raw", "neuronprof"] if r % 2 == 0 else ["neuronprof", "raw"]
        for side in sides:
            (raw if side == "raw" else ours).append(run(side, args.allocs, out))
    a, b = statistics.median(raw), statistics.median(ours)
    print(f"hand-written torch.profiler(profile_memory=True): median peak RSS {a / 1024:8.1f} MiB")
    print(f"neuronprof.session(profile_memory=True):          median peak RSS {b / 1024:8.1f} MiB")
    print(f"peak RSS ratio (neuronprof / hand-written): {b / a:.3f}  (target <= 1.2)")


if __name__ == "__main__":
    main()
