"""The one module that reads torch.profiler objects: a cycle's kineto events become its event table.

Everything downstream (tables, findings, roofline, report) reads the
[`EventTable`][neuronprof.analysis.trace.EventTable] a trace file's reader also
writes, never profiler internals, so changes in torch's private API are absorbed here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, cast

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


# Instants, not spans (a trace writes them with "ph": "i"): torch.profiler's allocation records,
# kept apart from the spans (``EventTable.memory``), as a trace file's reader keeps them.
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
    device links). With ``profile_memory=True``, torch's memory per op is taken too, and its
    allocation records (``[memory]`` events) are kept in the table's ``memory``, as a trace
    file's reader keeps them (``_feed_memory``).

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
    memory: list[Any] = []
    try:
        _feed_events(agg, events, memory=memory)
    except _CallBeforeItsOp:
        agg.restart()  # the same events again, in the same order, with every op's thread known first
        memory.clear()
        _feed_events(agg, events, _op_threads(events, _activity_reader(events[0])), memory=memory)
    if memory:
        _feed_memory(agg, profile, memory)


def _feed_memory(agg: Any, profile: Any, records: list[Any]) -> None:
    """Keep torch's allocation records (``[memory]`` events) as the trace writes them, with the allocator's totals.

    kineto's events carry each record's bytes, device and thread, not the allocator's
    totals that the trace writes beside them ("Total Allocated", "Total Reserved"):
    those are read from torch's event tree (``experimental_event_tree()``, the records
    torch's own memory timeline reads), matched by start time and bytes. A live
    ``[OutOfMemory]`` record has no totals there: they are kept as -1 (the exported trace has them).
    """
    totals = _allocation_totals(profile)
    missing = 0
    for evt in records:
        name, ts, nbytes = evt.name(), int(evt.start_ns()), int(evt.nbytes())
        found = totals.get((ts, nbytes))
        if name == "[OutOfMemory]":
            allocated = reserved = -1
        elif found:
            allocated, reserved = found.popleft()
        else:
            missing += 1
            continue
        device = (_device_type_number(evt.device_type()), int(evt.device_index()))
        agg.add_memory(name, device, ts, nbytes, allocated, reserved, ("host", int(evt.start_thread_id())))
    if missing:
        agg.sums.notes.append(
            f"{missing:,} of torch's [memory] record(s) are not in its event tree, which holds the allocator's "
            "totals: left out of memory over time"
        )


def _allocation_totals(profile: Any) -> dict[tuple[int, int], deque[tuple[int, int]]]:
    """torch's allocation records in its event tree: (total allocated, total reserved) by (start ns, bytes)."""
    import torch

    allocation = torch._C._profiler._EventType.Allocation
    out: dict[tuple[int, int], deque[tuple[int, int]]] = {}
    try:
        stack = list(profile.kineto_results.experimental_event_tree())
    except (AttributeError, RuntimeError):  # a torch without the tree: no totals, said by the caller
        return out
    while stack:
        e = stack.pop()
        if e.tag == allocation:
            f = e.extra_fields
            out.setdefault((int(e.start_time_ns), int(f.alloc_size)), deque()).append(
                (int(f.total_allocated), int(f.total_reserved))
            )
        stack.extend(e.children)
    return out


def _device_type_number(device_type: Any) -> int:
    """c10's number of a kineto event's device type (``DeviceType.CPU`` is 0), as a trace's "Device Type" has it."""
    try:
        return int(device_type)
    except TypeError:
        return int(device_type.value)


def _op_threads(events: list[Any], activity: Callable[[Any], str]) -> dict[int, int]:
    """Each op's thread by its correlation id: where its runtime calls are put (a pass of its own)."""
    return {
        int(evt.correlation_id()): int(evt.start_thread_id())
        for evt in events
        if vocab.event_kind(evt.name(), activity(evt)) not in (vocab.K_RUNTIME, vocab.K_DEVICE)
    }


class _CallBeforeItsOp(Exception):
    """A runtime call came before its op in kineto's list: the cycle is read again, ops first."""


