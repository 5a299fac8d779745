"""Time and peak memory of ``neuronprof summarize`` against a bare ``json.load`` + per-name sums.

Writes two traces to a temporary folder:

* the synthetic benchmark: torch.profiler's layout (kineto's indented JSON:
  ProfilerStep annotations, nested aten ops with recorded shapes, CUDA runtime
  calls, GPU kernels and flow events), 2 million events by default;
* a trace of realistic shape: a kineto 2.x CUDA training trace of 720k events
  (absolute-epoch timestamps with nanosecond digits, forward and autograd
  threads, nested ops, kernels with kineto's full argument set, memcpys, flows).

For each, it runs in the same run, each in its own process so that peak RSS is
its own:

1. a baseline: ``json.load`` of the whole file plus per-name duration sums
   (and the same with the garbage collector disabled, for reference);
2. ``neuronprof summarize`` (the command line);
3. ``neuronprof summarize`` with the pure-Python reader (msgspec hidden);
4. Holistic Trace Analysis' ``TraceAnalysis`` when ``hta`` is installed.

It prints wall time, CPU time (user + system, steadier on a shared machine) and
peak RSS of each, and the ratios: summarize's wall time over the baseline's
(target <= 1.0x) and summarize's peak RSS over the file size (target <= 1.5x).

Usage::

    python benchmarks/summarize.py [--events 2000000] [--realistic-events 720000] [--gzip] [--keep DIR]
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


def _cpu_op(
    out: IO[str], name: str, ts: float, dur: float, ext: int, dims: str, types: str, concrete: str, tid: int = 4242
) -> None:
    out.write(
        "  {\n"
        '    "ph": "X",\n    "cat": "cpu_op",\n'
        f'    "name": "{name}",\n    "pid": 4242,\n    "tid": {tid},\n'
        f'    "ts": {ts:.3f},\n    "dur": {dur:.3f}\n    ,\n'
        '    "args": {\n'
        f'      "External id": {ext},"Sequence number": 0, "Fwd thread id": 0, "Record function id": 0, '
        f'"Concrete Inputs": {concrete}, "Input type": {types}, "Input Strides": {dims}, "Input Dims": {dims}, '
        f'"Ev Idx": {ext}\n'
        "    }\n  },\n"
    )


def write_trace(
    path: Path,
    n_events: int,
    seed: int = 0,
    *,
    threads: int = 1,
    ops_per_step: int = 250,
    rank: Optional[int] = None,
    world_size: int = 1,
) -> int:
    """Write a kineto-style CUDA trace with at least ``n_events`` events; return the number written.

    Args:
        path: The file to write (``.gz``: gzipped).
        n_events: Events to write at least: whole steps are written, ``6 * ops_per_step + 1`` events each.
        seed: Seed of the random op choice and durations.
        threads: Host threads the ops take turns on (tid 4242, 4243...), each launching on its own
            CUDA stream (7, 8...); the ``ProfilerStep#N`` spans stay on the first thread.
        ops_per_step: Ops per step, each with its ``aten::empty``, launch, kernel and flow pair.
        rank: When given, the header's ``distributedInfo`` names this rank of ``world_size``.
        world_size: The ``world_size`` of ``distributedInfo``.
    """
    if threads < 1 or ops_per_step < 1:
        raise ValueError(f"threads and ops_per_step must be at least 1, not {threads} and {ops_per_step}")
    rng = random.Random(seed)
    opener = gzip.open if path.name.endswith(".gz") else open
    written = 0
    with opener(path, "wt", encoding="utf-8") as out:  # type: ignore[operator]
        out.write(
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, "name": "NVIDIA H100 80GB HBM3", '
            '"totalGlobalMem": 85045477376\n    }\n  ],\n'
        )
        if rank is not None:
            out.write(f'  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world_size}}},\n')
        out.write(
            '  "record_shapes": 1,\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1790857026000000000,\n'
            '  "traceEvents": [\n'
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
            step_start, step_ops = ts, ops_per_step
            out.write(
                "  {\n"
                '    "ph": "X",\n    "cat": "user_annotation",\n'
                f'    "name": "ProfilerStep#{step}",\n    "pid": 4242,\n    "tid": 4242,\n'
                f'    "ts": {step_start:.3f},\n    "dur": {step_ops * 40.0 + 1:.3f}\n    ,\n'
                f'    "args": {{\n      "External id": {ext},"Record function id": 0, "Ev Idx": {ext}\n    }}\n  }},\n'
            )
            written += 1
            ts += 0.5
            for i in range(step_ops):
                tid, stream = 4242 + i % threads, 7 + i % threads
                name, dims, types, concrete = _OPS[rng.randrange(len(_OPS))]
                ext += 1
                corr += 1
                op_ext = ext
                _cpu_op(out, name, ts, 30.0, op_ext, dims, types, concrete, tid)
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
                    tid,
                )
                out.write(
                    "  {\n"
                    '    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, '
                    f'"tid": {tid},\n'
                    f'    "ts": {ts + 5:.3f}, "dur": {rng.uniform(3, 6):.3f},\n'
                    f'    "args": {{\n      "External id": {op_ext},\n      "cbid": 211, "correlation": {corr}\n'
                    "    }\n  },\n"
                    "  {\n"
                    '    "ph": "X", "cat": "kernel", '
                    f'"name": "void at::native::kernel_{name[6:]}<float>(int, float*)", "pid": 0, "tid": {stream},\n'
                    f'    "ts": {ts + 12:.3f}, "dur": {rng.uniform(5, 25):.3f},\n'
                    f'    "args": {{\n      "External id": {op_ext},\n      "queued": 0, "device": 0, "context": 1,\n'
                    f'      "stream": {stream}, "correlation": {corr},\n      "registers per thread": 32,\n'
                    '      "shared memory": 0,\n      "blocks per SM": 4.5,\n      "warps per SM": 18.0,\n'
                    '      "grid": [2048, 1, 1],\n      "block": [128, 1, 1],\n'
                    '      "est. achieved occupancy %": 50\n    }\n  },\n'
                    f'  {{\n    "ph": "s", "id": {corr}, "pid": 4242, "tid": {tid}, "ts": {ts + 5:.3f},\n'
                    '    "cat": "ac2g", "name": "ac2g"\n  },\n'
                    f'  {{\n    "ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, "ts": {ts + 12:.3f},\n'
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


_KERNELS = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
    "void at::native::(anonymous namespace)::clamp_min_kernel_cuda<c10::BFloat16>(at::TensorIteratorBase&)",
    "triton_poi_fused_add_native_layer_norm_0",
)


class _Realistic:
    """Writes events in kineto's own layout (PyTorch 2.x): absolute-epoch µs timestamps with ns digits."""

    def __init__(self, out: IO[str], rng: random.Random) -> None:
        self.out = out
        self.rng = rng
        self.written = 0
        self.ext = 0
        self.corr = 0
        self.gpu_ts = 0.0

    @staticmethod
    def _t(us: float) -> str:
        return f"{us:.3f}"

    def cpu_op(self, name: str, ts: float, dur: float, *, tid: int = 4242, cat: str = "cpu_op", dims: str = "") -> int:
        self.ext += 1
        shapes = f', "Input Dims": {dims}, "Input type": ["c10::BFloat16", "c10::BFloat16"]' if dims else ""
        self.out.write(
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": 4242, "tid": {tid},\n'
            f'    "ts": {self._t(ts)}, "dur": {self._t(dur)},\n'
            f'    "args": {{\n      "External id": {self.ext},"Record function id": 0, "Ev Idx": {self.ext}{shapes}\n'
            "    }\n  },\n"
        )
        self.written += 1
        return self.ext

    def launch(self, ts: float, ext: int, kernel: str, kdur: float, *, memcpy: bool = False, tid: int = 4242) -> None:
        self.corr += 1
        c = self.corr
        runtime = "cudaMemcpyAsync" if memcpy else "cudaLaunchKernel"
        self.gpu_ts = max(self.gpu_ts, ts + 3.0)
        self.out.write(
            f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "{runtime}", "pid": 4242, "tid": {tid},\n'
            f'    "ts": {self._t(ts)}, "dur": {self._t(2.5)},\n'
            f'    "args": {{\n      "External id": {ext},\n      "cbid": 211, "correlation": {c}\n    }}\n  }},\n'
        )
        if memcpy:
            self.out.write(
                f'  {{\n    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", '
                f'"pid": 0, "tid": 7,\n    "ts": {self._t(self.gpu_ts)}, "dur": {self._t(kdur)},\n'
                f'    "args": {{\n      "External id": {ext},\n      "device": 0, "context": 1,\n'
                f'      "stream": 7, "correlation": {c},\n      "bytes": 4194304, "memory bandwidth (GB/s)": 6.1\n'
                "    }\n  },\n"
            )
        else:
            self.out.write(
                f'  {{\n    "ph": "X", "cat": "kernel", "name": "{kernel}", "pid": 0, "tid": 7,\n'
                f'    "ts": {self._t(self.gpu_ts)}, "dur": {self._t(kdur)},\n'
                f'    "args": {{\n      "External id": {ext},\n      "queued": 0, "device": 0, "context": 1,\n'
                f'      "stream": 7, "correlation": {c},\n      "registers per thread": 32,\n'
                '      "shared memory": 0,\n      "blocks per SM": 0.5,\n      "warps per SM": 2.0,\n'
                '      "grid": [66, 1, 1],\n      "block": [128, 1, 1],\n      "est. achieved occupancy %": 3\n'
                "    }\n  },\n"
            )
        self.out.write(
            f'  {{\n    "ph": "s", "id": {c}, "pid": 4242, "tid": {tid}, "ts": {self._t(ts)},\n'
            '    "cat": "ac2g", "name": "ac2g"\n  },\n'
            f'  {{\n    "ph": "f", "id": {c}, "pid": 0, "tid": 7, "ts": {self._t(self.gpu_ts)},\n'
            '    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  },\n'
        )
        self.gpu_ts += kdur + 1.0
        self.written += 4

    def layer(self, ts: float) -> float:
        """One transformer-ish block: linear (t/transpose/as_strided + addmm), relu, views, a copy; ~40 µs."""
        rng = self.rng
        self.cpu_op("aten::linear", ts, 30.0, dims="[[64, 4096], [4096, 4096]]")
        self.cpu_op("aten::t", ts + 1.0, 4.0)
        self.cpu_op("aten::transpose", ts + 1.5, 3.0)
        self.cpu_op("aten::as_strided", ts + 2.0, 1.0)
        addmm = self.cpu_op("aten::addmm", ts + 6.0, 20.0, dims="[[4096], [64, 4096], [4096, 4096]]")
        self.launch(ts + 10.0, addmm, _KERNELS[1], rng.uniform(20, 40))
        self.cpu_op("aten::relu", ts + 31.0, 6.0)
        clamp = self.cpu_op("aten::clamp_min", ts + 32.0, 4.0)
        self.launch(ts + 33.0, clamp, _KERNELS[2], rng.uniform(2, 5))
        for k in range(4):
            self.cpu_op("aten::view", ts + 37.5 + k * 0.5, 0.3)
        self.cpu_op("aten::empty", ts + 40.0, 0.8)
        if rng.random() < 0.1:
            copy = self.cpu_op("aten::copy_", ts + 41.0, 8.0)
            self.launch(ts + 42.0, copy, "", rng.uniform(20, 60), memcpy=True)
        return ts + 50.0

    def backward(self, ts: float) -> float:
        """The autograd thread: an evaluate_function wrapper around a backward op and a fill kernel."""
        self.cpu_op("autograd::engine::evaluate_function: AddmmBackward0", ts, 25.0, tid=4243)
        self.cpu_op("AddmmBackward0", ts + 1.0, 22.0, tid=4243)
        mm = self.cpu_op("aten::mm", ts + 2.0, 18.0, tid=4243, dims="[[64, 4096], [4096, 4096]]")
        self.launch(ts + 4.0, mm, _KERNELS[3], self.rng.uniform(10, 30), tid=4243)
        return ts + 30.0


