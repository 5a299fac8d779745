"""The rules about where a step's time goes besides the ops' own work.

The input pipeline, host time between ops, waiting in collectives, low-precision
work on a CPU that emulates it, and ops that fell back to the CPU inside a device step.

A few lines over 500, kept in one module on purpose: the four rules read a step the same way
(its window, its top-level ops, the DataLoader and runtime rows beside them), and the host's
gaps are found two ways side by side, every step at once on arrays and, for times that no
int64 array holds, step by step on lists (``_StepTime.all_host_gaps`` and ``host_gaps``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.insights._dtypes import _torch_dtype
from neuronprof.analysis.insights._findings import (
    COMMUNICATION_SHARE,
    GAPS_SHOWN,
    HOST_OVERHEAD_MIN_OPS,
    HOST_OVERHEAD_SHARE,
    LOW_PRECISION_SHARE,
    PIPELINE_SHARE,
    Evidence,
    Finding,
)
from neuronprof.analysis.insights._forest import KINDS
from neuronprof.analysis.insights._intervals import (
    _array,
    _grouped_beside,
    _grouped_gaps,
    _LargestGaps,
    _length,
    _Neighbours,
    _positions,
    _shifts,
    _Spans,
    _subtract,
    _sums,
    _union,
    _zip,
)
from neuronprof.analysis.insights._tally import (
    _per_step,
    _share,
    _steady,
    _Tally,
)
from neuronprof.analysis.insights._tree import (
    _DATALOADER,
    WHOLE_RECORDING,
    _in_order,
    _NameMemo,
    _Node,
    _Profile,
    _Step,
)

Spans = list[tuple[int, int]]


def _collective_kernel(name: str) -> bool:
    return vocab.is_collective(name, vocab.K_DEVICE)


def _collectives() -> _NameMemo:
    """``_collective`` of a node, by its ``(name, category)``, decided once per distinct pair."""
    return _NameMemo(lambda key: vocab.is_collective(key[0], KINDS.get(key[1], vocab.K_OTHER)))


_VIEW_NAMES = (
    "view _unsafe_view as_strided select slice narrow transpose t permute expand reshape unsqueeze squeeze "
    "alias detach flatten unflatten split chunk unbind"
)
_VIEWS = frozenset("aten::" + n for n in _VIEW_NAMES.split(" "))
"""Ops that make a view and compute nothing: no low-precision work in them."""
LOW_PRECISION = ("torch.bfloat16", "torch.float16")


def _recording(node: _Node) -> str:
    """Which recording (trace file or profiling cycle) an event belongs to: the feeders' thread prefix."""
    return node.thread.split(":", 1)[0]