def _feed_events(
    agg: Any, events: list[Any], op_thread: Optional[dict[int, int]] = None, *, memory: Optional[list[Any]] = None
) -> None:
    """Put kineto's events into ``agg``, in their order, in one pass over them.

    A runtime call sits on the thread of the op that made it, as in the trace (kineto may
    give it another thread id; torch's own table moves it the same way). The ops come
    before their calls in kineto's list, so one pass learns each op's thread as it goes
    (``op_thread`` None); should a call name an op that comes later, ``_CallBeforeItsOp``
    is raised, and the caller reads the cycle again with every op's thread known first
    (``_op_threads``).

    Each event costs only the kineto calls its kind needs (recorded inputs for ops,
    links for runtime calls and device work); a ``(name, activity)``'s kind is worked
    out once. torch's allocation records (``[memory]`` events) are put in ``memory``, for ``_feed_memory``.
    """
    from neuronprof.analysis.trace import encoder

    first = events[0] if events else None
    activity = _activity_reader(first)
    hidden = first is not None and hasattr(first, "is_hidden_event")
    encode = encoder()
    incremental = op_thread is None
    threads: dict[int, int] = {} if op_thread is None else op_thread
    guessed: set[int] = set()  # ops named by a call before their own event was met (incremental only)
    kinds: dict[tuple[str, str], int] = {}
    texts: dict[str, bytes] = {}
    put = agg.put
    k_op, k_runtime, k_device = vocab.K_OP, vocab.K_RUNTIME, vocab.K_DEVICE
    for evt in events:
        name = evt.name()
        cat = activity(evt)
        kind = kinds.get((name, cat))
        if kind is None:
            kind = kinds[name, cat] = vocab.event_kind(name, cat)
        left_out = name in _INSTANTS or cat == _INSTANT_ACTIVITY or (hidden and evt.is_hidden_event())
        if kind in (k_device, k_runtime):
            if left_out:
                if memory is not None and name in _INSTANTS:  # a device's record, as torch before 2.12 names it
                    memory.append(evt)
                continue
            corr, linked = int(evt.correlation_id()), int(evt.linked_correlation_id())
            if kind == k_device:
                thread: tuple[Any, Any] = (f"device {evt.device_index()}", int(evt.device_resource_id()))
            else:
                op = threads.get(linked)
                if op is None:
                    op = int(evt.start_thread_id())
                    if incremental:
                        guessed.add(linked)
                thread = ("host", op)
            # As kineto writes them: runtime calls and device work carry a "correlation" and
            # their op's id as "External id"; an op's "External id" is its own correlation id.
            put(
                name,
                cat,
                int(evt.start_ns()),
                int(evt.duration_ns()),
                thread,
                None,
                None,
                None,
                corr,
                linked or -1,
                None,
            )
            continue
        corr, tid = int(evt.correlation_id()), int(evt.start_thread_id())
        if incremental:
            threads[corr] = tid
        if left_out:
            if memory is not None and name in _INSTANTS:
                memory.append(evt)
            continue
        dims = types = concrete = None
        flops = None
        if kind == k_op:
            # kineto's lists as they are (shapes: lists of ints; dtypes: text), encoded as JSON.
            shapes = evt.shapes()
            dims = encode(shapes) if shapes else None
            dtypes = evt.dtypes()
            if dtypes:
                types = encode(dtypes)
                values = evt.concrete_inputs()
                if values:
                    concrete = _concrete_bytes(values, texts, encode)
            flops = int(evt.flops() or 0) or None
        put(
            name,
            cat,
            int(evt.start_ns()),
            int(evt.duration_ns()),
            ("host", tid),
            dims,
            types,
            concrete,
            -1,
            corr,
            flops,
        )
    if guessed and not guessed.isdisjoint(threads):
        raise _CallBeforeItsOp


def _activity_reader(first: Any) -> Callable[[Any], str]:
    """``activity_of``, with the question of which torch this is settled once for a list of events."""
    get = getattr(type(first), "activity_type", None)
    if get is not None and isinstance(first.activity_type(), str):
        return cast("Callable[[Any], str]", get)  # the method itself: one call an event
    if get is not None:
        return lambda evt: str(evt.activity_type())
    return activity_of


def _concrete_bytes(values: list[Any], texts: dict[str, bytes], encode: Callable[[Any], bytes]) -> bytes:
    """``Concrete Inputs`` as kineto writes them (text, ``""`` for a tensor), as JSON; once per list of values.

    The values' ``repr`` is the key of the text made of them: exact (``1``, ``1.0``,
    ``True``, ``nan`` and ``None`` are all told apart, where a tuple or JSON would merge some).
    """
    key = repr(values)
    found = texts.get(key)
    if found is None:
        found = texts[key] = encode([_concrete_text(v) for v in values])
    return found


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
