"""The one module that reads torch.profiler objects: a cycle's kineto events become its event table.

Everything downstream (tables, findings, roofline, report) reads the
[`EventTable`][neuronprof.analysis.trace.EventTable] a trace file's reader also
writes, never profiler internals, so changes in torch's private API are absorbed here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab

if TYPE_CHECKING:
    from neuronprof.analysis.trace import EventTable

__all__ = ["Cycle", "native_dtypes", "read_cycle"]


@dataclasses.dataclass
class Cycle:
    """One finished profiling cycle (``wait``/``warmup``/``active``) of a session.

    Attributes:
        index: Position of the cycle in the session, from 0.
        profile: The ``torch.autograd.profiler.profile`` holding the cycle's events;
            None once the session dropped them (``keep_cycles``).
            torch.profiler replaces it at the next cycle, so each one is kept here.
        backend_trace: A Chrome trace the backend saved itself (TorchNeuron's
            ``NeuronProfiler`` does), used when kineto's own save was consumed.
        save: Takes kineto's own save of the cycle into ``cache``; set when the cycle
            ends, run (once) by the first export that needs the file
            (``_cycle_files.take_save``), so a cycle nobody exports is never written.
        cache: kineto's own save of the cycle, once taken (read-only); every export
            is a copy of it (a reflink where the file system has them), never a
            second name of it.
        cache_stamp: ``(inode, size, mtime_ns, ctime_ns)`` of the cache when it was
            saved, to notice that anything changed it before an export.
        closed_at_exit: The cycle was ended by the session's exit, so its last
            step may have been opened by ``step()`` and never run.
        events: The cycle's events as an event table, converted once from kineto's
            (``read_cycle``); kept after the profile is dropped.
        read: Returns ``events``, converting them first if need be, as the session
            converts its cycles (its event keys, its backend's ``cycle_notes``): set
            when the cycle ends, for exports that read the events (stacks).
        notes: The backend's remarks on the cycle's events, made when they were converted.
        memory: Self host/device memory per ``(name, input shapes)``, torch's own
            figures (``profile_memory=True``), taken with the events.
    """

    index: int
    profile: Any
    backend_trace: Optional[Path] = None
    save: Optional[Callable[[Cycle], None]] = None
    cache: Optional[Path] = None
    cache_stamp: Optional[tuple[int, ...]] = None
    closed_at_exit: bool = False
    events: Optional[EventTable] = None
    read: Optional[Callable[[Cycle], EventTable]] = None
    notes: tuple[str, ...] = ()
    memory: Mapping[tuple[str, Any], tuple[int, int]] = dataclasses.field(default_factory=dict)


def activity_of(evt: Any) -> str:
    """A kineto event's activity type (``"cpu_op"``, ``"kernel"``...); before torch 2.12 (``gpu_check``) inferred."""
    get = getattr(evt, "activity_type", None)
    if get is not None:
        return str(get())
    name = evt.name()
    if str(evt.device_type()) != "DeviceType.CPU":
        return {"Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}.get(name[:6], "kernel")
    if getattr(evt, "is_user_annotation", lambda: False)():
        return "user_annotation"
    return "cuda_runtime" if name.startswith(("cu", "hip")) and not name.startswith("cudnn") else "cpu_op"


def _is_device_event(evt: Any) -> bool:
    device_type = getattr(evt, "device_type", None)
    if callable(device_type):
        device_type = device_type()
    return device_type is not None and str(device_type) not in ("DeviceType.CPU", "CPU")


def _kineto_events(profile: Any) -> Optional[list[Any]]:
    """kineto's own event list of a profile (what its Chrome trace holds); None on builds without it."""
    results = getattr(profile, "kineto_results", None)
    events = getattr(results, "events", None)
    return None if events is None else list(events())


# Instants, not spans (a trace writes them with "ph": "i"): torch.profiler's allocation records.
_INSTANTS = frozenset({"[memory]", "[OutOfMemory]"})
_INSTANT_ACTIVITY = "cpu_instant_event"


def read_cycle(cycle: Cycle, keys: Any, metadata: Mapping[str, Any]) -> EventTable:
    """Convert a cycle's kineto events into its event table, once (later calls return the same table).

    Reads kineto's own event list (``profile.kineto_results.events()``): the
    events, integer-ns times, threads, correlation ids and recorded inputs kineto
    writes into the cycle's Chrome trace, through the columns a trace file's reader
    fills, so the live read-outs and those of the export agree by construction
    (FLOP counts excepted: live they are torch's own, with ``with_flops=True``; a
    saved trace that holds none gets the roofline's formulas instead).
    Builds without kineto results fall back to ``function_events`` (µs times, no
    device links). With ``profile_memory=True``, torch's memory per op is taken too.

    Args:
        cycle: A cycle whose profile is still held (or whose events were read already).
        keys: The session's event keys (shared by its cycles: the first table's), or
            None for the first cycle read.
        metadata: The header keys its export would have (the session's ``neuronprof``
            metadata); how the cycle ended is added.
    """
    if cycle.events is not None:
        return cycle.events
    from neuronprof.analysis.trace import EventAggregator

    profile = cycle.profile
    agg = EventAggregator("<session>", keys=keys)
    _feed(agg, profile)
    if getattr(profile, "profile_memory", False):
        cycle.memory = _memory_by_row(profile)
    own = {**metadata.get("neuronprof", {}), vocab.STOPPED_IN_LAST_STEP: cycle.closed_at_exit}
    cycle.events = agg.events_table({**metadata, "neuronprof": own})
    return cycle.events


def _text_list(values: Any) -> Optional[list[Any]]:
    if not values:
        return None
    return [list(v) if isinstance(v, (list, tuple)) else v for v in values]


def _feed(agg: Any, profile: Any) -> None:
    """Hand one cycle's events to an ``EventAggregator`` as its trace would hold them."""
    events = _kineto_events(profile)
    if events is None:
        for evt in profile.function_events:
            on_device = _is_device_event(evt)
            cat = "kernel" if on_device else "cpu_op"
            where = ("device", evt.device_index) if on_device else ("host", evt.thread)
            start = round(evt.time_range.start * 1000)
            agg.add(evt.name, cat, start, round(evt.time_range.end * 1000) - start, where)
        return
    # A runtime call sits on the thread of the op that made it, as in the trace (kineto may
    # give it another thread id; torch's own table moves it the same way).
    op_thread = {
        int(evt.correlation_id()): int(evt.start_thread_id())
        for evt in events
        if vocab.event_kind(evt.name(), activity_of(evt)) not in (vocab.K_RUNTIME, vocab.K_DEVICE)
    }
    for evt in events:
        name = evt.name()
        cat = activity_of(evt)
        if name in _INSTANTS or cat == _INSTANT_ACTIVITY or getattr(evt, "is_hidden_event", lambda: False)():
            continue
        kind = vocab.event_kind(name, cat)
        linked_kind = kind in (vocab.K_RUNTIME, vocab.K_DEVICE)
        if kind == vocab.K_DEVICE:
            thread: tuple[Any, Any] = (f"device {evt.device_index()}", int(evt.device_resource_id()))
        elif kind == vocab.K_RUNTIME:
            tid = int(evt.start_thread_id())
            thread = ("host", op_thread.get(int(evt.linked_correlation_id()), tid))
        else:
            thread = ("host", int(evt.start_thread_id()))
        corr, linked = int(evt.correlation_id()), int(evt.linked_correlation_id())
        is_op = kind == vocab.K_OP
        dtypes = evt.dtypes() if is_op else None
        concrete = evt.concrete_inputs() if is_op and dtypes else None
        agg.add(
            name,
            cat,
            int(evt.start_ns()),
            int(evt.duration_ns()),
            thread,
            input_dims=_text_list(evt.shapes()) if is_op else None,
            input_types=[str(t) for t in dtypes] if dtypes else None,
            # As kineto writes them: runtime calls and device work carry a "correlation" and
            # their op's id as "External id"; an op's "External id" is its own correlation id.
            correlation=corr if linked_kind else -1,
            external_id=(linked or -1) if linked_kind else corr,
            flops=int(evt.flops() or 0) or None,
            # As kineto writes "Concrete Inputs": text, "" for a tensor or None.
            concrete_inputs=[_concrete_text(v) for v in concrete] if concrete else None,
        )


def _memory_by_row(profile: Any) -> dict[tuple[str, Any], tuple[int, int]]:
    """Self host/device memory per (name, input shapes): torch's own figures (``key_averages()``).

    A trace has none per op. Shapes are ``None`` when they were not recorded.
    """
    out: dict[tuple[str, Any], tuple[int, int]] = {}
    for evt in profile.key_averages(group_by_input_shape=bool(getattr(profile, "record_shapes", False))):
        cpu_mem = int(getattr(evt, "self_cpu_memory_usage", 0) or 0)
        dev_mem = getattr(evt, "self_device_memory_usage", None)
        if dev_mem is None:
            dev_mem = getattr(evt, "self_cuda_memory_usage", 0)
        out[(str(evt.key), _shapes(evt))] = (cpu_mem, int(dev_mem or 0))
    return out


def _shapes(evt: Any) -> Optional[tuple[tuple[int, ...], ...]]:
    """torch's ``input_shapes`` of a ``key_averages()`` row, as the trace reader's rows have them."""
    from neuronprof.analysis.trace._rules import _flat_shapes, _freeze_any

    raw = getattr(evt, "input_shapes", None)
    return _flat_shapes(_freeze_any(list(raw))) if raw else None


def _concrete_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_concrete_text(v) for v in value) + "]"
    return str(value)


# -- what the findings need to know of this machine ------------------------------------------

@functools.cache  # a property of the machine: asked once per process
def native_dtypes() -> tuple[str, ...]:
    """The low-precision dtypes this machine's CPU computes natively, as torch's oneDNN reports them.

    ``torch.bfloat16`` needs AVX512-BF16 or AMX (x86) or the BF16 extension (Arm);
    ``torch.float16`` needs AVX512-FP16 or AMX-FP16. Without them, CPU kernels in
    those dtypes convert through float32. ``()`` when torch cannot tell.
    """
    import torch

    checks = (
        ("torch.bfloat16", "_is_mkldnn_bf16_supported"),
        ("torch.float16", "_is_mkldnn_fp16_supported"),
    )
    out = []
    for dtype, name in checks:
        try:
            if bool(getattr(torch.ops.mkldnn, name)()):
                out.append(dtype)
        except (AttributeError, RuntimeError):  # an older torch or a build without oneDNN: not known
            continue
    return tuple(out)