class _StepTime:
    """Per step: the collectives' time, the part with no compute beside it, and the host's gaps between ops."""

    def __init__(self, p: _Profile) -> None:
        f = self.forest = p.forest
        self.p = p
        self.collective = is_collective = _collectives()
        # Most profiles hold no collective: each distinct (name, category) and kernel name is asked once.
        self.collective_keys = f.key_mask(lambda name, category: is_collective[name, category])
        self.any_collective = bool(self.collective_keys[f.key].any())
        collectives: defaultdict[str, Spans] = defaultdict(list)
        for n in p.find_all(self.collective_keys) if self.any_collective else ():
            collectives[_recording(n)].append((n.start_ns, n.end_ns))
        self._host_collectives = {k: _Spans(_union(v)) for k, v in collectives.items()}
        self.kernel = kernel = _NameMemo(_collective_kernel)
        self.kernels = f.dkey_mask(lambda name, _category: kernel[name])[f.dkey]
        self.any_kernel = bool(self.kernels.any())
        self._device_collectives = _Spans(_union(_zip(f.dstart[self.kernels], f.dend[self.kernels])))
        # Without collective kernels, the device computes whenever it is busy: the profile's own union.
        self._device_compute = (
            _Spans(_union(_zip(f.dstart[~self.kernels], f.dend[~self.kernels]))) if self._device_collectives else p.busy
        )
        self._dataloader = _NameMemo(lambda name: bool(_DATALOADER.search(name)))
        self._outside_ops = f.key_mask(lambda name, category: category == "runtime" or self._dataloader[name])

    def ops(self, st: _Step) -> Spans:
        """The spans of the step's top-level ops, less the collectives."""
        return self.p.top_spans(st, self.collective_keys if self.any_collective else None)

    def communication(self, st: _Step, ops: Spans) -> tuple[Spans, Spans, Spans]:
        """(all collective time, the part with no compute beside it, host waits) in the step, as spans.

        ``ops``: the step's ``ops()``, the host's compute.
        """
        host_end = st.node.end_ns
        mine = self._host_collectives.get(_recording(st.node))
        host = mine.clip(st.start, host_end) if mine is not None else []
        device = self._device_collectives.clip(st.start, st.end)
        if not host and not device:
            return [], [], []  # no collective in the step (the spans below would all be empty)
        compute = _union(ops)
        device_compute = self._device_compute.clip(st.start, st.end)
        host_exposed = _subtract(_subtract(host, compute), device_compute)
        device_exposed = _subtract(device, device_compute)
        return _union([*host, *device]), _union([*host_exposed, *device_exposed]), host_exposed

    def host_gaps(self, st: _Step, ops: Spans, waits: Spans) -> Spans:
        """The step's host time outside every op, the DataLoader, runtime calls and collective waits."""
        if not len(st.top_rows):
            return []  # no op: nothing to be between
        covered = list(ops)
        covered += self.p.spans(self.p.rows(st, self._outside_ops))
        covered.extend(waits)
        if st.node.name == WHOLE_RECORDING:
            # No step marks where the loop starts and ends: only the time between the first and last op.
            window = (min(st.top_column(self.forest.start)), max(st.top_column(self.forest.end)))
        else:
            window = (st.start, st.node.end_ns)
        return _subtract([window], _union(covered))

    def all_host_gaps(self, waits: dict[int, Spans]) -> Optional[tuple[Any, Any, Any, Any, Any]]:
        """Every step's ``host_gaps`` at once (the windows may overlap), with the ops on either side of each gap.

        ``waits``: the collective waits of the steps that have some, by position. Returns each
        gap's step (its position), start and end, and the rows of the top-level ops before and
        after it (-1: the step's edge), by step, then time; None where the times do not fit
        int64 arrays (``_shifts``) or a span ends before it starts: then ``host_gaps`` step by step.
        """
        import numpy as np

        f, steps = self.forest, self.p.steps
        counts = np.array([len(st.top_rows) for st in steps], np.int64)
        top = np.concatenate([np.asarray(st.top_rows, np.int64) for st in steps])
        top_step = np.repeat(np.arange(len(steps)), counts)
        keep = ~self.collective_keys[f.key[top]] if self.any_collective else slice(None)
        outside, outside_step = self._rows_of_steps(self._outside_ops)
        lo, hi = _array([st.start for st in steps]), _array([st.node.end_ns for st in steps])
        waited = [(i, s, e) for i, spans in waits.items() for s, e in spans]
        wait_step, wait_starts, wait_ends = (_array([w[j] for w in waited]) for j in range(3))
        top_starts, top_ends = f.start[top], f.end[top]
        last = np.cumsum(counts)
        for i, st in enumerate(steps):
            if not counts[i]:
                hi[i] = lo[i]  # no op: nothing to be between (an empty window has no gap)
            elif st.node.name == WHOLE_RECORDING:
                # No step marks where the loop starts and ends: only the time between the first and last op.
                mine = slice(int(last[i] - counts[i]), int(last[i]))
                lo[i], hi[i] = top_starts[mine].min(), top_ends[mine].max()
        group = np.concatenate((top_step[keep], outside_step, wait_step))
        starts = np.concatenate((top_starts[keep], f.start[outside], wait_starts))
        ends = np.concatenate((top_ends[keep], f.end[outside], wait_ends))
        try:
            shift = _shifts(len(steps), starts, ends, lo, hi, top_starts, top_ends)
        except OverflowError:
            return None
        if (ends < starts).any():
            return None
        step, gap_starts, gap_ends = _grouped_gaps(group, starts, ends, lo, hi, shift)
        before, after = _grouped_beside(top_step, top_starts, top_ends, step, gap_starts, gap_ends, shift)
        return step, gap_starts, gap_ends, np.where(before >= 0, top[before], -1), np.where(after >= 0, top[after], -1)

    def _rows_of_steps(self, mask: Any) -> tuple[Any, Any]:
        """``p.rows(st, mask)`` of every step, in one array, and the position of the step of each row."""
        import numpy as np

        f, steps = self.forest, self.p.steps
        ranged = [i for i, st in enumerate(steps) if st._range is not None]
        passing = np.flatnonzero(mask[f.key]) if ranged else np.empty(0, np.int64)
        bounds = np.array([steps[i]._range for i in ranged], np.int64).reshape(-1, 2)
        first, stop = np.searchsorted(passing, bounds[:, 0]), np.searchsorted(passing, bounds[:, 1])
        rows, owners = [passing[_positions(first, stop - first)]], [np.repeat(np.array(ranged, np.int64), stop - first)]
        for i, st in enumerate(steps):
            if st._range is None:
                rows.append(self.p.rows(st, mask))
                owners.append(np.full(len(rows[-1]), i, np.int64))
        return np.concatenate(rows), np.concatenate(owners)


