"""The one event table: what both readers (a trace file, kineto's live events) write, and everything reads.

A trace file's reader (``_reader``) and the live session's kineto events
(``EventAggregator``) fill the same columns; once filled, an
[`EventTable`][neuronprof.analysis.trace.EventTable] is frozen and read by pure
functions: the per-operator sums (``_aggregate.sum_events``), the findings'
timeline (``analysis.insights``), the roofline's inputs and Neuron's step windows.
Nothing reads a file or kineto's events a second time.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Optional

from neuronprof.analysis.trace._rules import _K_STEP, _id, derived_lanes, process_roles
from neuronprof.analysis.trace._sums import EventColumns, EventKeys, _Sums

__all__ = ["EventTable", "IdSet", "MemoryColumns", "step_windows", "time_base"]

MEMORY_EVENTS = frozenset({"[memory]", "[OutOfMemory]"})
"""torch.profiler's allocation records (``profile_memory=True``), instants kept in ``EventTable.memory``."""

_INT64 = 1 << 63
_STEP_NUMBER = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True, eq=False)
class EventTable:
    """The events of one source (a trace file, or one cycle of a live session), in columns.

    Per timeline (``(pid, tid)``), five columns of equal length: start and duration
    (integer ns), the key of the event (an index into ``keys``: name, category and
    recorded inputs, with the vocabulary's kind), its ``correlation`` and its
    ``External id`` (-1 when none). Tables of one load share their ``keys``.
    Compared and hashed by identity: it is read, never changed.

    Attributes:
        source: The file read, or ``"<session>"`` for a live session's events.
        keys: The event keys (shared by the tables of one load).
        threads: The columns per timeline.
        procs: Process names and labels per pid (the trace's ``M`` events).
        thread_names: Lane names per ``(pid, tid)``.
        runtime_corr: Correlation ids of runtime/driver calls (a frozenset, or an
            ``IdSet`` from the column reader).
        metadata: The trace's header keys (kineto's metadata; a live session's are
            what its export writes).
        events: How many events were read.
        skipped: Events left out by kind (instants, async spans...), for a note.
        flops: FLOPs per key (``with_flops=True``).
        evidence: Text the device label is read from (device types in events' args).
        notes: What the reader said of the source (mended names, unpaired ``B``/``E``).
        file_notes: Whether notes name the source (a live session's events have no file).
        sequence_ids: The spans that carry Neuron Runtime's ``nrt_sequence_id`` (TorchNeuron's
            framework trace), as ``(id, (pid, tid), start_ns, duration_ns, key)``, in file order.
        memory: torch's allocation records (``profile_memory=True``) per device
            ``(Device Type, Device Id)`` (c10's device type number; id -1 for the host), in time
            order: see ``MemoryColumns``. Empty when
            memory was not recorded.
    """

    source: str
    keys: EventKeys = field(repr=False)
    threads: Mapping[tuple[Any, Any], EventColumns] = field(repr=False)
    procs: Mapping[Any, tuple[str, ...]] = field(default_factory=dict, repr=False)
    thread_names: Mapping[tuple[Any, Any], str] = field(default_factory=dict, repr=False)
    runtime_corr: Set[int] = field(default=frozenset(), repr=False)
    metadata: Mapping[str, Any] = field(default_factory=dict, repr=False)
    events: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict, repr=False)
    flops: Mapping[int, int] = field(default_factory=dict, repr=False)
    evidence: tuple[str, ...] = field(default=(), repr=False)
    notes: tuple[str, ...] = ()
    file_notes: bool = True
    sequence_ids: tuple[tuple[Any, tuple[Any, Any], int, int, int], ...] = field(default=(), repr=False)
    memory: Mapping[tuple[int, int], MemoryColumns] = field(default_factory=dict, repr=False)

    def timelines(self) -> Iterator[tuple[tuple[Any, Any], EventColumns, bool]]:
        """The timelines that hold events, each with whether it is on a device process.

        Processes of derived views (torch_npu's "Overlap Analysis") and lanes that
        copy or contain another lane's events (the XLA viewer's "XLA Modules") are
        left out, as the sums leave them out.
        """
        analysis_pids, device_pids = process_roles(self.procs)
        views = derived_lanes(self.thread_names, device_pids)
        for where, th in self.threads.items():
            pid = where[0]
            if pid in analysis_pids or where in views:
                continue
            yield where, th, pid in device_pids

    def rekeyed(self, keys: EventKeys, new: Sequence[int]) -> EventTable:
        """The same events under other keys: key ``k`` becomes ``new[k]`` of ``keys`` (tables read apart, merged)."""
        if keys is self.keys:
            return self
        same = list(new) == list(range(len(new)))  # the first file's keys often keep their indices
        threads: dict[tuple[Any, Any], EventColumns] = {}
        for where, th in self.threads.items():
            moved = threads[where] = EventColumns()
            moved.ts, moved.dur, moved.corr, moved.ext = th.ts, th.dur, th.corr, th.ext
            moved.kid = th.kid if same else array("i", map(new.__getitem__, th.kid))
        flops = {new[k]: v for k, v in self.flops.items()}
        carried = tuple((seq, where, t, d, new[k]) for seq, where, t, d, k in self.sequence_ids)
        return replace(
            self, keys=keys, threads=MappingProxyType(threads), flops=MappingProxyType(flops), sequence_ids=carried
        )

    def let_go_of_events(self) -> None:
        """Empty every timeline's five columns, the only change a table takes.

        For a command's own trace whose events were read into columns once
        (``read_of(trace, release=True)``): the events are then held once, not twice. The
        keys, sums, metadata and allocation records stay; the trace is marked so that its
        events are never read again from the emptied columns.
        """
        for th in self.threads.values():
            th.ts, th.dur, th.kid, th.corr, th.ext = (array(code) for code in "qqiqq")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled to cross from a worker process: read-only mappings do not pickle, so they travel as dicts.
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return _unpickled, ({k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in values.items()},)


