"""What a step, an op row, a top-level call and device time are: each rule once.

The live table (``session.table()``, from kineto's event list converted in
``_kineto``) and the offline table (``neuronprof summarize``, built in
``analysis.trace`` from a Chrome trace) both aggregate events through
``analysis.trace``'s one aggregator, which asks this module every question of
meaning; [`Table`][neuronprof.Table] merges, sorts, filters and cuts its rows
with the functions here. So the two tables cannot drift apart.

The rules, in short:

* **Event kinds** come from the event's category (kineto's activity type):
  device work (``kernel``, ``gpu_memcpy``...), a step (``ProfilerStep#N``), a
  host op (``cpu_op``), a Python frame, a runtime/driver call, or other
  (``record_function`` annotations and the rest).
* **A step** is a ``ProfilerStep#N`` span, except an empty last one that was
  open when the profiler stopped: the step torch.profiler opens at the last
  ``step()`` before the block's exit, in which nothing ran (see ``step_count``).
* **A top-level call** is an op directly under a step (Python frames are
  transparent); a compiled region (``Torch-Compiled Region: ...``) counts once,
  torch.compile's guard check (``TorchDynamo Cache Lookup``) never.
* **An op row** sums every event of one name (and input shapes, when grouped by
  shape) and host/device side. **Calls** are counted as ``key_averages()``
  counts them: a host span whose only child has its name (a dispatcher
  re-dispatch: ``aten::div_`` → ``aten::div_``) is one call, the child's self
  time and kernels folded into it; a parent with other children too (genuine
  recursion) counts each call (``folds_into_parent``). Profiler-internal events
  (torch.profiler's and neuronprof's own Python frames, the record-function
  bookkeeping ops torch's own table leaves out) are not rows.
* **Self time** is a span's duration less the *union* of its children's (children
  can overlap each other: with ``with_stack=True`` a Python frame and the span it
  opens), so it is never negative.
* **Async spans** (``is_async_span``: a process group's collective, ``gloo:*``,
  ``nccl:*``..., which c10d records as async on its own threads) take no part in
  nesting and add no self host time, as in ``key_averages()``; their duration is
  their CPU total and the table's communication figure.
* **The straggler** of several ranks is the rank the others wait for: the one with
  the most compute per step, a rank's compute being its steps' time less the time
  inside them when one of its collectives is in flight (``is_collective``: process
  group spans, the c10d ops that issue or wait for them, communication kernels;
  ``collective_wait_ns``, ``straggler``). Not the rank with the longest collective:
  that one is most often the rank that waited most.
* **Host spans** (ops, Python frames, runtime calls, steps) are host time whatever
  process they are written on (``on_device``): kineto sometimes writes a thread's
  Python frames under pid 0, the "GPU 0" process.
* **A span crossing a step boundary** (a ``record_function`` label opened in one
  step and closed in the next, a frame open when the profiler started) is cut at
  the boundaries of the steps on its thread (``step_pieces``): each part inside a
  step is nested there, the part between or outside the steps is left out (a note
  says how much; the profiler's own frames keep theirs, which is no row), and the
  span counts one call. Likewise a span that runs past the end of the span it
  starts in (a Python frame and the ``record_function`` it opens) is cut there:
  the rest nests beside it. So self times add up to the steps.
* **Device total** is the sum over kernel rows only (``on_device``): the ops
  that launched them carry the same time again, as in torch.profiler's "Self
  DEVICE time total"; a table without kernel rows sums its ops.

Nothing here imports torch or the rest of neuronprof: rows are duck-typed
([`OpRow`][neuronprof.OpRow]-like frozen dataclasses).

Some 700 lines, kept in one module on purpose: every rule of meaning the two tables,
the cross-rank view and the findings read (events, steps, calls, nesting, rows,
collectives) is in this one place, so that none of them can drift.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Protocol, TypeVar

__all__ = [
    "ASYNC_PREFIXES",
    "COLLECTIVE_KERNEL_PREFIXES",
    "COLLECTIVE_OPS",
    "COLLECTIVE_OP_PREFIXES",
    "PROCESS_GROUP_PREFIXES",
    "HOST_KINDS",
    "STOPPED_IN_LAST_STEP",
    "stopped_in_last_step",
    "CACHE_LOOKUP",
    "COMPILED_REGION",
    "DEVICE_CATEGORY",
    "DEVICE_CATS",
    "K_DEVICE",
    "K_OP",
    "K_OTHER",
    "K_PY",
    "K_RUNTIME",
    "K_STEP",
    "OP_CATS",
    "SKIP_CATS",
    "skipped",
    "SORT_FIELD",
    "STEP_PREFIX",
    "STEP_ROW",
    "add_rows",
    "collective_wait_ns",
    "counts_as_call",
    "device_counted",
    "device_total",
    "event_kind",
    "folds_into_parent",
    "has_device_time",
    "is_async_span",
    "is_collective",
    "is_own_frame",
    "is_row",
    "is_step_row",
    "check_row_limit",
    "limit_rows",
    "merge_rows",
    "merged_intervals",
    "on_device",
    "row_name",
    "sort_rows",
    "step_count",
    "step_pieces",
    "straggler",
]

# -- events ------------------------------------------------------------------------------

# Categories that are not operator time: the profiler's own span, and device-side
# copies of CPU annotations (they would count their kernels' time twice). "Trace" is
# skipped only for kineto's own span (see skipped): TorchTPU's device events share it.
# Limitation: the rule is not restricted to TPU traces. Which process or device label
# TorchTPU gives those events is not in the public record (only its test's category is),
# so any other "Trace" event, in a trace of any backend, is read as device work too. In
# the traces torch and kineto write for CPU and CUDA, kineto's span is the only one.
SKIP_CATS = frozenset({"Trace", "gpu_user_annotation"})
TRACE_CAT = "Trace"
KINETO_SPAN_PREFIX = "PyTorch Profiler ("
"""kineto's one span of the whole capture, ``"PyTorch Profiler (0)"`` with ``"cat": "Trace"`` on its ``Spans`` lane."""