_EDGES = ("the step's start", "the step's end")


def _step_time(p: _Profile) -> list[Finding]:
    """``communication_wait`` and ``host_overhead``: step time outside the ops' own work.

    * ``communication_wait``: the collectives' time in each step (the vocabulary's
      ``is_collective``, as the straggler's rule counts it: c10d's async spans
      ``gloo:*``/``nccl:*`` on their own threads, the ``c10d::*`` ops issuing and
      waiting for them, collective device kernels ``ncclDevKernel*``), less the part
      that runs beside compute (the step's other top-level ops on the host, other
      kernels on the device; a host collective beside device compute is not a wait
      either): the time the rank waits for the others. Fires when that exposed time
      is at least ``COMMUNICATION_SHARE`` (10 %) of the mean step. Time at stake: the
      exposed time per step.
    * ``host_overhead``: the host time of each step (``ProfilerStep#N``'s span) spent
      outside every top-level op, DataLoader range, runtime call and collective wait:
      Python code between ops (the model's own code, ``generate()``'s loop, logging).
      Fires when it is at least ``HOST_OVERHEAD_SHARE`` (60 %) of the mean step and
      the step calls at least ``HOST_OVERHEAD_MIN_OPS`` (10) ops (with fewer, the
      gaps are the loop's and the profiler's own cost per step); the
      evidence lists the ``GAPS_SHOWN`` largest gaps with the ops on either side. Time
      at stake: the gaps per step, an upper bound (compiling removes most of it, not
      all).
    """
    if not p.n:
        return []
    import numpy as np

    times = _StepTime(p)
    f = p.forest
    labels = [w[4] for w in f.whats] + list(_EDGES)  # the names beside a gap: an op's, or the step's edge
    edges = len(f.whats)
    comm_ns = 0
    exposed_ns = [0] * p.n
    waits: dict[int, Spans] = {}
    names: Counter[str] = Counter()
    largest = _LargestGaps()
    if times.any_collective or times._device_collectives:
        for i, st in enumerate(p.steps):
            comm, exposed, waits[i] = times.communication(st, times.ops(st))
            comm_ns += _length(comm)
            exposed_ns[i] = _length(exposed)
    at_once = times.all_host_gaps({i: w for i, w in waits.items() if w})
    if at_once is not None:
        step, lo, hi, before, after = at_once
        gap_ns = _sums(step, hi - lo, p.n).tolist()
        # The ops on either side of each gap, as indices into ``labels`` (the step's edges last).
        before = np.where(before >= 0, f.key[np.maximum(before, 0)], edges)
        after = np.where(after >= 0, f.key[np.maximum(after, 0)], edges + 1)
        largest.add_all(hi - lo, before, after, labels, [st.node.name for st in p.steps], step)
    else:  # times the arrays cannot hold (too far apart, beyond int64): step by step, on Python ints
        gap_ns = []
        for i, st in enumerate(p.steps):
            host_gaps = times.host_gaps(st, times.ops(st), waits.get(i, []))
            gap_ns.append(_length(host_gaps))
            if host_gaps:
                before, after = _Neighbours(f.start[st.top_rows], f.end[st.top_rows]).beside(host_gaps)
                keys = f.key[st.top_rows]
                before = np.where(before >= 0, keys[np.maximum(before, 0)], edges)
                after = np.where(after >= 0, keys[np.maximum(after, 0)], edges + 1)
                lengths = np.array([hi - lo for lo, hi in host_gaps], np.int64)
                largest.add_all(lengths, before, after, labels, st.node.name)
    for n in p.find_all(times.collective_keys) if times.any_collective else ():
        if n.category != "op":  # the spans and kernels, not the ops
            names[n.name] += 1
    f = p.forest
    for k in f.dkey[times.kernels].tolist():
        names[f.whats[k][4]] += 1
    findings = []
    step_us = p.mean_step_ns / 1000
    exposed_us = _per_step(sum(exposed_ns), p.n)
    words = _steady(p, exposed_ns, COMMUNICATION_SHARE)
    if words:
        comm_us = _per_step(comm_ns, p.n)
        findings.append(
            Finding(
                kind="communication_wait",
                title=f"Waiting in collectives takes {words}",
                evidence=Evidence(
                    tuple(n for n, _ in names.most_common(EVIDENCE_NAMES)),
                    None,
                    exposed_us,
                    _share(exposed_us, step_us),
                    f"collectives run {comm_us:.1f} µs per step, {exposed_us:.1f} µs of it with no compute beside "
                    "it; a rank waits there for the slowest rank to arrive",
                ),
                estimated_us=exposed_us,
                suggestion=(
                    "compare the ranks (s.table(ranks='all'), or neuronprof summarize on the folder of rank traces) "
                    "to find the rank the others wait for and even out its work; overlap communication with "
                    "compute (DDP overlaps gradient buckets with backward; fewer, larger collectives cost less)"
                ),
            )
        )
    gap_us = _per_step(sum(gap_ns), p.n)
    ops_per_step = sum(len(st.top_rows) for st in p.steps) / p.n
    words = _steady(p, gap_ns, HOST_OVERHEAD_SHARE) if ops_per_step >= HOST_OVERHEAD_MIN_OPS else None
    if words:
        shown = largest.shown(GAPS_SHOWN)
        findings.append(
            Finding(
                kind="host_overhead",
                title=f"Host time between ops (Python) takes {words}",
                evidence=Evidence(
                    tuple(dict.fromkeys(n for g in shown for n in g[1:3] if n not in _EDGES)),
                    None,
                    gap_us,
                    _share(gap_us, step_us),
                    f"the host runs code outside torch's ops (Python, and the profiler's own bookkeeping between "
                    f"ops) for {gap_us:.1f} of {step_us:.1f} µs per step; "
                    "largest gaps: "
                    + "; ".join(f"{g[0] / 1000:.1f} µs between {g[1]} and {g[2]} (in {g[3]})" for g in shown),
                ),
                estimated_us=gap_us,
                suggestion=(
                    "run fewer Python lines per op: torch.compile the model or the step (it removes the Python "
                    "between ops), and move per-step Python work (logging, metrics, data handling) out of the step"
                ),
            )
        )
    return findings


