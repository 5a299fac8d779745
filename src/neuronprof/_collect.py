"""The one module that reads torch.profiler objects and turns them into the model.

Everything downstream (tables, renderers, exports, comparisons) works on
[`Table`][neuronprof.Table] and files, never on profiler internals, so changes
in torch's private API are absorbed here.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from neuronprof.model import OpRow, Table, merge_rows

if TYPE_CHECKING:
    from neuronprof.analysis.insights import HostCategory, Timeline
    from neuronprof.backends.base import DeviceTime

__all__ = ["Cycle", "build_table", "build_timeline", "write_chrome_trace"]


@dataclasses.dataclass
class Cycle:
    """One finished profiling cycle (``wait``/``warmup``/``active``) of a session.

    Attributes:
        profile: The ``torch.autograd.profiler.profile`` holding the cycle's events.
            torch.profiler replaces it at the next cycle, so each one is kept here.
        backend_trace: A Chrome trace the backend saved itself (TorchNeuron's
            ``NeuronProfiler`` does), used when kineto's own save was consumed.
        cache: A private copy of kineto's trace, for torch builds without the
            repeatable Python exporter.
    """

    profile: Any
    backend_trace: Optional[Path] = None
    cache: Optional[Path] = None


def _device_attr(evt: Any, name: str) -> float:
    # torch >= 2.4 calls it "device"; older releases only had the "cuda" spelling.
    value = getattr(evt, name, None)
    if value is None:
        value = getattr(evt, name.replace("device", "cuda"), 0.0)
    return float(value or 0.0)


def _is_device_event(evt: Any) -> bool:
    device_type = getattr(evt, "device_type", None)
    return device_type is not None and str(device_type) not in ("DeviceType.CPU", "CPU")


def _shapes(evt: Any) -> Optional[tuple[tuple[int, ...], ...]]:
    raw = getattr(evt, "input_shapes", None)
    if not raw:
        return None
    out = []
    for shape in raw:
        # Tensor lists arrive nested; anything that is not a flat int list counts as no tensor.
        if isinstance(shape, (list, tuple)) and all(isinstance(d, int) for d in shape):
            out.append(tuple(shape))
        else:
            out.append(())
    return tuple(out)


def _rows_of_cycle(profile: Any, *, has_device: bool, record_shapes: bool) -> list[OpRow]:
    rows = []
    for evt in profile.key_averages(group_by_input_shape=record_shapes):
        on_device = _is_device_event(evt)
        flops = getattr(evt, "flops", 0) or 0
        cpu_mem = getattr(evt, "self_cpu_memory_usage", 0) or 0
        dev_mem = getattr(evt, "self_device_memory_usage", None)
        if dev_mem is None:
            dev_mem = getattr(evt, "self_cuda_memory_usage", 0) or 0
        rows.append(
            OpRow(
                name=str(evt.key),
                calls=int(evt.count),
                self_cpu_us=float(evt.self_cpu_time_total),
                cpu_total_us=float(evt.cpu_time_total),
                self_device_us=_device_attr(evt, "self_device_time_total") if has_device else None,
                device_total_us=_device_attr(evt, "device_time_total") if has_device else None,
                input_shapes=_shapes(evt) if record_shapes else None,
                flops=int(flops) if flops else None,
                self_cpu_memory_bytes=int(cpu_mem) if cpu_mem else None,
                self_device_memory_bytes=int(dev_mem) if dev_mem and has_device else None,
                on_device=on_device,
            )
        )
    return rows


# torch.compile's guard check is recorded beside the compiled region. It is
# bookkeeping, not an operator of the user's code: a compiled function counts
# as one op call, its compiled region.
_NOT_OPS = ("ProfilerStep", "TorchDynamo Cache Lookup")


def _step_stats(profile: Any) -> tuple[int, int]:
    """Return (ProfilerStep events, ops directly under them)."""
    steps = 0
    top = 0
    for evt in profile.function_events:
        # torch names step events "ProfilerStep#N" or, since 2.x, "ProfilerStep*".
        if evt.name.startswith("ProfilerStep"):
            steps += 1
            top += sum(1 for child in evt.cpu_children if not child.name.startswith(_NOT_OPS))
    return steps, top


def build_table(
    cycles: list[Cycle],
    *,
    backend: str,
    device_label: Optional[str],
    record_shapes: bool,
    rank: Optional[int] = None,
    notes: tuple[str, ...] = (),
    device_time: DeviceTime = "linked",
) -> Table:
    """Summarise every recorded cycle into one unsorted [`Table`][neuronprof.Table].

    ``device_time`` is the backend's expectation
    ([`Backend.device_time`][neuronprof.backends.Backend.device_time]): where no device
    time reaches torch.profiler (``"none"``), rows carry ``None``, not ``0.0``, so the
    table and ``compare()`` leave the device columns out instead of showing zeros.
    """
    has_device = device_label is not None and device_time != "none"
    groups = []
    steps = 0
    top = 0
    for cycle in cycles:
        groups.append(_rows_of_cycle(cycle.profile, has_device=has_device, record_shapes=record_shapes))
        s, t = _step_stats(cycle.profile)
        steps += s
        top += t
    return Table(
        rows=tuple(merge_rows(groups)),
        backend=backend,
        device_label=device_label,
        sort_by="none",
        steps=steps,
        top_level_calls=top if steps else None,
        notes=notes,
        rank=rank,
    )


def _python_export_supported(profile: Any) -> bool:
    try:
        return "use_python_export" in inspect.signature(profile.export_chrome_trace).parameters
    except (TypeError, ValueError):
        return False


def write_chrome_trace(cycle: Cycle, dest: Path, metadata: dict[str, Any]) -> None:
    """Write ``cycle``'s Chrome trace to ``dest`` (gzipped when it ends in ``.gz``).

    kineto's own save works once per cycle ("Trace is already saved" afterwards),
    so torch's streaming Python exporter is preferred: it can run any number of
    times and lets the real ``OSError`` of a failed write through. Older torch
    builds fall back to one kineto save into a private cache, copied from then on.

    Raises:
        OSError: The write failed (disk full, file too large, permission denied).
    """
    encoded = {k: json.dumps(v) for k, v in metadata.items()}
    profile = cycle.profile
    if _python_export_supported(profile):
        profile.export_chrome_trace(str(dest), metadata=encoded, use_python_export=True)
        return
    source = _cached_kineto_trace(cycle)
    if source is None:
        raise RuntimeError(
            "this cycle's trace was already saved by another tool and no copy of it was found; "
            "upgrade torch (>= 2.13) for repeatable exports"
        )
    from neuronprof.export import copy_trace

    copy_trace(source, dest)


def _cached_kineto_trace(cycle: Cycle) -> Optional[Path]:
    if cycle.cache is not None and cycle.cache.exists():
        return cycle.cache
    cache_dir = Path(tempfile.mkdtemp(prefix="neuronprof-"))
    path = cache_dir / "trace.json"
    try:
        cycle.profile.export_chrome_trace(str(path))
    except RuntimeError as exc:
        shutil.rmtree(cache_dir, ignore_errors=True)
        if "already saved" not in str(exc):
            raise
        return cycle.backend_trace if cycle.backend_trace and cycle.backend_trace.exists() else None
    cycle.cache = path
    return path


# -- the timeline the findings engine reads (neuronprof.analysis.insights) -------------------

_DEVICE_ACTIVITIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def build_timeline(cycles: list[Cycle], *, backend: str, device_label: Optional[str]) -> Timeline:
    """Turn the recorded cycles' events into the findings engine's ``Timeline``.

    Reads kineto's own event list (``profile.kineto_results.events()``): integer
    nanosecond times, threads, correlation ids and recorded input shapes and types,
    without writing a trace file. Builds without kineto results fall back to
    ``function_events`` (microsecond times, no device links).
    """
    from neuronprof.analysis.insights import DeviceEvent, HostEvent, Timeline

    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    notes: list[str] = []
    for index, cycle in enumerate(cycles):
        results = getattr(cycle.profile, "kineto_results", None)
        events = results.events() if results is not None and hasattr(results, "events") else None
        if events is None:
            notes.append("this torch build gives no kineto events; device work is not linked to ops")
            for evt in cycle.profile.function_events:
                start = round(evt.time_range.start * 1000)
                end = round(evt.time_range.end * 1000)
                if _is_device_event(evt):
                    device.append(DeviceEvent(evt.name, start, end))
                    continue
                kind: HostCategory = "step" if evt.name.startswith("ProfilerStep#") else "op"
                host.append(HostEvent(evt.name, start, end, thread=f"{index}:{evt.thread}", category=kind))
            continue
        for evt in events:
            name = evt.name()
            activity = str(evt.activity_type())
            start = int(evt.start_ns())
            end = start + int(evt.duration_ns())
            if str(evt.device_type()) not in ("DeviceType.CPU", "CPU") and activity in _DEVICE_ACTIVITIES:
                device.append(
                    DeviceEvent(
                        name,
                        start,
                        end,
                        _DEVICE_ACTIVITIES[activity],  # type: ignore[arg-type]
                        ext_id=int(evt.linked_correlation_id()) or None,
                        correlation=int(evt.correlation_id()) or None,
                    )
                )
                continue
            category: HostCategory
            if name.startswith("ProfilerStep#"):
                category = "step"
            elif activity == "cpu_op":
                category = "op"
            elif activity == "python_function" or evt.is_python_function():
                category = "python"
            elif activity.endswith("_runtime") or activity.endswith("_driver"):
                category = "runtime"
            elif activity == "user_annotation":
                category = "annotation"
            else:
                category = "other"
            shapes = evt.shapes() if category == "op" else None
            dtypes = evt.dtypes() if category == "op" else None
            host.append(
                HostEvent(
                    name,
                    start,
                    end,
                    thread=f"{index}:{evt.start_thread_id()}",
                    category=category,
                    ext_id=(int(evt.linked_correlation_id()) if category == "runtime" else int(evt.correlation_id()))
                    or None,
                    correlation=int(evt.correlation_id()) or None if category == "runtime" else None,
                    input_shapes=tuple(
                        tuple(s) if isinstance(s, list) and all(isinstance(d, int) for d in s) else () for s in shapes
                    )
                    if shapes
                    else None,
                    input_dtypes=tuple(str(t) for t in dtypes) if dtypes else None,
                )
            )
    return Timeline(tuple(host), tuple(device), backend, device_label, "session", tuple(dict.fromkeys(notes)))
