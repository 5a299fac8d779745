"""The per-key sums of one load: compact per-thread events, operator keys, and the sums turned into a Trace."""

from __future__ import annotations

import operator
from array import array
from collections.abc import Sequence
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof._vocabulary import event_kind
from neuronprof.analysis.trace._model import StepSample, Trace, TraceOp
from neuronprof.analysis.trace._rules import _all_str, _decode_input, _device_label, _left_out_note


class EventColumns:
    """The events of one (pid, tid) timeline in five columns of equal length (integer ns, key index, ids)."""

    __slots__ = ("ts", "dur", "kid", "corr", "ext")

    def __init__(self) -> None:
        self.ts = array("q")  # start, integer nanoseconds
        self.dur = array("q")  # duration, integer nanoseconds
        self.kid = array("i")  # index of the event's key
        self.corr = array("q")  # correlation id, -1 when none (0 is a valid id)
        self.ext = array("q")  # External id, -1 when none (0 is a valid id)


class EventKeys:
    """The event keys of one load, shared by its files: ``(name, cat, dims, types, concrete)``, with each one's kind."""

    def __init__(self) -> None:
        self.index: dict[tuple[Any, ...], int] = {}
        self.keys: list[tuple[Any, ...]] = []
        self.names: list[str] = []  # display name (every ProfilerStep#N is "ProfilerStep*")
        self.raw_names: list[str] = []  # the name as the trace writes it
        self.kind: list[int] = []
        self.asynchronous: list[bool] = []  # an async span (``vocab.is_async_span``)
        self.not_row: list[bool] = []  # no row of its own (``vocab.is_row``)
        self.twins: dict[int, int] = {}  # host key -> its twin on a device process (``device_twin``)

    def add(self, key: tuple[Any, ...]) -> int:
        kid = len(self.keys)
        self.index[key] = kid
        self.keys.append(key)
        name, cat = key[0], key[1]
        kind = event_kind(name, cat)
        self.names.append(vocab.row_name(name, kind))
        self.raw_names.append(name)
        self.kind.append(kind)
        self.asynchronous.append(vocab.is_async_span(name, kind))
        self.not_row.append(not vocab.is_row(name))
        return kid

    def device_twin(self, kid: int) -> int:
        """The key of a key's events on a device process: the same key, a device row apart from the host's."""
        twin = self.twins.get(kid)
        if twin is None:
            twin = self.twins[kid] = len(self.keys)
            self.keys.append(self.keys[kid])
            self.names.append(self.names[kid])
            self.raw_names.append(self.raw_names[kid])
            self.kind.append(vocab.K_DEVICE)
            self.asynchronous.append(False)
            self.not_row.append(self.not_row[kid])
        return twin


def shared_keys(apart: Sequence[EventKeys]) -> tuple[EventKeys, list[list[int]]]:
    """One set of keys for the keys of files read apart, and each file's map from its key indices to the set's.

    The keys come in the order one set shared by the files would have given them:
    every file's keys first, in file order, then the device twins the sums made
    (``device_twin``), so that the rows, which keep key order between equals,
    come out as one shared set gives them.
    """
    if len(apart) == 1:
        return apart[0], [list(range(len(apart[0].keys)))]
    shared = EventKeys()
    index_get, maps = shared.index.get, []
    for keys in apart:
        twins = set(keys.twins.values())
        new = [-1] * len(keys.keys)
        for kid, key in enumerate(keys.keys):
            if kid not in twins:
                found = index_get(key)
                new[kid] = shared.add(key) if found is None else found
        maps.append(new)
    for keys, new in zip(apart, maps):
        for kid, twin in sorted(keys.twins.items(), key=operator.itemgetter(1)):  # in the order they were made
            new[twin] = shared.device_twin(new[kid])
    return shared, maps