EVIDENCE_NAMES = 4
"""How many collective names ``communication_wait`` lists (the most frequent)."""


def _low_precision(p: _Profile) -> list[Finding]:
    """``emulated_low_precision``: bfloat16/float16 work on a CPU without native instructions for it.

    Rule: the self host time of ops with a ``torch.bfloat16`` or ``torch.float16``
    input (dtypes need ``record_shapes=True``) that launched no device work, per step.
    It fires when the run's CPU is known not to compute that dtype natively (the
    session records what torch's oneDNN reports: AVX512-BF16 or AMX for bfloat16 on
    x86, AVX512-FP16 or AMX-FP16 for float16) and those ops take at least
    ``LOW_PRECISION_SHARE`` (10 %) of the mean step. Without that knowledge (a trace
    from another producer) a note gives the share instead. Time at stake: those ops'
    time per step, an upper bound (in float32 they still take some time).
    """
    import numpy as np

    by_dtype: Counter[str] = Counter()
    per_step: defaultdict[str, list[int]] = defaultdict(lambda: [0] * p.n)
    ops: defaultdict[str, Counter[str]] = defaultdict(Counter)
    # The low-precision dtypes among an op's inputs, per recorded signature (a trace repeats a few).
    lows = _NameMemo(lambda dtypes: sorted({_torch_dtype(t) for t in dtypes} & set(LOW_PRECISION)))
    f = p.forest
    # Ops with a low-precision input that make no view (the rows that launched device work are left out below).
    candidates = np.fromiter(
        (w[0] == "op" and bool(w[3]) and bool(lows[w[3]]) and w[4] not in _VIEWS for w in f.whats), bool, len(f.whats)
    )
    # (device work is done in the device's own precision: the ops that launched some are left out)
    rows = candidates[f.key] & ~f.row_mask(f.owners) if candidates.any() else None
    for i, st in enumerate(p.steps if rows is not None else ()):
        mine = p.rows(st, rows, by_key=False)
        for k, ns in zip(f.key[mine].tolist(), f.self_ns(mine).tolist()):
            w = f.whats[k]
            low = lows[w[3]]
            by_dtype[low[0]] += ns
            per_step[low[0]][i] += ns
            ops[low[0]][w[4]] += ns
    findings = []
    step_us = p.mean_step_ns / 1000
    native = p.tl.native_dtypes
    if not p.record_shapes and not p.has_device and native is not None and len(native) < len(LOW_PRECISION):
        lacking = " or ".join(d.removeprefix("torch.") for d in LOW_PRECISION if d not in native)
        p.notes.append(
            f"dtypes were not recorded, so low-precision work is not checked; this CPU computes no {lacking} "
            "natively (record_shapes=True would tell whether the step runs in it)"
        )
    for dtype, ns in by_dtype.items():
        us = _per_step(ns, p.n)
        words = _steady(p, per_step[dtype], LOW_PRECISION_SHARE)
        if not words:
            continue
        short = dtype.removeprefix("torch.")
        if native is None:
            p.notes.append(
                f"{short} ops take {words} on the host; whether the CPU that recorded it "
                f"computes {short} natively is not in the trace (a neuronprof session records it)"
            )
            continue
        if dtype in native:
            continue
        top = [name for name, _ in ops[dtype].most_common(EVIDENCE_NAMES)]
        findings.append(
            Finding(
                kind="emulated_low_precision",
                title=f"{short} work takes {words} on a CPU without native {short}",
                evidence=Evidence(
                    tuple(top),
                    None,
                    us,
                    _share(us, step_us),
                    f"this CPU has no {short} instructions (torch's oneDNN reports none), so these ops convert "
                    "through float32; they can be slower than float32 itself",
                ),
                estimated_us=us,
                suggestion=(
                    f"on this machine run the step in float32 (no torch.autocast(dtype=torch.{short}) and no "
                    f".to(torch.{short})); keep {short} for hardware that computes it (a GPU, Trainium, a CPU with "
                    + ("AVX512-BF16 or AMX)" if short == "bfloat16" else "AVX512-FP16 or AMX-FP16)")
                ),
            )
        )
    return findings