def write_realistic_trace(path: Path, n_events: int, seed: int = 0) -> int:
    """Write a kineto 2.x CUDA training trace of about ``n_events`` events, as a real one looks.

    Absolute-epoch timestamps (1.7e15 µs with nanosecond digits), two host threads
    (forward, autograd), nested ops (linear > t > transpose > as_strided), runtime
    calls, kernels with kineto's full argument set, memcpys, flow events, and
    ProfilerStep / gpu_user_annotation spans. Returns the number of events written.
    """
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, '
            '"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045477376,\n      "computeMajor": 9, '
            '"computeMinor": 0\n    }\n  ],\n  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},\n'
            '  "record_shapes": 1,\n  "traceEvents": [\n'
        )
        out.write(
            '  {\n    "name": "process_name", "ph": "M", "ts": 1712195495520835.103, "pid": 4242, "tid": 0,\n'
            '    "args": {\n      "name": "python"\n    }\n  },\n'
            '  {\n    "name": "process_name", "ph": "M", "ts": 1712195495520835.103, "pid": 0, "tid": 0,\n'
            '    "args": {\n      "name": "python"\n    }\n  },\n'
            '  {\n    "name": "process_labels", "ph": "M", "ts": 1712195495520835.103, "pid": 0, "tid": 0,\n'
            '    "args": {\n      "labels": "GPU 0"\n    }\n  },\n'
        )
        w = _Realistic(out, rng)
        w.written = 3
        ts = 1712195495520835.103
        step = 0
        while w.written < n_events:
            step += 1
            start = ts
            layers = 100
            w.cpu_op(f"ProfilerStep#{step}", start, layers * 50.0 + 40 * 30.0 + 20.0, cat="user_annotation")
            ts += 5.0
            for _ in range(layers):
                ts = w.layer(ts)
            for _ in range(40):
                ts = w.backward(ts)
            out.write(
                f'  {{\n    "ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#{step}", "pid": 0, '
                f'"tid": 7,\n    "ts": {start + 10:.3f}, "dur": {ts - start:.3f},\n'
                f'    "args": {{\n      "External id": {w.ext}\n    }}\n  }},\n'
            )
            w.written += 1
            ts = start + layers * 50.0 + 40 * 30.0 + 25.0
        out.write(
            '  {\n    "ph": "X", "cat": "Trace", "ts": 1712195495520835.103, "dur": 1.0,\n'
            '    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
            '    "args": {\n      "Op count": 0\n    }\n  }\n  ],\n'
            '  "traceName": "realistic.pt.trace.json"\n}\n'
        )
        w.written += 1
    return w.written


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
    raise SystemExit(main(["summarize", sys.argv[1], "--row-limit", "10"]))
    """
)

_SUMMARIZE_STDLIB = textwrap.dedent(
    """
    import sys
    import neuronprof.analysis._typed_reader as jsonstream
    jsonstream.msgspec = None  # the pure-Python reader
    from neuronprof.cli import main
    raise SystemExit(main(["summarize", sys.argv[1], "--row-limit", "10"]))
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