def skipped(name: Any, cat: str) -> bool:
    """Whether an event of a skipped category (``cat in SKIP_CATS``) is left out of every table.

    kineto's own span is; an event of TorchTPU's with ``"cat": "Trace"`` (its own test
    reads TPU events from a kineto JSON by that category) is device work and is kept.
    """
    return cat != TRACE_CAT or not isinstance(name, str) or name.startswith(KINETO_SPAN_PREFIX)


# Device work, in lower case, and what kind of work each is: kineto 2.x, kineto of
# PyTorch 1.8/1.9 ("Kernel", "Memcpy", "Memset"), MTIA.
DEVICE_CATEGORY = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "memcpy": "memcpy",
    "memset": "memset",
    "mtia_ccp_events": "kernel",
}
DEVICE_CATS = frozenset(DEVICE_CATEGORY)
# Host operators: kineto 2.x and PyTorch 1.8/1.9 ("Operator").
OP_CATS = frozenset({"cpu_op", "operator"})

STEP_PREFIX = "ProfilerStep#"
STEP_ROW = "ProfilerStep*"
"""What ``key_averages()`` (and every neuronprof table) calls every ``ProfilerStep#N``."""
_STEP_STEM = "ProfilerStep"  # what STEP_PREFIX and STEP_ROW share
COMPILED_REGION = "Torch-Compiled Region"
CACHE_LOOKUP = "TorchDynamo Cache Lookup"

# What kind of event a (name, category) is.
K_OTHER, K_OP, K_PY, K_RUNTIME, K_STEP, K_DEVICE = range(6)


def event_kind(name: str, cat: Any) -> int:
    """What kind of event a (name, category) is: one of ``K_*`` (device work, a step, an op...).

    ``cat`` is the trace's ``"cat"`` or, live, kineto's activity type: the same
    strings (kineto writes one as the other).
    """
    lcat = cat.lower() if isinstance(cat, str) else ""
    if lcat in DEVICE_CATS or (cat == TRACE_CAT and not name.startswith(KINETO_SPAN_PREFIX)):
        return K_DEVICE
    if name.startswith(STEP_PREFIX):
        return K_STEP
    if lcat in OP_CATS:
        return K_OP
    if lcat == "python_function":
        return K_PY
    if lcat.endswith(("runtime", "driver")):
        return K_RUNTIME
    return K_OTHER


# Host kinds: time on the host whatever process a trace writes them under.
HOST_KINDS = frozenset({K_OP, K_PY, K_RUNTIME, K_STEP})