def _unpickled(values: dict[str, Any]) -> EventTable:
    wrapped: dict[str, Any] = {k: MappingProxyType(v) if type(v) is dict else v for k, v in values.items()}
    return EventTable(**wrapped)


class MemoryColumns:
    """torch's allocation records of one device (``[memory]`` events), in columns of equal length.

    Each record is one allocation (``nbytes`` > 0) or free (< 0) as torch's allocator
    reported it, with the allocator's own totals just after it: ``allocated`` (bytes in
    live tensors) and ``reserved`` (bytes the caching allocator holds; 0 on the host).
    ``lane`` indexes ``lanes``: the timeline (``(pid, tid)`` of the event table) of the
    host thread that allocated. ``out_of_memory`` holds torch's ``[OutOfMemory]``
    records (an allocation that failed) as ``(ts, nbytes, allocated, reserved, lane)``; a live
    session's have -1 for the totals (torch's Python API does not give them; its export has them).
    """

    __slots__ = ("ts", "nbytes", "allocated", "reserved", "lane", "lanes", "out_of_memory")

    def __init__(self) -> None:
        self.ts = array("q")  # integer ns, on the event table's clock
        self.nbytes = array("q")  # torch's "Bytes": > 0 allocated, < 0 freed
        self.allocated = array("q")  # torch's "Total Allocated" after the record
        self.reserved = array("q")  # torch's "Total Reserved" after the record
        self.lane = array("i")
        self.lanes: list[tuple[Any, Any]] = []
        self.out_of_memory: list[tuple[int, int, int, int, int]] = []

    def __len__(self) -> int:
        return len(self.ts)

    def _lane(self, where: tuple[Any, Any]) -> int:
        lanes = self.lanes
        if lanes and lanes[-1] == where:  # most records come from one thread
            return len(lanes) - 1
        try:
            return lanes.index(where)
        except ValueError:
            lanes.append(where)
            return len(lanes) - 1

    def _sorted(self) -> MemoryColumns:
        """The records in time order (ties keep their order): the readers add them in file order."""
        ts = self.ts
        if all(a <= b for a, b in zip(ts, ts[1:])):
            return self
        order = sorted(range(len(ts)), key=ts.__getitem__)
        out = MemoryColumns()
        for name in ("ts", "nbytes", "allocated", "reserved", "lane"):
            column = getattr(self, name)
            setattr(out, name, array(column.typecode, map(column.__getitem__, order)))
        out.lanes, out.out_of_memory = self.lanes, sorted(self.out_of_memory, key=lambda r: r[0])
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemoryColumns):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # compared by value, changed while a reader fills it