_TO_CPU = "aten::_to_cpu"
"""What torch's boxed CPU fallback (``at::native::cpu_fallback``) calls to bring an op's inputs to the host."""


def _fallbacks(p: _Profile) -> list[Finding]:
    """``cpu_fallback``: an op of a device step that ran on the CPU.

    Rule: on a profile with a device, an op that calls ``aten::_to_cpu`` itself: the
    mark of torch's CPU fallback for backends without a kernel for the op (its
    inputs go to the host, the op runs there, its outputs are copied back). The
    outermost such op is counted once per call. Threshold: any occurrence. Time at
    stake: the op's host time per step (the copies included).
    """
    if not p.has_device:
        return []
    import numpy as np

    tally = _Tally()
    f = p.forest
    to_cpu = f.key_mask(lambda name, _category: name == _TO_CPU)
    for tally.step, st in enumerate(p.steps):
        rows = p.rows(st, to_cpu)
        if not len(rows):
            continue  # no fallback in this step: most steps
        # The ops that call aten::_to_cpu themselves, in tree order.
        callers = np.unique(f.parent[rows])
        callers = callers[callers >= 0]
        if st._range is None and st.rows is not None:  # the whole recording: its rows' order
            callers = _in_order(callers, st.rows)
        for node in f.nodes(callers):
            if node.name == _TO_CPU:
                continue
            if _inside_fallback(node):
                continue
            tally.add(node.name, node.dur)
    return [
        tally.finding(
            p,
            name,
            "cpu_fallback",
            f"{name} fell back to the CPU {tally.when(name, p.n)}",
            (name, _TO_CPU),
            f"{name} has no {p.tl.device_label or 'device'} kernel here: its inputs are copied to the host, "
            "it runs on the CPU and its results are copied back",
            f"replace {name} with ops the device supports (the backend's supported-operator list; for "
            "TorchNeuron, the torch-neuronx operator compatibility table marks CPU_FALLBACK ops), or move "
            "it out of the step",
        )
        for name in tally.calls
    ]