def on_device(kind: int, device_process: bool) -> bool:
    """Whether an event is device work: a device category, or any non-host event of a device process.

    Host spans (ops, Python frames, runtime calls, steps) stay host spans on a device
    process: kineto writes some threads' Python frames under pid 0, which is also the
    "GPU 0" process.

    Args:
        kind: The event's kind (``event_kind``).
        device_process: Whether its process is a device timeline (by its name or labels).
    """
    return kind == K_DEVICE or (device_process and kind not in HOST_KINDS)


# The profiling titles of c10d's process-group work (``gloo:all_reduce``,
# ``nccl:broadcast``...) and of RPC's async calls: torch records these spans as async
# (``RecordFunction::_setAsync``), on the process group's own threads for gloo. A
# trace file does not carry the flag; the names do.
PROCESS_GROUP_PREFIXES = ("gloo:", "nccl:", "rccl:", "ucc:", "mpi:", "xccl:", "hccl:")
ASYNC_PREFIXES = (*PROCESS_GROUP_PREFIXES, "rpc_async#", "rpc_remote#")


def is_async_span(name: str, kind: int) -> bool:
    """Whether a host span is async (a collective's or an RPC's work): no self host time, no nesting.

    ``key_averages()`` gives such spans ``is_async=True``: self CPU 0, CPU total their
    duration, and leaves them out of every op's children. They are communication, not
    host compute (see ``ASYNC_PREFIXES``).
    """
    return kind == K_OTHER and name.startswith(ASYNC_PREFIXES)


# -- collectives and the straggler ---------------------------------------------------------

# What a rank does while it takes part in a collective, besides the process group's own
# span (``PROCESS_GROUP_PREFIXES``): the c10d ops that issue a collective or wait for one
# (``c10d::allreduce_``, ``c10d::wait``, the functional collectives'
# ``_c10d_functional::wait_tensor``), the future wait (``aten::wait``), ProcessGroupNCCL's
# annotation around each collective (``record_param_comms``) and the device's
# communication kernels (NCCL/RCCL's ``ncclDevKernel_*``/``ncclKernel_*``, HCCL's
# ``hcom_*``, XLA's collective ops).
COLLECTIVE_OP_PREFIXES = ("c10d::", "c10d_functional::", "_c10d_functional::")
COLLECTIVE_OPS = frozenset({"aten::wait", "record_param_comms"})
COLLECTIVE_KERNEL_PREFIXES = (
    "ncclDevKernel",
    "ncclKernel",
    "hcom_",
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
)


def is_collective(name: str, kind: int) -> bool:
    """Whether an event is part of a collective: its time is communication or waiting for the other ranks.

    A process group's span (``gloo:all_reduce``, ``nccl:all_reduce``...), an op that
    issues or waits for a collective (``c10d::*``, ``_c10d_functional::*``,
    ``aten::wait``, ``record_param_comms``) or a communication kernel on the device
    (``ncclDevKernel_*``, ``ncclKernel_*``, ``hcom_*``, XLA's ``all-reduce``...).
    RPC's async spans are not collectives.

    Args:
        name: The event's name, as the trace writes it.
        kind: Its kind (``event_kind``).
    """
    if kind == K_DEVICE:
        return name.startswith(COLLECTIVE_KERNEL_PREFIXES)
    return name.startswith(PROCESS_GROUP_PREFIXES + COLLECTIVE_OP_PREFIXES) or name in COLLECTIVE_OPS


def merged_intervals(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint intervals covering exactly what ``spans`` cover (empty spans dropped)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def merged_spans(starts: Any, ends: Any, *, keep_empty: bool = False) -> tuple[Any, Any]:
    """``merged_intervals`` on arrays: the starts and ends (int64 numpy arrays) of the sorted disjoint spans.

    The same rule, for the many spans of a large trace: what ``[start, end)`` spans cover,
    touching ones joined; empty spans are dropped, or with ``keep_empty`` kept (one alone
    is a span of its own, as the findings' ``_union`` keeps it).

    Raises:
        OverflowError: A time does not fit in int64.
    """
    import numpy as np

    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if not keep_empty:
        keep = ends > starts
        starts, ends = starts[keep], ends[keep]
    # By start, then end: most often in that order already (a stream's spans), and then not sorted again.
    step = np.diff(starts)
    if (step < 0).any() or ((step == 0) & (ends[1:] < ends[:-1])).any():
        order = np.lexsort((ends, starts))
        starts, ends = starts[order], ends[order]
    del step
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), bool)  # where a span starts past the reach of all before it
    new[1:] = starts[1:] > reach[:-1]
    # A span ends its union where the next one starts a new one (the last always does: new[0] is True).
    return starts[new], reach[np.roll(new, -1)]


