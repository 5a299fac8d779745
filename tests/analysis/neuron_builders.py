"""Build Neuron profile JSON in the documented formats, for the reader's tests.

These follow what AWS documents for ``neuron-explorer view`` output (see
``src/neuronprof/analysis/neuron/_summary.py`` and ``_system.py``); they are test inputs, not
output captured on Trainium.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

BASE_NS = 1_790_000_000_000_000_000


def exec_record(
    start_ns: int,
    duration_ns: int,
    *,
    neff: str = "neff_a",
    exec_id: Optional[int] = 1,
    core: int = 0,
    lnc: int = 0,
    model_id: int = 7,
    pid: str = "100",
    **extra: Any,
) -> dict[str, Any]:
    """One ``nc_exec_running`` record of ``system_profile.json``."""
    rec: dict[str, Any] = {
        "name": "nc_exec_running",
        "timestamp": start_ns,
        "duration": duration_ns,
        "exec_id": exec_id,
        "model_id": model_id,
        "model_name": neff,
        "nc_idx": lnc,
        "lnc_idx": lnc,
        "device_core_idx": core,
        "process_id": pid,
    }
    if exec_id is None:
        del rec["exec_id"]
    rec.update(extra)
    return rec


def write_system_profile(path: Path, records: list[dict[str, Any]], **top: Any) -> Path:
    """Write ``{"trace_event": records, **top}``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"trace_event": records, **top}))
    return path


def summary_metrics(total_s: float = 1e-3, **over: Any) -> dict[str, Any]:
    """One profile's flat metrics, in seconds and 0-1 fractions."""
    m: dict[str, Any] = {"total_time": total_s}
    for i, engine in enumerate(("tensor", "vector", "scalar", "gpsimd", "sync")):
        active = total_s * (0.5 - 0.1 * i)
        m[f"{engine}_engine_active_time"] = active
        m[f"{engine}_engine_active_time_percent"] = active / total_s
    m["dma_active_time"] = total_s * 0.8
    m["dma_active_time_percent"] = 0.8
    m.update(
        hbm_read_bytes=2_000_000,
        hbm_write_bytes=1_000_000,
        hardware_flops=3.0e9,
        model_flops=2.5e9,
        mfu_estimated_percent=0.25,
        mbu_estimated_percent=0.5,
    )
    m.update(over)
    return m


def framework_trace(path: Path, steps: list[tuple[int, int, int]], base_ns: int = BASE_NS - 10**12) -> Path:
    """A torch.profiler-style trace with ``ProfilerStep#N`` spans given in epoch ns."""
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{n}",
            "pid": 1,
            "tid": 1,
            "ts": (start - base_ns) / 1000.0,
            "dur": (end - start) / 1000.0,
        }
        for n, start, end in steps
    ]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": base_ns}))
    return path