def _inside_fallback(node: _Node) -> bool:
    return node.parent is not None and any(c.name == _TO_CPU for p in node.parent.lineage() for c in p.children)


def _pipeline(p: _Profile) -> list[Finding]:
    """``input_pipeline``: the DataLoader's ``__next__`` takes a large share of the step.

    Rule: the ``enumerate(DataLoader)#...__next__`` ranges torch.profiler records
    inside the steps take at least ``PIPELINE_SHARE`` (10 %) of the mean step. Time
    at stake: their time per step.
    """
    per_step = [0] * p.n
    calls = 0
    name = ""
    dataloader = _NameMemo(lambda name: bool(_DATALOADER.search(name)))
    loaders = p.forest.key_mask(lambda name, _category: dataloader[name])
    for i, st in enumerate(p.steps):
        for node in p.find(st, loaders):
            if not (node.parent is not None and dataloader[node.parent.name]):
                per_step[i] += node.dur
                calls += 1
                name = node.name
    step_us = p.mean_step_ns / 1000
    us = _per_step(sum(per_step), p.n) if p.n else 0.0
    words = _steady(p, per_step, PIPELINE_SHARE) if calls else None
    if not words:
        return []
    return [
        Finding(
            kind="input_pipeline",
            title=f"Loading the next batch takes {words}",
            evidence=Evidence(
                (name,),
                calls / p.n,
                us,
                _share(us, step_us),
                ("the device waits" if p.has_device else "the step waits")
                + " while the next batch is loaded"
                + ("; the loader already has worker processes" if _WORKERS in name else ""),
            ),
            estimated_us=us,
            suggestion=_pipeline_suggestion(name, p.has_device),
        )
    ]


_WORKERS = "_MultiProcessingDataLoaderIter"
"""The iterator torch's DataLoader uses when ``num_workers > 0`` (``_SingleProcessDataLoaderIter`` without)."""


def _pipeline_suggestion(name: str, has_device: bool) -> str:
    """Advice that fits the loader the trace names: workers or none, a device to pin memory for or not."""
    pin = ", pin_memory=True" if has_device else ""
    if _WORKERS in name:
        return (
            "the workers do not keep up: raise num_workers above its current value (and prefetch_factor), "
            f"keep them alive between epochs (persistent_workers=True{pin}, if not set already) and make each "
            "sample's work lighter" + (" or move it onto the device" if has_device else "")
        )
    return (
        f"load in the background: DataLoader(num_workers=4{pin}, persistent_workers=True), and move "
        "preprocessing into the workers" + (" or onto the device" if has_device else "")
    )


RULES = (_pipeline, _step_time, _low_precision, _fallbacks)
"""The rules of this module, in the order ``analyze`` applies them."""