def collective_wait_ns(steps: Sequence[tuple[int, int]], collectives: Iterable[tuple[int, int]]) -> list[int]:
    """Per step, the time inside it during which one of the rank's collectives was in flight (ns).

    The straggler's rule (see ``straggler``): time in a collective, overlapped by other
    work or not, is time the rank may spend waiting for the others, so it is taken out of
    the rank's compute. Spans on every thread and stream count (a gloo span runs on the
    process group's thread while the step's thread waits), each instant once.

    Args:
        steps: The steps' ``(start, end)`` (integer ns), any order.
        collectives: The ``(start, end)`` of every collective event (``is_collective``) of the rank.
    """
    merged = merged_intervals(collectives)
    # The merged intervals are sorted and disjoint: their ends are sorted too.
    ends = [e for _, e in merged]
    out = []
    for start, end in steps:
        total = 0
        i = bisect.bisect_right(ends, start)
        while i < len(merged) and merged[i][0] < end:
            lo, hi = merged[i]
            total += min(hi, end) - max(lo, start)
            i += 1
        out.append(total)
    return out


STRAGGLER_MARGIN = 0.25
"""A rank is the straggler only when its compute per step exceeds every other rank's by this share:
two balanced ranks on a shared machine differ by up to ~20 % from step to step, and naming one of
them would send the user after noise."""


def straggler(compute_per_step: Sequence[Optional[float]]) -> Optional[int]:
    """The rank the others wait for: the one with the most compute per step.

    A rank's compute is its step time less the time it spends in collectives
    (``collective_wait_ns``): the rank that computes longest arrives last at every
    collective, and the others wait for it there. The time in a collective does not
    decide it: the rank with the longest is most often the one that waited most. This
    is the one rule of the cross-rank view
    ([`RankTable.straggler`][neuronprof.model.RankTable.straggler], ``neuronprof
    summarize``, ``neuronprof advise`` and ``neuronprof report`` on a folder of ranks).

    Args:
        compute_per_step: Per rank (indexed by rank), its mean compute per step (any unit);
            ``None`` for a rank without steps.

    Returns:
        The rank, or ``None`` when fewer than two ranks have a figure or the largest does
        not exceed the next by ``STRAGGLER_MARGIN`` (25 %): no one rank holds the
        others back beyond what noise does.
    """
    known = [(v, r) for r, v in enumerate(compute_per_step) if v is not None]
    if len(known) < 2:
        return None
    known.sort(reverse=True)
    if known[0][0] <= known[1][0] * (1 + STRAGGLER_MARGIN):
        return None
    return known[0][1]


def folds_into_parent(parent_name: str, child_name: str, child_kind: int) -> bool:
    """Whether a host span's only child is folded into it, as ``key_averages()`` does (one call, not two).

    torch's ``EventList._remove_dup_nodes``: a span whose only child has its name
    (a dispatcher re-dispatch, ``aten::div_`` → ``aten::div_``; autocast's
    ``cross_entropy_loss``) is one call; the child's children and kernels become
    the parent's. A parent with other children too is genuine recursion: each call
    counts, so callers ask this only of an only child. Python frames
    (``with_stack=True``) are the program's own calls and are never folded.

    Args:
        parent_name: The parent span's name, as the trace writes it.
        child_name: The name of its only child.
        child_kind: The child's kind (``event_kind``).
    """
    return child_kind != K_PY and child_name == parent_name


