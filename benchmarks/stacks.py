"""Cost of the collapsed-stacks export: ``s.export(format="stacks")`` against torch.profiler's own ``export_stacks``.

One step of ``--ops`` tiny ops (default 40,000), each called through a few Python
frames, is profiled with ``with_stack=True``, each side in its own fresh process,
alternating sides for several rounds.

* torch: ``prof.export_stacks(path, "self_cpu_time_total")`` in ``on_trace_ready``,
  with kineto's ``verbose`` on (without it torch records no stacks to export).
* neuronprof: ``s.export(path, format="stacks")`` after the session.

Both calls are timed from the call to the file on disk; the first call on each
side includes torch's first reading of the recorded events (``function_events``)
that the stacks are made from, the second call (to another file) only the
writing. The first call is mostly torch's reading of the events (the same code on
both sides), so on a busy machine its ratio moves with the load; the second shows
what each side's own writing costs. Prints medians and both ratios neuronprof /
torch. Target: <= 1.2.

    python benchmarks/stacks.py [--rounds 3] [--ops 40000]
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
    x = torch.ones(4)

    def leaf():
        return torch.add(x, 1)

    def middle():
        return leaf()

    def body():
        for _ in range(ops):
            middle()

    result = {}
    if side == "torch":
        from torch._C._profiler import _ExperimentalConfig
        from torch.profiler import ProfilerActivity, profile, schedule

        def ready(prof):
            t0 = time.perf_counter()
            prof.export_stacks(out + "/torch.stacks", "self_cpu_time_total")
            result["seconds"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            prof.export_stacks(out + "/torch2.stacks", "self_cpu_time_total")
            result["again_seconds"] = time.perf_counter() - t0

        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=1),
                     on_trace_ready=ready, with_stack=True,
                     experimental_config=_ExperimentalConfig(verbose=True)) as prof:
            for i in range(2):
                if i == 1:
                    body()
                prof.step()
        path = out + "/torch.stacks"
    else:
        import neuronprof
        with neuronprof.session(backend="cpu", wait=0, warmup=1, active=1, output_dir=out, with_stack=True) as s:
            for i in s.steps():
                if i == 1:
                    body()
        t0 = time.perf_counter()
        path = str(s.export(out + "/np.stacks.txt", format="stacks"))
        result["seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        s.export(out + "/np2.stacks.txt", format="stacks")
        result["again_seconds"] = time.perf_counter() - t0
    with open(path) as f:
        lines = f.read().splitlines()
    result["lines"] = len(lines)
    result["total"] = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
    print("RESULT" + json.dumps(result))
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=40_000)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"torch": [], "neuronprof": []}
    for r in range(args.rounds):
        for side in ("torch", "neuronprof") if r % 2 == 0 else ("neuronprof", "torch"):
            runs[side].append(run_child(CHILD, side, str(args.ops), prefix="neuronprof-stacks-"))

    def med(side: str, key: str) -> float:
        return statistics.median(float(x[key]) for x in runs[side])

    t_torch, t_np = med("torch", "seconds"), med("neuronprof", "seconds")
    a_torch, a_np = med("torch", "again_seconds"), med("neuronprof", "again_seconds")
    print(f"{args.ops} ops in one step (with_stack=True), {args.rounds} rounds")
    print(
        f"torch export_stacks:                    {t_torch:7.2f} s, again {a_torch:6.2f} s "
        f"({med('torch', 'lines'):.0f} lines: one per event)"
    )
    print(
        f"neuronprof export(format='stacks'):     {t_np:7.2f} s, again {a_np:6.2f} s "
        f"({med('neuronprof', 'lines'):.0f} lines: equal stacks summed)"
    )
    print(f"stacks export time ratio (neuronprof / torch), first call:   {t_np / t_torch:.2f}  (target <= 1.2)")
    print(f"stacks export time ratio (neuronprof / torch), second call:  {a_np / a_torch:.2f}  (target <= 1.2)")


if __name__ == "__main__":
    main()
