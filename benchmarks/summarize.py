"""Time and peak memory of ``neuronprof summarize`` on a large trace, against a bare ``json.load``.

Writes a synthetic trace in torch.profiler's own layout (kineto's indented JSON:
ProfilerStep annotations, nested aten ops with recorded shapes, CUDA runtime
calls, GPU kernels and flow events) with at least 2 million events to a
temporary folder, then runs, each in its own process so that peak RSS is its
own, on the same file in the same run:

1. ``neuronprof summarize`` (the command line, streaming parser);
2. a baseline: ``json.load`` of the whole file plus per-name duration sums
   (and the same with the garbage collector disabled, for reference);
3. Holistic Trace Analysis' ``TraceAnalysis`` when ``hta`` is installed.

It prints events/s, wall time and peak RSS of each, and the ratios against the
baseline. The targets: summarize within 2x of the baseline's time, and peak RSS
at most 1.5x the uncompressed file size.

Usage::

    python benchmarks/summarize.py [--events 2000000] [--gzip] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import IO, Optional

ROOT = Path(__file__).resolve().parents[1]

_OPS = [
    ("aten::mm", "[[4096, 4096], [4096, 4096]]", '["c10::BFloat16", "c10::BFloat16"]', '["", ""]'),
    ("aten::add", "[[4096, 4096], [4096, 4096], []]", '["float", "float", "Scalar"]', '["", "", "1"]'),
    ("aten::mul", "[[4096, 4096], []]", '["float", "Scalar"]', '["", "2.0"]'),
    ("aten::pow", "[[4096, 4096], []]", '["float", "Scalar"]', '["", "2"]'),
    ("aten::mean", "[[4096, 4096], [], [], []]", '["float", "ScalarList", "Scalar", ""]', '["", "[-1]", "True", ""]'),
    ("aten::_softmax", "[[64, 4096], [], []]", '["c10::Half", "Scalar", "Scalar"]', '["", "-1", "False"]'),
]


def _cpu_op(out: IO[str], name: str, ts: float, dur: float, ext: int, dims: str, types: str, concrete: str) -> None:
    out.write(
        "  {\n"
        '    "ph": "X",\n    "cat": "cpu_op",\n'
        f'    "name": "{name}",\n    "pid": 4242,\n    "tid": 4242,\n'
        f'    "ts": {ts:.3f},\n    "dur": {dur:.3f}\n    ,\n'
        '    "args": {\n'
        f'      "External id": {ext},"Sequence number": 0, "Fwd thread id": 0, "Record function id": 0, '
        f'"Concrete Inputs": {concrete}, "Input type": {types}, "Input Strides": {dims}, "Input Dims": {dims}, '
        f'"Ev Idx": {ext}\n'
        "    }\n  },\n"
    )


def write_trace(path: Path, n_events: int, seed: int = 0) -> int:
    """Write a kineto-style CUDA trace with at least ``n_events`` events; return the number written."""
    rng = random.Random(seed)
    opener = gzip.open if path.name.endswith(".gz") else open
    written = 0
    with opener(path, "wt", encoding="utf-8") as out:  # type: ignore[operator]
        out.write(
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, "name": "NVIDIA H100 80GB HBM3", '
            '"totalGlobalMem": 85045477376\n    }\n  ],\n  "record_shapes": 1,\n'
            '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1790857026000000000,\n  "traceEvents": [\n'
        )
        for pid, label in ((4242, "CPU"), (0, "GPU 0")):
            out.write(
                f'  {{\n    "ph": "M", "name": "process_name", "pid": {pid}, "tid": 0,\n'
                f'    "args": {{\n      "name": "python"\n    }}\n  }},\n'
                f'  {{\n    "ph": "M", "name": "process_labels", "pid": {pid}, "tid": 0,\n'
                f'    "args": {{\n      "labels": "{label}"\n    }}\n  }},\n'
            )
            written += 2
        ts, ext, corr, step = 5106267470000.0, 0, 0, 0
        while written < n_events:
            step += 1
            ext += 1
            step_start, step_ops = ts, 250
            out.write(
                "  {\n"
                '    "ph": "X",\n    "cat": "user_annotation",\n'
                f'    "name": "ProfilerStep#{step}",\n    "pid": 4242,\n    "tid": 4242,\n'
                f'    "ts": {step_start:.3f},\n    "dur": {step_ops * 40.0 + 1:.3f}\n    ,\n'
                f'    "args": {{\n      "External id": {ext},"Record function id": 0, "Ev Idx": {ext}\n    }}\n  }},\n'
            )
            written += 1
            ts += 0.5
            for _ in range(step_ops):
                name, dims, types, concrete = _OPS[rng.randrange(len(_OPS))]
                ext += 1
                corr += 1
                op_ext = ext
                _cpu_op(out, name, ts, 30.0, op_ext, dims, types, concrete)
                ext += 1
                _cpu_op(
                    out,
                    "aten::empty",
                    ts + 1.0,
                    2.0,
                    ext,
                    "[[], [], [], [], [], []]",
                    '["ScalarList", "Scalar", "", "", "", ""]',
                    '["[4096, 4096]", "6", "", "", "", ""]',
                )
                out.write(
                    "  {\n"
                    '    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,\n'
                    f'    "ts": {ts + 5:.3f}, "dur": {rng.uniform(3, 6):.3f},\n'
                    f'    "args": {{\n      "External id": {op_ext},\n      "cbid": 211, "correlation": {corr}\n'
                    "    }\n  },\n"
                    "  {\n"
                    '    "ph": "X", "cat": "kernel", '
                    f'"name": "void at::native::kernel_{name[6:]}<float>(int, float*)", "pid": 0, "tid": 7,\n'
                    f'    "ts": {ts + 12:.3f}, "dur": {rng.uniform(5, 25):.3f},\n'
                    f'    "args": {{\n      "External id": {op_ext},\n      "queued": 0, "device": 0, "context": 1,\n'
                    f'      "stream": 7, "correlation": {corr},\n      "registers per thread": 32,\n'
                    '      "shared memory": 0,\n      "blocks per SM": 4.5,\n      "warps per SM": 18.0,\n'
                    '      "grid": [2048, 1, 1],\n      "block": [128, 1, 1],\n'
                    '      "est. achieved occupancy %": 50\n    }\n  },\n'
                    f'  {{\n    "ph": "s", "id": {corr}, "pid": 4242, "tid": 4242, "ts": {ts + 5:.3f},\n'
                    '    "cat": "ac2g", "name": "ac2g"\n  },\n'
                    f'  {{\n    "ph": "f", "id": {corr}, "pid": 0, "tid": 7, "ts": {ts + 12:.3f},\n'
                    '    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  },\n'
                )
                written += 6
                ts += 40.0
            ts = step_start + step_ops * 40.0 + 2
        out.write(
            '  {\n    "ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", '
            f'"tid": "PyTorch Profiler",\n    "ts": 5106267470000.000, "dur": {ts - 5106267470000.0:.3f}\n  }}\n'
            '  ],\n  "traceName": "synthetic.pt.trace.json"\n}\n'
        )
        written += 1
    return written


_BASELINE = textwrap.dedent(
    """
    import json, sys
    with open(sys.argv[1], encoding="utf-8") as f:
        trace = json.load(f)
    sums = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            sums[e["name"]] = sums.get(e["name"], 0.0) + e["dur"]
    print(len(sums), "names")
    """
)

# The same, with the cyclic garbage collector off: json.load of a big file spends
# much of its time in collections triggered by the millions of new containers.
_BASELINE_NO_GC = "import gc; gc.disable()\n" + _BASELINE

_SUMMARIZE = textwrap.dedent(
    """
    import sys
    from neuronprof.cli import main
    raise SystemExit(main(["summarize", sys.argv[1], "--limit", "10"]))
    """
)

_SUMMARIZE_ANALYSIS_ONLY = textwrap.dedent(
    """
    import sys
    from neuronprof.analysis.cli import main
    raise SystemExit(main(["summarize", sys.argv[1], "--limit", "10"]))
    """
)

_HTA = textwrap.dedent(
    """
    import sys
    from hta.trace_analysis import TraceAnalysis
    analysis = TraceAnalysis(trace_dir=sys.argv[1])
    print(analysis.get_gpu_kernel_breakdown()[0].head())
    """
)


def measure(code: str, arg: str, env: dict[str, str]) -> tuple[float, int, int, str]:
    """Run ``python -c code arg`` and return (seconds, peak RSS bytes, exit status, output tail)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, arg], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # wait4 gives this child's own rusage, unlike RUSAGE_CHILDREN which is the max over all children.
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    return seconds, usage.ru_maxrss * 1024, proc.returncode, output[-2000:]


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000, help="events to write (default 2,000,000)")
    parser.add_argument("--gzip", action="store_true", help="also time summarize on a .json.gz copy")
    parser.add_argument("--keep", type=Path, default=None, help="write the trace here and keep it")
    args = parser.parse_args(argv)

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    tmp = Path(tempfile.mkdtemp(prefix="neuronprof-bench-")) if args.keep is None else args.keep
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        trace = tmp / "synthetic.pt.trace.json"
        t0 = time.perf_counter()
        n = write_trace(trace, args.events)
        size = trace.stat().st_size
        print(f"trace: {n:,} events, {_fmt_bytes(size)} uncompressed, written in {time.perf_counter() - t0:.1f} s")
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")

        summarize_code = _SUMMARIZE
        probe = measure(_SUMMARIZE, str(tmp / "missing.json"), env)
        if "invalid choice" in probe[3]:  # the top-level command does not list summarize (yet)
            summarize_code = _SUMMARIZE_ANALYSIS_ONLY
            print("note: `neuronprof` does not register summarize here; timing neuronprof.analysis.cli instead\n")

        results: dict[str, tuple[float, int]] = {}
        runs = [
            ("json.load + per-name sums (baseline)", _BASELINE, str(trace)),
            ("json.load, gc disabled", _BASELINE_NO_GC, str(trace)),
            ("neuronprof summarize", summarize_code, str(trace)),
        ]
        if args.gzip:
            gz = tmp / "synthetic.pt.trace.json.gz"
            with open(trace, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            runs.append(("neuronprof summarize (.json.gz)", summarize_code, str(gz)))
        try:
            import hta  # noqa: F401

            runs.append(("HTA TraceAnalysis", _HTA, str(tmp)))
        except ImportError:
            print("HTA (HolisticTraceAnalysis) is not installed: skipping its run\n")

        for label, code, arg in runs:
            seconds, rss, status, tail = measure(code, arg, env)
            if status != 0:
                print(f"{label}: exit status {status}\n{tail}")
                continue
            results[label] = (seconds, rss)
            print(f"{label:40s} {seconds:7.2f} s  {n / seconds:12,.0f} events/s  peak RSS {_fmt_bytes(rss):>12s}")

        base = results.get("json.load + per-name sums (baseline)")
        ours = results.get("neuronprof summarize")
        if base and ours:
            print()
            for label, (seconds, rss) in results.items():
                print(
                    f"{label:40s} time x{seconds / base[0]:.2f} of baseline, "
                    f"peak RSS x{rss / base[1]:.2f} of baseline, x{rss / size:.2f} of the file size"
                )
            time_ok = ours[0] <= 2 * base[0]
            rss_ok = ours[1] <= 1.5 * size
            no_gc = results.get("json.load, gc disabled")
            if no_gc:
                print(f"\nneuronprof summarize vs json.load with gc disabled: time x{ours[0] / no_gc[0]:.2f}")
            print(
                f"\ntarget: time within 2x of json.load: {'met' if time_ok else 'MISSED'} "
                f"(x{ours[0] / base[0]:.2f}); peak RSS <= 1.5x file size: {'met' if rss_ok else 'MISSED'} "
                f"(x{ours[1] / size:.2f})"
            )
            hta = results.get("HTA TraceAnalysis")
            if hta:
                faster = hta[0] / ours[0]
                print(f"target: >= 3x faster than HTA: {'met' if faster >= 3 else 'MISSED'} (x{faster:.1f})")
            return 0 if time_ok and rss_ok else 1
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