def step_pieces(
    start: int, end: int, steps: Sequence[tuple[int, int]], step_starts: Sequence[int]
) -> Optional[list[tuple[int, int, bool]]]:
    """A host span cut at the edges of the steps of its thread, when it crosses one.

    A span inside one step, or outside every step, needs no cut (``None``). A span
    that runs across a step boundary (a ``record_function`` label opened in one
    step and closed in the next) or around steps (a frame open when the profiler
    started) is cut at the steps' edges into ``(start, end, inside a step)`` parts,
    in order, covering the span. The parts inside steps nest there; the table
    leaves the program's parts outside the steps out, and the span counts one call.

    Args:
        start: The span's start (integer ns).
        end: Its end (integer ns).
        steps: The thread's ``ProfilerStep#N`` spans as ``(start, end)``, in start order,
            not overlapping.
        step_starts: Their starts (for bisection).
    """
    i = bisect.bisect_right(step_starts, start) - 1
    if i >= 0 and end <= steps[i][1]:
        return None  # inside one step (or a point at its end)
    parts: list[tuple[int, int, bool]] = []
    cursor = start
    for j in range(max(i, 0), len(steps)):
        s0, s1 = steps[j]
        if s0 >= end:
            break
        lo, hi = max(cursor, s0), min(end, s1)
        if hi <= lo:
            continue
        if lo > cursor:
            parts.append((cursor, lo, False))
        parts.append((lo, hi, True))
        cursor = hi
    if not any(inside for _, _, inside in parts):
        return None  # outside every step
    if cursor < end:
        parts.append((cursor, end, False))
    return parts


def is_step_row(name: str) -> bool:
    """Whether a row is the steps' row: ``ProfilerStep*``, or a ``ProfilerStep#N`` of a table built otherwise.

    The steps' row is the profiler's span around each step, not an op: views that
    compare ops (the cross-rank view, the NEFF matching) leave it out.
    """
    return name.startswith(_STEP_STEM)


def row_name(name: str, kind: int) -> str:
    """The row an event is summed into: its name; every step is ``ProfilerStep*``."""
    return STEP_ROW if kind == K_STEP else name


def is_transparent(kind: int) -> bool:
    """Whether an event is see-through for "called directly by the step".

    Python frames (``with_stack=True``) and annotations (``record_function``
    labels, anything that is not an op, a runtime call, device work or a step)
    group work without being a call of their own: the ops under them count as
    the step's top-level calls, as the findings read them.
    """
    return kind in (K_PY, K_OTHER)


def counts_as_call(kind: int, name: str) -> bool:
    """Whether an event directly under a step is a top-level call.

    torch.compile records its guard check ("TorchDynamo Cache Lookup") beside
    the compiled region: bookkeeping, not a call; the region counts once.
    """
    if name.startswith(COMPILED_REGION):
        return True
    return kind == K_OP and not name.startswith(CACHE_LOOKUP)


def step_count(holds_work: Sequence[bool], *, stopped_in_last: bool = True) -> int:
    """How many steps a timeline's ``ProfilerStep#N`` spans (in start order) are.

    Every span is a step, except an empty last one that was still open when the
    profiler stopped: torch.profiler opens a step at every ``step()``, so the
    last ``step()`` before the block's exit opens one in which nothing runs.

    A cycle that torch's schedule ended is stopped between steps, so an empty
    last step of it did run (its work was in threads the profiler does not
    record). The live session knows which cycles its exit stopped; a trace file
    does not say, so the offline reader takes an empty last span as one the
    exit stopped in (what an export of a ``with`` block that exits mid-cycle
    holds; a trace saved by the schedule ends with a step that ran).

    Args:
        holds_work: Per span, whether any event is nested in it.
        stopped_in_last: Whether the profiler stopped while the last span was open.
    """
    if stopped_in_last and holds_work and not holds_work[-1]:
        return len(holds_work) - 1
    return len(holds_work)


# The key of a trace's ``neuronprof`` metadata that says how its cycle ended.
STOPPED_IN_LAST_STEP = "stopped_in_last_step"


def stopped_in_last_step(metadata: Any, *, default: bool = True) -> bool:
    """Whether a trace's profiler stopped while its last step was open, as its header says.

    A session writes ``"stopped_in_last_step"`` into the ``neuronprof`` metadata of
    every cycle's trace: true when the session's exit ended the cycle, false when
    torch's schedule did (see ``step_count``). Traces without it (other tools,
    older exports) get ``default``.

    Args:
        metadata: The trace's header keys (kineto's metadata), e.g. ``{"neuronprof": {...}}``;
            the ``neuronprof`` value may be a JSON object or its text.
        default: What a trace that does not say is taken to be.
    """
    own = metadata.get("neuronprof") if isinstance(metadata, Mapping) else None
    if isinstance(own, str):
        try:
            own = json.loads(own)
        except ValueError:
            return default
    value = own.get(STOPPED_IN_LAST_STEP) if isinstance(own, Mapping) else None
    return value if isinstance(value, bool) else default