class _Filling:
    """The columns of one source as a reader fills them; ``freeze`` makes the table."""

    def __init__(self, path: str, keys: EventKeys) -> None:
        self.path = path
        self.keys = keys
        self.threads: dict[Any, EventColumns] = {}
        self.procs: dict[Any, list[str]] = {}
        self.runtime_corr: set[int] = set()
        self.thread_names: dict[Any, str] = {}
        # What the reader learns besides the columns, kept in the sums' own fields.
        self.sums = _Sums()
        self.file_notes = True
        self.sequence_ids: list[tuple[Any, tuple[Any, Any], int, int, int]] = []
        self.memory: dict[tuple[int, int], MemoryColumns] = {}

    def add_memory(
        self,
        name: str,
        device: tuple[int, int],
        ts: int,
        nbytes: int,
        allocated: int,
        reserved: int,
        where: tuple[Any, Any],
    ) -> None:
        """Keep one of torch's allocation records (``name`` one of ``MEMORY_EVENTS``) of ``device``."""
        columns = self.memory.get(device)
        if columns is None:
            columns = self.memory[device] = MemoryColumns()
        lane = columns._lane(where)
        if name == "[OutOfMemory]":
            columns.out_of_memory.append((ts, nbytes, allocated, reserved, lane))
            return
        columns.ts.append(ts)
        columns.nbytes.append(nbytes)
        columns.allocated.append(allocated)
        columns.reserved.append(reserved)
        columns.lane.append(lane)

    def keep_memory(
        self, name: str, pid: Any, tid: Any, ts: Optional[int], device_type: Any, device_id: Any, *values: Any
    ) -> bool:
        """Keep an instant named one of ``MEMORY_EVENTS`` as an allocation record; False (kept nowhere) if not one.

        It is one when its time was read (``ts``), its lane is hashable, and its ``Device
        Type``, ``Device Id``, ``Bytes``, ``Total Allocated`` and ``Total Reserved``
        (``values``) are integers, as torch writes them; any other instant is left out
        and counted as before. Every reader asks this, so they keep the same records.
        """
        nbytes, allocated, reserved = values
        if (
            ts is None
            or type(device_type) is not int
            or type(device_id) is not int
            or type(nbytes) is not int
            or type(allocated) is not int
            or type(reserved) is not int
            or not (-_INT64 < nbytes < _INT64 and -_INT64 < allocated < _INT64 and -_INT64 < reserved < _INT64)
            or not (-_INT64 < device_type < _INT64 and -_INT64 < device_id < _INT64)
        ):
            return False
        if type(pid) is not int or type(tid) is not int:
            try:
                hash((pid, tid))
            except TypeError:
                return False
        self.add_memory(name, (device_type, device_id), ts, nbytes, allocated, reserved, (pid, tid))
        return True

    def _runtime_ids(self) -> Set[int]:
        return frozenset(self.runtime_corr)

    def freeze(self, metadata: Mapping[str, Any]) -> EventTable:
        """The filled columns as an ``EventTable`` (the filling is not used again)."""
        sums = self.sums
        return EventTable(
            source=self.path,
            keys=self.keys,
            threads=MappingProxyType(self.threads),
            procs=MappingProxyType({pid: tuple(names) for pid, names in self.procs.items()}),
            thread_names=MappingProxyType(self.thread_names),
            runtime_corr=self._runtime_ids(),
            metadata=MappingProxyType(dict(metadata)),
            events=sums.events,
            skipped=MappingProxyType(dict(sums.skipped)),
            flops=MappingProxyType(dict(sums.flops)),
            evidence=tuple(sums.evidence),
            notes=tuple(sums.notes),
            file_notes=self.file_notes,
            sequence_ids=tuple(self.sequence_ids),
            memory=MappingProxyType({device: m._sorted() for device, m in sorted(self.memory.items())}),
        )


class IdSet(Set[int]):
    """A read-only set of ids held as a sorted int64 numpy array.

    A frozenset of a million ids holds some 60 MB of Python ints and hash table;
    this holds 8 MB. Membership is a binary search; it compares equal to any set of
    the same ints.
    """

    __slots__ = ("ids",)

    def __init__(self, ids: Any) -> None:
        self.ids = ids  # sorted, without repeats

    def __contains__(self, value: object) -> bool:
        import numpy as np

        ids = self.ids
        if type(value) is not int or not len(ids) or not ids[0] <= value <= ids[-1]:
            return False
        return bool(ids[np.searchsorted(ids, value)] == value)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids.tolist())

    def __len__(self) -> int:
        return len(self.ids)

    __hash__ = Set._hash


def time_base(table: EventTable) -> int:
    """The header's ``baseTimeNanoseconds`` (ns), which kineto writes times from; 0 when none (a live session's)."""
    raw = table.metadata.get("baseTimeNanoseconds")
    return int(raw) if isinstance(raw, float) and math.isfinite(raw) else max(_id(raw), 0)


def step_windows(table: EventTable) -> list[tuple[int, int, int]]:
    """The ``ProfilerStep#N`` spans of a table as ``(N, start_ns, end_ns)``, in start order.

    Times are as the trace writes them (ns from its origin) plus its header's
    ``baseTimeNanoseconds`` (kineto writes ``ts`` from it; older traces from the
    epoch), so they are on the host's epoch-ns clock that Neuron's records use.
    Steps on device processes (the device-side copy of a step annotation) are left out.
    """
    base = time_base(table)
    kind, raw_names = table.keys.kind, table.keys.raw_names
    out = []
    for _where, th, on_device_process in table.timelines():
        if on_device_process:
            continue
        for t, d, k in zip(th.ts, th.dur, th.kid):
            if kind[k] == _K_STEP:
                m = _STEP_NUMBER.match(raw_names[k])
                if m:
                    out.append((int(m.group(1)), base + t, base + t + d))
    out.sort(key=lambda s: s[1])
    return out
