"""Cost of exporting a large step: neuronprof's export against torch.profiler's own export_chrome_trace.

One step of ``--ops`` tiny ops (default 200,000) is profiled, each side in its own
fresh process (peak memory is per process), alternating sides for several rounds.

* torch: ``prof.export_chrome_trace(path)`` in ``on_trace_ready`` (kineto's save).
* neuronprof: everything the session spends to get the trace to disk: its private
  kineto save when the cycle ends (neuronprof's metadata is written by kineto),
  plus the first ``s.export()`` (a copy of that save, never a second name of it).
  A second export (another copy) is timed too.

Memory is what the export itself adds, not the process's whole peak (which is
the profiled step's events, the same on both sides): the process's peak RSS
(Linux ``VmHWM``, reset through ``/proc/self/clear_refs`` right before the export
work) minus its RSS right before it. Each side's figure is counted as at least
1 MiB, so that a ratio of two near-zero figures stays meaningful. Prints medians
and the ratios neuronprof / torch. Targets: time <= 1.3, memory <= 1.2.

    python benchmarks/export.py [--rounds 3] [--ops 200000]
"""

from __future__ import annotations

import argparse
import statistics
import textwrap

from _child import run_child

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import torch
    side, ops, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(1)

    def status(key):
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith(key)).split()[1])

    def reset_peak():
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            return False
        # The reset worked when the peak is back near the current RSS.
        return status("VmHWM") <= status("VmRSS") + 1024

    x = torch.ones(4)
    def body():
        for _ in range(ops):
            torch.add(x, 1)

    result = {"seconds": 0.0, "rss_kb": None, "peak_kb": 0, "reset": None}

    def measured(fn):
        if result["rss_kb"] is None:
            result["rss_kb"] = status("VmRSS")
            result["reset"] = reset_peak()
        t0 = time.perf_counter()
        value = fn()
        result["seconds"] += time.perf_counter() - t0
        result["peak_kb"] = max(result["peak_kb"], status("VmHWM"))
        return value

    if side == "torch":
        from torch.profiler import ProfilerActivity, profile, schedule
        def ready(prof):
            measured(lambda: prof.export_chrome_trace(out + "/torch.json"))
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=1),
                     on_trace_ready=ready) as prof:
            for i in range(2):
                if i == 1:
                    body()
                prof.step()
        size = __import__("os").path.getsize(out + "/torch.json")
    else:
        import neuronprof
        from neuronprof import _cycle_files
        save = _cycle_files.save_native_trace
        _cycle_files.save_native_trace = lambda cycle, dest: measured(lambda: save(cycle, dest))
        with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=out) as s:
            for i in s.steps():
                if i == 1:
                    body()
        path = measured(lambda: s.export(out + "/np.json"))
        size = path.stat().st_size
        t0 = time.perf_counter()
        s.export(out + "/np2.json")
        result["second_seconds"] = time.perf_counter() - t0
    result["bytes"] = size
    print("RESULT" + json.dumps(result))
    """
)


def run(side: str, ops: int) -> dict[str, float]:
    return run_child(CHILD, side, str(ops), prefix="neuronprof-export-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=200_000)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"torch": [], "neuronprof": []}
    for r in range(args.rounds):
        for side in ("torch", "neuronprof") if r % 2 == 0 else ("neuronprof", "torch"):
            runs[side].append(run(side, args.ops))

    def med(side: str, key: str) -> float:
        return statistics.median(float(x[key]) for x in runs[side])

    def added(side: str) -> float:
        """MiB the export work added over the RSS right before it (median over rounds)."""
        return statistics.median((x["peak_kb"] - x["rss_kb"]) / 1024 for x in runs[side])

    if not all(x["reset"] for side in runs for x in runs[side]):
        raise SystemExit("/proc/self/clear_refs could not reset the peak RSS here; the memory figures would be wrong")
    t_torch, t_np = med("torch", "seconds"), med("neuronprof", "seconds")
    a_torch, a_np = added("torch"), added("neuronprof")
    p_torch, p_np = med("torch", "peak_kb") / 1024, med("neuronprof", "peak_kb") / 1024
    print(f"{args.ops} ops in one step, {args.rounds} rounds, trace {med('torch', 'bytes') / 2**20:.0f} MiB")
    print(f"torch export_chrome_trace:       {t_torch:7.2f} s   adds {a_torch:7.1f} MiB (peak {p_torch:.0f} MiB)")
    print(f"neuronprof save + first export:  {t_np:7.2f} s   adds {a_np:7.1f} MiB (peak {p_np:.0f} MiB)")
    print(f"neuronprof second export:        {med('neuronprof', 'second_seconds'):7.2f} s")
    print(f"export time ratio (neuronprof / torch):       {t_np / t_torch:.2f}  (target <= 1.3)")
    print(
        f"export memory ratio (neuronprof / torch):     {max(a_np, 1.0) / max(a_torch, 1.0):.2f}  "
        "(target <= 1.2; memory each export adds, at least 1 MiB each)"
    )


if __name__ == "__main__":
    main()