# Python frames of the profiler itself and of neuronprof (with_stack=True): they
# are the measuring instrument, not the user's program.
_OWN_FRAMES = (
    "torch/profiler/",
    "torch/autograd/profiler",
    "neuronprof/",
    "<built-in method _record_function_enter",
    "<built-in method _record_function_exit",
    "<built-in method _disable_profiler",
    "<built-in method _enable_profiler",
)
# Bookkeeping ops torch.profiler's own table leaves out (``profiler_util._filter_name``).
_NOT_ROWS = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)


def is_own_frame(name: str) -> bool:
    """Return True for a Python-frame event of torch.profiler's or neuronprof's own code."""
    normalized = name.replace("\\", "/")
    return any(marker in normalized for marker in _OWN_FRAMES)


# Standard-library modules, whose frames the profiler's own code calls (signal, enum, contextlib).
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) or frozenset(
    {"abc", "contextlib", "enum", "functools", "os", "signal", "threading", "types", "typing", "warnings", "weakref"}
)


def is_support_frame(name: str) -> bool:
    """Whether a Python-frame event is a built-in, frozen, standard-library or torch frame.

    ``"signal.py(54): signal"``, ``"re/__init__.py(272): _compile"``,
    ``"<built-in function isinstance>"``, ``"<frozen os>(674): __getitem__"``,
    ``"torch/_ops.py(1089): __call__"``: under the profiler's or neuronprof's own
    frames these are their work, not the program's. The program's own files (and
    ``nn.Module`` frames) never are.
    """
    if name.startswith(("<built-in", "<frozen ", "torch/")):
        return True
    file = name.split("(", 1)[0].replace("\\", "/")
    if not file.endswith(".py"):
        return False
    # A module of the standard library (signal.py) or a file of one of its packages
    # (re/__init__.py, json/encoder.py), as the profiler writes paths below sys.path.
    return file.split("/", 1)[0].removesuffix(".py") in _STDLIB


def is_row(name: str) -> bool:
    """Whether events called ``name`` make a row: not the profiler's own frames or bookkeeping ops."""
    return name not in _NOT_ROWS and not is_own_frame(name)


# -- rows ---------------------------------------------------------------------------------


class _Row(Protocol):
    """What the row rules read: an [`OpRow`][neuronprof.OpRow] (a frozen dataclass) or alike."""

    @property
    def name(self) -> str: ...
    @property
    def calls(self) -> int: ...
    @property
    def self_cpu_us(self) -> float: ...
    @property
    def cpu_total_us(self) -> float: ...
    @property
    def self_device_us(self) -> Optional[float]: ...
    @property
    def device_total_us(self) -> Optional[float]: ...
    @property
    def on_device(self) -> bool: ...


RowT = TypeVar("RowT", bound=_Row)
T = TypeVar("T")


class _Placed(Protocol):
    @property
    def on_device(self) -> bool: ...


PlacedT = TypeVar("PlacedT", bound=_Placed)


def _add_opt(a: Optional[float], b: Optional[float]) -> Optional[float]:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)


def _opt_int(v: Optional[float]) -> Optional[int]:
    return None if v is None else int(v)


def add_rows(a: RowT, b: RowT) -> RowT:
    """Return one row that is the sum of two rows of the same op.

    Calls and times add; a value missing (``None``) on both stays missing;
    ``input_dtypes`` is kept where both agree on it.
    """
    changes: dict[str, Any] = {
        "calls": a.calls + b.calls,
        "self_cpu_us": a.self_cpu_us + b.self_cpu_us,
        "cpu_total_us": a.cpu_total_us + b.cpu_total_us,
        "self_device_us": _add_opt(a.self_device_us, b.self_device_us),
        "device_total_us": _add_opt(a.device_total_us, b.device_total_us),
    }
    for name in ("flops", "self_cpu_memory_bytes", "self_device_memory_bytes"):
        if hasattr(a, name):
            changes[name] = _opt_int(_add_opt(getattr(a, name), getattr(b, name)))
    for name in ("input_dtypes",):
        if hasattr(a, name):
            mine = getattr(a, name)
            changes[name] = mine if mine == getattr(b, name) else None
    return dataclasses.replace(a, **changes)  # type: ignore[type-var]