def measure(code: str, arg: str, env: dict[str, str]) -> tuple[float, float, int, int, str]:
    """Run ``python -c code arg``; return (wall s, CPU s, peak RSS bytes, exit status, output tail)."""
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
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, proc.returncode, output[-2000:]


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


_BASE = "json.load + per-name sums (baseline)"
_OURS = "neuronprof summarize"


def bench(trace: Path, n: int, env: dict[str, str], *, gzip_copy: bool) -> Optional[tuple[float, float, float]]:
    """Run every contender on ``trace``; print their figures; return (time ratio, CPU ratio, RSS / size)."""
    size = trace.stat().st_size
    print(f"\n== {trace.name}: {n:,} events, {_fmt_bytes(size)} uncompressed")
    runs = [
        (_BASE, _BASELINE, str(trace)),
        ("json.load, gc disabled", _BASELINE_NO_GC, str(trace)),
        (_OURS, _SUMMARIZE, str(trace)),
        ("neuronprof summarize, pure-Python reader", _SUMMARIZE_STDLIB, str(trace)),
    ]
    if gzip_copy:
        gz = trace.with_name(trace.name + ".gz")
        with open(trace, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        runs.append(("neuronprof summarize (.json.gz)", _SUMMARIZE, str(gz)))
    try:
        import hta  # noqa: F401

        runs.append(("HTA TraceAnalysis", _HTA, str(trace.parent)))
    except ImportError:
        pass
    results: dict[str, tuple[float, float, int]] = {}
    for label, code, arg in runs:
        seconds, cpu, rss, status, tail = measure(code, arg, env)
        if status != 0:
            print(f"{label}: exit status {status}\n{tail}")
            continue
        results[label] = (seconds, cpu, rss)
        print(
            f"{label:42s} wall {seconds:7.2f} s  CPU {cpu:7.2f} s  {n / seconds:11,.0f} events/s  "
            f"peak RSS {_fmt_bytes(rss):>10s}"
        )
    base, ours = results.get(_BASE), results.get(_OURS)
    if not base or not ours:
        return None
    print()
    for label, (seconds, cpu, rss) in results.items():
        print(
            f"{label:42s} wall x{seconds / base[0]:.2f}  CPU x{cpu / base[1]:.2f} of the baseline; "
            f"peak RSS x{rss / size:.2f} of the file size"
        )
    no_gc = results.get("json.load, gc disabled")
    if no_gc:
        print(
            f"{_OURS} against json.load with gc disabled: wall x{ours[0] / no_gc[0]:.2f}, CPU x{ours[1] / no_gc[1]:.2f}"
        )
    return ours[0] / base[0], ours[1] / base[1], ours[2] / size


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000, help="synthetic trace events (default 2,000,000)")
    parser.add_argument(
        "--realistic-events", type=int, default=720_000, help="realistic trace events (default 720,000; 0 skips it)"
    )
    parser.add_argument("--gzip", action="store_true", help="also time summarize on .json.gz copies")
    parser.add_argument("--keep", type=Path, default=None, help="write the traces here and keep them")
    args = parser.parse_args(argv)

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    tmp = Path(tempfile.mkdtemp(prefix="neuronprof-bench-")) if args.keep is None else args.keep
    tmp.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    try:
        import msgspec

        print(f"msgspec {msgspec.__version__} (the fast reader)")
    except ImportError:
        print("msgspec is not installed: summarize uses the pure-Python reader")
    try:
        figures = []
        if args.events > 0:
            synthetic = tmp / "synthetic" / "synthetic.pt.trace.json"
            synthetic.parent.mkdir(exist_ok=True)
            n = write_trace(synthetic, args.events)
            figures.append(("synthetic", bench(synthetic, n, env, gzip_copy=args.gzip)))
        if args.realistic_events > 0:
            real = tmp / "realistic" / "realistic.pt.trace.json"
            real.parent.mkdir(exist_ok=True)
            n = write_realistic_trace(real, args.realistic_events)
            figures.append(("realistic", bench(real, n, env, gzip_copy=args.gzip)))
        print("\n== targets: summarize wall time <= 1.0x the baseline's; peak RSS <= 1.5x the file size")
        ok = True
        for name, fig in figures:
            if fig is None:
                print(f"{name:10s} no figures (a run failed)")
                ok = False
                continue
            t, cpu, rss = fig
            met = t <= 1.0 and rss <= 1.5
            ok &= met
            print(
                f"{name:10s} time x{t:.2f} (CPU x{cpu:.2f}), peak RSS x{rss:.2f} of the file: "
                f"{'met' if met else 'MISSED'}"
            )
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
