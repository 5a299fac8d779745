"""The engine's input: a small torch-free timeline of host and device events.

Both feeders build one: ``Session.insights()`` from the live profiler's events and
[`timeline_from_trace`][neuronprof.analysis.insights.timeline_from_trace] from a trace file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

HostCategory = Literal["op", "python", "runtime", "annotation", "step", "other"]
DeviceCategory = Literal["kernel", "memcpy", "memset"]


# == the input: a small torch-free timeline ============================================


@dataclass(frozen=True, slots=True)  # a trace holds millions: no __dict__ apiece
class HostEvent:
    """One host-side event of a profile: an op, a runtime call, an annotation, a step.

    Attributes:
        name: ``aten::add``, ``cudaLaunchKernel``, ``ProfilerStep#3``...
        start_ns: Start, in nanoseconds (any origin, the same for every event).
        end_ns: End, in nanoseconds.
        thread: The thread it ran on (nesting is rebuilt per thread).
        category: ``"op"`` (an operator), ``"python"`` (a Python frame),
            ``"runtime"`` (a runtime or driver call, e.g. a kernel launch),
            ``"annotation"`` (a ``record_function`` range), ``"step"``
            (``ProfilerStep#N``) or ``"other"``.
        ext_id: The op's id that device events point back to (kineto's External id).
        correlation: A runtime call's correlation id, shared with the device work it started.
        input_shapes: Input shapes when recorded (``record_shapes=True``); ``()`` for a scalar.
        input_dtypes: Input types when recorded (``"float"``, ``"double"``, ``"Scalar"``...).
    """

    name: str
    start_ns: int
    end_ns: int
    thread: str = "0"
    category: HostCategory = "op"
    ext_id: Optional[int] = None
    correlation: Optional[int] = None
    input_shapes: Optional[tuple[tuple[int, ...], ...]] = None
    input_dtypes: Optional[tuple[str, ...]] = None


@dataclass(frozen=True, slots=True)
class DeviceEvent:
    """One piece of device work: a kernel, a memory copy or a memset.

    Attributes:
        name: Kernel name, ``Memcpy HtoD (Pageable -> Device)``...
        start_ns: Start, in nanoseconds, on the host events' clock.
        end_ns: End, in nanoseconds.
        category: ``"kernel"``, ``"memcpy"`` or ``"memset"``.
        ext_id: The id of the host op that launched it (kineto's External id), if known.
        correlation: The correlation id of the runtime call that launched it, if known.
    """

    name: str
    start_ns: int
    end_ns: int
    category: DeviceCategory = "kernel"
    ext_id: Optional[int] = None
    correlation: Optional[int] = None


@dataclass(frozen=True)
class Timeline:
    """The events of the recorded steps, as both feeders hand them to the engine.

    Attributes:
        host: Host events, in any order.
        device: Device events, in any order.
        backend: ``"neuron"``, ``"cuda"``, ``"cpu"``...
        device_label: ``"NEURON"``, ``"CUDA"``...; ``None`` for a CPU-only profile.
        source: Where the events came from (a file name, or ``"session"``).
        notes: Remarks from the feeder (events it could not read...).
        record_shapes: Whether input shapes and dtypes were recorded
            (``record_shapes=True``); ``None`` when the trace does not say.
        native_dtypes: The low-precision dtypes the host's CPU computes natively
            (``("torch.bfloat16",)``), as torch's oneDNN reported them on the machine
            that recorded the run; ``()`` for none, ``None`` when unknown (a trace
            from another producer).
        rank: The distributed rank the events are of, when known.
        ranks: One timeline per rank, indexed by rank, when the source holds several
            ranks (a folder of ``rank-N`` traces); ``host`` and ``device`` then hold
            every rank's events together, which only a per-rank reading makes sense of
            ([`analyze_ranks`][neuronprof.analysis.insights.analyze_ranks]).
    """

    host: tuple[HostEvent, ...]
    device: tuple[DeviceEvent, ...] = ()
    backend: str = "cpu"
    device_label: Optional[str] = None
    source: str = ""
    notes: tuple[str, ...] = ()
    record_shapes: Optional[bool] = None
    native_dtypes: Optional[tuple[str, ...]] = None
    rank: Optional[int] = None
    ranks: tuple[Timeline, ...] = ()