def merge_rows(groups: Iterable[Iterable[RowT]]) -> list[RowT]:
    """Sum rows with the same name, input shapes and host/device side, in first-seen order.

    The one merge: of a trace's keys into rows, of profiling cycles
    (``repeat > 1``) into one table.
    """
    merged: dict[tuple[Any, ...], RowT] = {}
    for rows in groups:
        for r in rows:
            key = (r.name, getattr(r, "input_shapes", None), r.on_device)
            prev = merged.get(key)
            merged[key] = r if prev is None else add_rows(prev, r)
    return list(merged.values())


def has_device_time(row: _Row) -> bool:
    """Whether a row has device time above zero (what ``device_only`` keeps)."""
    return (row.self_device_us or 0) > 0 or (row.device_total_us or 0) > 0


def device_counted(rows: Sequence[PlacedT]) -> Sequence[PlacedT]:
    """The rows a device total sums: the kernel rows (``on_device``) when there are any, else every row.

    Kernel rows and the ops that launched them both carry the kernel's time, so
    only kernel rows are summed when there are any, as torch.profiler does for
    its "Self DEVICE time total".
    """
    return [r for r in rows if r.on_device] or rows


def device_total(rows: Sequence[_Row]) -> Optional[float]:
    """Total self device time (µs): the kernel rows' (``on_device``) when any has a value, else every row's.

    ``None`` only when no row at all has a device value, so that no subset of a
    table without a device total has one either: a limit (``head``) cannot make
    one up from the rows it keeps.
    """
    kernels = [r.self_device_us for r in rows if r.on_device and r.self_device_us is not None]
    if kernels:
        return float(sum(kernels))
    values = [r.self_device_us for r in rows if r.self_device_us is not None]
    return float(sum(values)) if values else None


# Which row field each sort key orders by. torch rewrites cuda/privateuse1/xpu
# keys to "device" internally, so they all land on the device fields here too.
SORT_FIELD: dict[str, str] = {
    "device": "self_device_us",
    "self_device_time_total": "self_device_us",
    "self_cuda_time_total": "self_device_us",
    "self_privateuse1_time_total": "self_device_us",
    "self_xpu_time_total": "self_device_us",
    "device_total": "device_total_us",
    "device_time_total": "device_total_us",
    "cuda_time_total": "device_total_us",
    "privateuse1_time_total": "device_total_us",
    "xpu_time_total": "device_total_us",
    "cpu": "self_cpu_us",
    "self_cpu_time_total": "self_cpu_us",
    "cpu_total": "cpu_total_us",
    "cpu_time_total": "cpu_total_us",
    "calls": "calls",
    "count": "calls",
    "name": "name",
    "flops": "flops",
    "self_cpu_memory_usage": "self_cpu_memory_bytes",
    "self_device_memory_usage": "self_device_memory_bytes",
}
DEVICE_FIELDS = frozenset({"self_device_us", "device_total_us"})


def sort_rows(rows: Iterable[RowT], field_name: str) -> list[RowT]:
    """Rows ordered by ``field_name``: names alphabetically, values largest first, missing (``None``) last.

    The sort is stable: equal values keep their order.
    """
    rows = list(rows)
    if field_name == "name":
        return sorted(rows, key=lambda r: r.name)
    present = [r for r in rows if getattr(r, field_name) is not None]
    missing = [r for r in rows if getattr(r, field_name) is None]
    present.sort(key=lambda r: getattr(r, field_name), reverse=True)
    return present + missing


def check_row_limit(n: object) -> None:
    """Refuse a ``row_limit`` that is neither an int nor None (a bool included) with a ``ValueError``."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
        raise ValueError(f"row_limit must be an int or None, got {n!r}")


def limit_rows(rows: Sequence[T], n: Optional[int]) -> Sequence[T]:
    """The first ``n`` rows (all of them when ``n`` is None or negative).

    The one rule for every ``row_limit`` of neuronprof: a limit cuts rows only. Every
    model computes its totals (and ``total_rows``) from all its rows before any limit,
    keeps them through ``head(n)`` and writes them to JSON, so a table read back from
    ``to_json(row_limit=n)`` reports the same totals as the whole one.

    Raises:
        ValueError: ``n`` is neither an int nor None (a bool included).
    """
    check_row_limit(n)
    if n is None or n < 0 or n >= len(rows):
        return rows
    return rows[:n]