class _Sums:
    """Per-key sums (integer ns) and what a file (or several) says about its run.

    A field indexed by key (a list per key, a dict or set of keys) is moved in ``rekey`` too.
    """

    def __init__(self, n: int = 0) -> None:
        self.calls = [0] * n
        self.cpu_self = [0] * n
        self.cpu_total = [0] * n
        self.dev_self = [0] * n
        self.dev_total = [0] * n
        self.on_device = [False] * n
        self.flops: dict[int, int] = {}
        self.steps = 0
        self.top_level = 0
        self.events = 0
        self.has_device = False
        self.linked = False
        self.unlinked_ns = 0  # device time that no host op could be found for (when others were linked)
        self.evidence: list[str] = []  # text the device label is read from
        self.device_name: Optional[str] = None
        self.skipped: dict[str, int] = {}
        self.notes: list[str] = []
        self.files: list[str] = []
        self.rank: Optional[int] = None
        self.async_ns = 0  # duration of async spans (collectives): communication, not self time
        self.async_keys: set[int] = set()
        # Per recorded step, in order: [duration ns, device ns linked from its ops,
        # {key: self CPU ns}, {key: device ns}, index of its file (run), start ns, ns in
        # collectives (``vocab.collective_wait_ns``)]: the samples a verdict compares.
        self.samples: list[list[Any]] = []

    def grow(self, n: int) -> None:
        extra = n - len(self.calls)
        if extra > 0:
            for lst in (self.calls, self.cpu_self, self.cpu_total, self.dev_self, self.dev_total):
                lst.extend([0] * extra)
            self.on_device.extend([False] * extra)

    def rekey(self, new: Sequence[int], n: int) -> None:
        """Move the sums to other key indices: key ``k`` becomes ``new[k]`` of ``n`` keys (``new`` one-to-one)."""
        for name, empty in (
            ("calls", 0),
            ("cpu_self", 0),
            ("cpu_total", 0),
            ("dev_self", 0),
            ("dev_total", 0),
            ("on_device", False),
        ):
            moved = [empty] * n
            for k, value in enumerate(getattr(self, name)):
                moved[new[k]] = value
            setattr(self, name, moved)
        self.flops = {new[k]: v for k, v in self.flops.items()}
        self.async_keys = {new[k] for k in self.async_keys}
        for sample in self.samples:
            sample[2] = {new[k]: ns for k, ns in sample[2].items()}
            sample[3] = {new[k]: ns for k, ns in sample[3].items()}

    def add(self, other: _Sums) -> None:
        self.grow(len(other.calls))
        other.grow(len(self.calls))
        for mine, theirs in (
            (self.calls, other.calls),
            (self.cpu_self, other.cpu_self),
            (self.cpu_total, other.cpu_total),
            (self.dev_self, other.dev_self),
            (self.dev_total, other.dev_total),
        ):
            mine[:] = map(operator.add, mine, theirs)
        self.on_device[:] = map(operator.or_, self.on_device, other.on_device)
        for k, v in other.flops.items():
            self.flops[k] = self.flops.get(k, 0) + v
        self.steps += other.steps
        self.top_level += other.top_level
        self.events += other.events
        self.has_device |= other.has_device
        self.linked |= other.linked
        self.unlinked_ns += other.unlinked_ns
        self.async_ns += other.async_ns
        self.async_keys |= other.async_keys
        offset = len(self.files)  # the other's runs come after this one's
        self.samples += [[*sample[:4], sample[4] + offset, *sample[5:]] for sample in other.samples]
        self.evidence += other.evidence
        self.device_name = self.device_name or other.device_name
        for what, n in other.skipped.items():
            self.skipped[what] = self.skipped.get(what, 0) + n
        self.notes += other.notes
        self.files += other.files


