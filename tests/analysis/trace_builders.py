"""Builders of trace files for the analysis tests, hand-made and from real torch.profiler runs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Optional


def write_trace(path: Path, events: list[dict[str, Any]], *, gz: Optional[bool] = None, **top: Any) -> Path:
    """Write a Chrome trace (object format) holding ``events``; gzip it when the name ends in .gz."""
    data = {"schemaVersion": 1, **top, "traceEvents": events}
    text = json.dumps(data, indent=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz or (gz is None and path.name.endswith(".gz")):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def op(name: str, ts: float, dur: float, *, cat: str = "cpu_op", pid: Any = 1, tid: Any = 1, **args: Any) -> dict:
    """One complete ("X") event."""
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = {k.replace("_", " "): v for k, v in args.items()}
    return ev


def cuda_trace_events() -> list[dict[str, Any]]:
    """A small kineto-style CUDA trace: two steps, linear -> addmm -> kernel, plus a memcpy.

    Step 1 links kernels by "External id"; step 2's kernel has no External id and
    is linked through the runtime call's "correlation" (as some backends write it).
    """
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 100, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 0,
            "dur": 1000,
        },
    ]
    for step, base in ((1, 0.0), (2, 200.0)):
        ext = step * 10
        ev += [
            op(f"ProfilerStep#{step}", base + 1, 150, cat="user_annotation", pid=100, tid=100, External_id=ext),
            op(
                "aten::linear",
                base + 10,
                100,
                pid=100,
                tid=100,
                External_id=ext + 1,
                Input_Dims=[[64, 128], [256, 128], [256]],
                Input_type=["c10::BFloat16"] * 3,
            ),
            op(
                "aten::addmm",
                base + 20,
                80,
                pid=100,
                tid=100,
                External_id=ext + 2,
                Input_Dims=[[256], [64, 128], [128, 256], [], []],
                Input_type=["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"],
            ),
            op(
                "cudaLaunchKernel",
                base + 30,
                20,
                cat="cuda_runtime",
                pid=100,
                tid=100,
                External_id=ext + 2,
                correlation=1000 + step,
            ),
            op("aten::copy_", base + 120, 20, pid=100, tid=100, External_id=ext + 3),
            op(
                "cudaMemcpyAsync",
                base + 125,
                10,
                cat="cuda_runtime",
                pid=100,
                tid=100,
                External_id=ext + 3,
                correlation=2000 + step,
            ),
            op(f"ProfilerStep#{step}", base + 1, 150, cat="gpu_user_annotation", pid=0, tid=7),
        ]
        kernel_args: dict[str, Any] = {"device": 0, "stream": 7, "correlation": 1000 + step}
        if step == 1:
            kernel_args["External id"] = ext + 2
        else:
            kernel_args["External id"] = 0
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "sm90_gemm_bf16",
                "pid": 0,
                "tid": 7,
                "ts": base + 60,
                "dur": 40,
                "args": kernel_args,
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": "Memcpy DtoH (Device -> Pinned)",
                "pid": 0,
                "tid": 7,
                "ts": base + 130,
                "dur": 5,
                "args": {"device": 0, "stream": 7, "correlation": 2000 + step, "External id": ext + 3},
            }
        )
        ev.append(
            {"ph": "s", "id": 1000 + step, "pid": 100, "tid": 100, "ts": base + 30, "cat": "ac2g", "name": "ac2g"}
        )
        ev.append(
            {
                "ph": "f",
                "id": 1000 + step,
                "pid": 0,
                "tid": 7,
                "ts": base + 60,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
    return ev


class TorchTraces:
    """Traces exported by real torch.profiler runs, with torch's own key_averages() beside them."""

    def __init__(self, root: Path) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        self.workload = root / "workload.pt.trace.json"
        self.rmsnorm = root / "rmsnorm.pt.trace.json.gz"
        self.averages: list[tuple[str, int, float, float]] = []
        self.shape_averages: list[tuple[str, str, int, float]] = []

        def workload(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            z = torch.nn.functional.linear(y, w).relu()
            s = torch.softmax(z, -1).sum()
            return torch.cat([x, w]).abs().sum() + s

        def save_workload(p: Any) -> None:
            self.averages = [(e.key, e.count, e.self_cpu_time_total, e.cpu_time_total) for e in p.key_averages()]
            self.shape_averages = [
                (e.key, str(e.input_shapes), e.count, e.self_cpu_time_total)
                for e in p.key_averages(group_by_input_shape=True)
            ]
            p.export_chrome_trace(str(self.workload))

        x = torch.randn(64, 64)
        w = torch.randn(64, 64, requires_grad=True)
        with profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule(wait=0, warmup=1, active=2),
            on_trace_ready=save_workload,
        ) as p:
            for _ in range(3):
                with torch.profiler.record_function("block"):
                    workload(x, w).backward()
                p.step()

        # Naive RMSNorm on a 4096x4096 float tensor: pow, mean, add, rsqrt, mul, mul.
        big = torch.randn(4096, 4096)
        weight = torch.randn(4096)

        def rmsnorm(t: torch.Tensor) -> torch.Tensor:
            return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

        with profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule(wait=0, warmup=1, active=2),
            on_trace_ready=lambda p: p.export_chrome_trace(str(self.rmsnorm)),
        ) as p:
            for _ in range(3):
                rmsnorm(big)
                p.step()