def _build(
    sums: _Sums, keys: EventKeys, files: Sequence[str], *, rank: Optional[int] = None, tables: tuple[Any, ...] = ()
) -> Trace:
    """Turn per-key sums into a Trace: keys with the same display name and decoded inputs are merged.

    ``tables`` are the event tables the sums were made from; the Trace keeps them for
    the read-outs that need events (findings, step windows).
    """
    sums.grow(len(keys.keys))
    label = _device_label(sums.evidence) if sums.has_device else None
    merged: dict[tuple[Any, ...], list[Any]] = {}
    decoded: dict[Optional[bytes], Any] = {None: None}
    for kid, key in enumerate(keys.keys):
        calls = sums.calls[kid]
        if calls == 0:
            continue
        _name, _cat, dims, types, concrete = key
        for raw in (dims, types, concrete):
            if raw not in decoded:
                decoded[raw] = _decode_input(raw)
        name = keys.names[kid]
        dev = sums.on_device[kid]
        mkey = (name, dev, decoded[dims], decoded[types], decoded[concrete])
        flops = sums.flops.get(kid)
        values = [
            calls,
            sums.cpu_self[kid],
            sums.cpu_total[kid],
            sums.dev_self[kid],
            sums.dev_total[kid],
            flops,
        ]
        prev = merged.get(mkey)
        if prev is None:
            merged[mkey] = values
        else:
            for i in range(5):
                prev[i] += values[i]
            if flops is not None:
                prev[5] = flops + (prev[5] or 0)
    ops: list[TraceOp] = []
    for (name, dev, dims, types, concrete), (calls, cpu_self, cpu_total, d_self, d_total, flops) in merged.items():
        has_dev = dev or sums.linked
        ops.append(
            TraceOp(
                name=name,
                on_device=dev,
                calls=calls,
                self_cpu_us=0.0 if dev else cpu_self / 1000,
                cpu_total_us=0.0 if dev else cpu_total / 1000,
                self_device_us=d_self / 1000 if has_dev else None,
                device_total_us=d_total / 1000 if has_dev else None,
                input_dims=dims if isinstance(dims, tuple) else None,
                input_dtypes=types if _all_str(types) else None,
                concrete_inputs=concrete if _all_str(concrete) else None,
                flops=flops,
            )
        )
    notes = list(sums.notes)
    if len(files) > 1:
        notes.append(f"summed over {len(files)} trace files")
    left_out = _left_out_note(sums.skipped)
    if left_out:
        notes.append(left_out)
    if sums.has_device and not sums.linked and any(not o.on_device for o in ops):
        notes.append("device events carry no link to host ops; host ops show no device time")
    if sums.unlinked_ns:
        notes.append(
            f"{sums.unlinked_ns / 1000:,.3f} µs of device time is tied to no host op in the trace "
            "(its launch call is missing); it shows on the device rows only"
        )
    return Trace(
        ops=tuple(ops),
        files=tuple(files),
        backend=label.lower() if label else "cpu",
        device_label=label,
        device_name=sums.device_name,
        steps=sums.steps,
        top_level_calls=sums.top_level if sums.steps else None,
        events=sums.events,
        notes=tuple(notes),
        rank=rank,
        communication_us=sums.async_ns / 1000 if sums.async_keys else None,
        samples=tuple(_step_sample(s, keys, sums.has_device) for s in sums.samples),
        event_tables=tables,
    )


def _step_sample(sample: list[Any], keys: EventKeys, has_device: bool) -> StepSample:
    """One step's figures, per op name (keys of one name, e.g. of several shapes, summed)."""
    wall, device, cpu_by_key, dev_by_key, run, _start, waited = sample
    ops: dict[str, list[float]] = {}
    for k, ns in cpu_by_key.items():
        ops.setdefault(keys.names[k], [0.0, 0.0])[0] += ns / 1000
    for k, ns in dev_by_key.items():
        ops.setdefault(keys.names[k], [0.0, 0.0])[1] += ns / 1000
    return StepSample(
        wall_us=wall / 1000,
        device_us=device / 1000 if has_device else None,
        ops=tuple((name, cpu, dev if has_device else None) for name, (cpu, dev) in ops.items()),
        run=run,
        collective_wait_us=waited / 1000,
    )
