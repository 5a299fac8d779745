"""The timeline, structured for the rules: call trees per thread, device work per op, steps.

Also the op names and patterns the rules look for (torch's own ``aten`` names and
torch.compile's ranges).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.insights._forest import KINDS, _Forest, find, reach
from neuronprof.analysis.insights._intervals import _covered, _Spans, _union
from neuronprof.analysis.insights._timeline import DeviceEvent, HostCategory, Timeline

# Op names the rules look for. They are torch's own (aten) names; backends that
# implement ops under other names are matched by the runtime/device rules instead.
COPY_OPS = frozenset({"aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"})
"""Ops that do the copying (the work under ``aten::to`` / ``aten::_to_copy``)."""
CONVERSION_WRAPPERS = frozenset({"aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone"}) | COPY_OPS
"""Ops that convert or move a tensor; the op above them is the copy's cause."""
SYNC_OPS = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::is_nonzero",
        "aten::masked_select",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_consecutive",
        "aten::unique_dim",
        "aten::tolist",
    }
)
"""Ops whose result size or value the host needs: they wait for the device."""
_SYNC_RUNTIME = re.compile(r"synchroni[sz]e", re.IGNORECASE)
_MEMCPY = re.compile(r"memcpy|memcopy", re.IGNORECASE)
_HTOD = re.compile(r"HtoD|H2D|host\s*to\s*device", re.IGNORECASE)
_DTOH = re.compile(r"DtoH|D2H|device\s*to\s*host", re.IGNORECASE)
_DTOD = re.compile(r"DtoD|D2D|PtoP", re.IGNORECASE)
_ELEMENTWISE_NAMES = (
    "add add_ sub sub_ mul mul_ div div_ pow pow_ rsqrt rsqrt_ sqrt sqrt_ exp exp_ log log_ neg neg_ "
    "reciprocal reciprocal_ square abs abs_ relu relu_ gelu gelu_ silu silu_ sigmoid sigmoid_ tanh tanh_ "
    "softmax _softmax log_softmax _log_softmax clamp clamp_ clamp_min clamp_max where erf erf_ "
    "mean sum var var_mean std amax maximum minimum masked_fill masked_fill_ hardtanh leaky_relu "
    "addcmul addcdiv lerp rsub dropout"
)
ELEMENTWISE_OPS = frozenset("aten::" + n for n in _ELEMENTWISE_NAMES.split(" "))
"""Pointwise ops and the small reductions of normalisations: what fused kernels combine."""
MATMUL_OPS = frozenset({"aten::mm", "aten::matmul", "aten::bmm", "aten::baddbmm", "aten::linear"})
# A compiled region's name ("Torch-Compiled Region: <frame>/<recompile>"): the vocabulary's prefix.
_REGION = re.compile(rf"^{re.escape(vocab.COMPILED_REGION)}: (\d+)/(\d+)")
_DATALOADER = re.compile(r"DataLoader.*__next__|__next__.*DataLoader")
_COMPILE_WORK = re.compile(r"\(dynamo_timed\)$|^TorchDynamo|^_compile|^compile_fx|^dynamo$")


_MACHINERY = re.compile(
    r"^## .*##$|^##|PythonDispatchMode|^AOTDispatcher|Runtime Wrapper|^CompiledFunction|^Pregraph bytecode$"
)
"""torch.compile's runtime wrappers and dispatcher bookkeeping (``## Call CompiledFxGraph <hash> ##``,
``PythonDispatchMode``, ``AOTDispatcher Runtime Wrapper Prologue``, dynamo's ``Pregraph bytecode``):
never named as an op of the user's."""
_OPTIMIZER = re.compile(r"^Optimizer\.(step|zero_grad)#")
"""The ranges torch.optim records around ``step()`` and ``zero_grad()``."""


WHOLE_RECORDING = "(whole recording)"
"""The step a profile without ``ProfilerStep`` spans is read as."""


def _bookkeeping(name: str) -> bool:
    """torch.compile's own work (guard checks, compiling): not an op of the user's code."""
    return name.startswith(vocab.CACHE_LOOKUP) or bool(_COMPILE_WORK.search(name))


class _Node:
    """A host event with its place in the call tree: a row of the profile's ``_Forest``, as the rules read it.

    It holds the event's own fields, under [`HostEvent`][neuronprof.analysis.insights.HostEvent]'s
    names; its parent, children and device work are read from the forest's columns when asked
    (each a new node: compare nodes by row, ``_i``, never by identity). A node made by hand (no
    forest) has no parent, children or device work. Read-only to the rules.
    """

    __slots__ = ("name", "start_ns", "end_ns", "thread", "category", "input_shapes", "input_dtypes", "_f", "_i")

    def __init__(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        thread: str = "0",
        category: HostCategory = "op",
        input_shapes: Optional[tuple[tuple[int, ...], ...]] = None,
        input_dtypes: Optional[tuple[str, ...]] = None,
        forest: Optional[_Forest] = None,
        row: int = -1,
    ) -> None:
        self.name = name
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.thread = thread
        self.category = category
        self.input_shapes = input_shapes
        self.input_dtypes = input_dtypes
        self._f = forest
        self._i = row

    @property
    def parent(self) -> Optional[_Node]:
        f = self._f
        if f is None:
            return None
        up = int(f.parent[self._i])
        return f.node(up) if up >= 0 else None

    @property
    def children(self) -> list[_Node]:
        f = self._f
        return [] if f is None else [f.node(i) for i in f.children(self._i)]

    @property
    def device(self) -> list[DeviceEvent]:
        """The device work this op launched (a folded re-dispatch's included), in the order read."""
        f = self._f
        return [] if f is None else [f.device_event(j) for j in f.own_device(self._i)]

    @property
    def dur(self) -> int:
        return self.end_ns - self.start_ns

    def lineage(self) -> Iterator[_Node]:
        """This node, its parent, the parent's parent... up to the root."""
        p: Optional[_Node] = self
        while p is not None:
            yield p
            p = p.parent

    def walk(self) -> list[_Node]:
        """This node and everything under it, parents before children, children in order."""
        f = self._f
        if f is None:
            return [self]
        import numpy as np

        return f.nodes(np.arange(self._i, int(f.last[self._i]) + 1))

    def device_spans(self) -> list[tuple[int, int]]:
        """The device work of this node and everything under it, as ``(start, end)`` ns, in no set order."""
        return [] if self._f is None else self._f.device_spans(self._i)

    def device_ns(self) -> int:
        # The union: work on several streams at once is not counted twice.
        return _covered(self.device_spans())

    def self_ns(self) -> int:
        # The duration less the union of the children (overlapping children count once).
        return self.dur if self._f is None else int(self._f.self_ns([self._i])[0])


class _Step:
    """One step: its node, its span, its rows (in tree order) and the rows of the ops it calls directly."""

    __slots__ = ("node", "start", "end", "rows", "top_rows", "_range", "_f")

    def __init__(self, node: _Node, rows: Any = None) -> None:
        """``rows``: the step's rows in the forest, its own first (its subtree); none for a step made by hand."""
        self.node = node
        self.start = node.start_ns
        self.end = node.end_ns
        self.rows = rows
        self.top_rows: Any = ()  # the rows of its top-level calls, in tree order (set by ``_Profile``)
        self._range: Optional[tuple[int, int]] = None  # (first, stop) when the rows are a range
        self._f: Optional[_Forest] = None

    @property
    def top(self) -> list[_Node]:
        """The ops the step calls directly, as nodes (made on each call: the rules read ``top_rows``)."""
        return [] if self._f is None else self._f.nodes(self.top_rows)

    def top_column(self, column: Any) -> list[Any]:
        """A per-row column (``forest.start``, ``forest.end``...) at the step's top-level calls."""
        return column[self.top_rows].tolist() if len(self.top_rows) else []

    def top_names(self) -> list[str]:
        """The names of the step's top-level calls, in order."""
        f = self._f
        if f is None or not len(self.top_rows):
            return []
        whats = f.whats
        return [whats[k][4] for k in f.key[self.top_rows].tolist()]


class _NameMemo(dict[Any, Any]):
    """A test of a name (or a key), made once per distinct one: a trace repeats a few hundred names.

    One per ``_Profile``, so that a long-lived process reading many profiles keeps no names.
    """

    def __init__(self, test: Callable[[Any], Any]) -> None:
        super().__init__()
        self.test = test

    def __missing__(self, key: Any) -> Any:
        value = self[key] = self.test(key)
        return value


def _is_region(name: str) -> bool:
    return name.startswith(vocab.COMPILED_REGION)


def _top_level_read(key: tuple[str, str]) -> tuple[bool, bool]:
    """Under a step, whether a ``(name, category)`` is a top-level call, else whether the calls under it are."""
    name, category = key
    # The vocabulary's top-level call (a compiled region once, the guard check never),
    # less torch.compile's own compiling, which runs on the first call only.
    if vocab.counts_as_call(KINDS.get(category, vocab.K_OTHER), name) and not _COMPILE_WORK.search(name):
        return True, False
    return False, category in ("python", "annotation", "other") and not _DATALOADER.search(name)


_START, _END = attrgetter("start_ns"), attrgetter("end_ns")
_NAME, _CATEGORY = attrgetter("name"), attrgetter("category")


def _kind(node: _Node) -> int:
    """A host event's kind in the vocabulary's terms, for its rules (``counts_as_call``, ``is_collective``...)."""
    return KINDS.get(node.category, vocab.K_OTHER)


class _Profile:
    """The timeline, structured: steps, their top-level ops, device work per op, on the forest's columns.

    The rules ask it for the nodes they read (``find``, ``find_all``): a rule's test is
    applied to each distinct ``(name, category)`` once, and only the events that pass it
    become ``_Node`` objects, made for the rule that asks and let go after it. The rules
    that read every top-level call read them on the columns (``_Step.top_rows``). Nodes
    are compared by row (``_Node._i``), never by identity.
    """

    def __init__(self, tl: Timeline, forest: Optional[_Forest] = None) -> None:
        """``forest``: the timeline's events read already (a trace's, ``insights_of``); else ``tl``'s
        events are read into one here, as a trace's are."""
        import numpy as np

        from neuronprof.analysis.insights._trace import columns_of
        from neuronprof.analysis.insights._tree_reader import _TreeReader, forest_of

        self.tl = tl
        self.notes: list[str] = list(tl.notes)
        if forest is None:
            reader = _TreeReader()
            try:
                reader.nodes_of(tl.host, tl.device)
            except OverflowError:
                raise ValueError(
                    "an event's time or id does not fit in int64 (times are integer ns, as a trace's are: within "
                    "about 292 years of 0); shift the timeline's times nearer 0"
                ) from None
            forest = forest_of(columns_of(dataclasses.replace(tl, ranks=()), [reader]), reader.whats)
        self.forest = f = forest
        self.unlinked = f.unlinked
        n = len(f)
        cats = f.key_mask(lambda _name, category: category == "step")
        is_step = cats[f.key]
        reads = [_top_level_read((w[4], w[0])) if w[0] is not None else (False, False) for w in f.whats]
        call = np.array([r[0] for r in reads], bool)[f.key]
        transparent = np.array([r[1] for r in reads], bool)[f.key]
        step_rows = np.flatnonzero(is_step)
        step_rows = step_rows[np.argsort(f.start[step_rows], kind="stable")]
        via = reach(f, is_step, call, transparent, open_roots=not len(step_rows) and n > 0)
        self.steps: list[_Step] = []
        tops = np.flatnonzero(via >= 0)
        tops = tops[np.argsort(via[tops], kind="stable")]  # by step, each step's in tree order
        owner_of_top = via[tops]
        for node in f.nodes(step_rows):
            i = node._i
            step = _Step(node)
            step._range, step._f = (i, int(f.last[i]) + 1), f
            lo, hi = find(owner_of_top, (i, i + 1))
            step.top_rows = tops[lo:hi]
            self.steps.append(step)
        if not self.steps and n:
            self.notes.append("no ProfilerStep in this profile: the whole recording is read as one step")
            roots = np.flatnonzero(f.parent < 0)
            roots = roots[np.argsort(f.start[roots], kind="stable")]
            fake = _Node(WHOLE_RECORDING, int(f.start[roots].min()), int(f.end[roots].max()), category="step")
            step = _Step(fake, np.concatenate([np.arange(r, int(f.last[r]) + 1) for r in roots.tolist()]))
            step._f, step.top_rows = f, _in_order(tops, step.rows)
            self.steps.append(step)
        # A step lasts until its own device work ends (torch.profiler may close the
        # step before the device catches up when nothing synchronises).
        for s in self.steps:
            ends = f.dend[f.by_owner[self._owned(s)]]
            if len(ends):
                s.end = max(s.end, int(ends.max()))
        self.busy = _Spans.covering(f.dstart, f.dend)  # the device's busy time
        self.has_device_time = bool(self.busy)
        self.has_device = tl.device_label is not None or self.has_device_time
        # Shapes seen on any event are proof enough; otherwise what the feeder was told, if anything.
        self.record_shapes = True if f.record_shapes else tl.record_shapes
        self.n = len(self.steps)
        self.mean_step_ns = sum(self.step_ns(s) for s in self.steps) / self.n if self.n else 0.0
        self.sync_keys = f.key_mask(lambda name, _category: name in SYNC_OPS)
        # Filled by the rules that measure them (see RULE_MODULES): the rows of the copies a host_device_copy
        # finding explains, and the step's split between host and device that Insights reports.
        self.claimed: set[int] = set()  # rows
        self.host_op_us: Optional[float] = None
        self.device_busy_us: Optional[float] = None
        self.bound = "unknown"

    def _owned(self, s: _Step) -> Any:
        """Where the device work of the step's rows lies in ``forest.by_owner`` (a slice, or positions)."""
        import numpy as np

        f = self.forest
        if s._range is not None:
            lo, hi = find(f.owners, s._range)
            return slice(int(lo), int(hi))
        return np.flatnonzero(f.owners >= 0)  # the whole recording: every row's

    def rows(self, s: _Step, mask: Any, by_key: bool = True) -> Any:
        """The step's rows whose key passes ``mask`` (a per-key mask, ``forest.key_mask``), in tree order.

        ``by_key`` False: ``mask`` is per row (``forest.row_mask``).
        """
        import numpy as np

        f = self.forest
        if s._range is not None:
            lo, hi = s._range
            return np.flatnonzero(mask[f.key[lo:hi]] if by_key else mask[lo:hi]) + lo
        rows = s.rows if s.rows is not None else np.empty(0, np.int64)
        return rows[mask[f.key[rows]] if by_key else mask[rows]]

    def find(self, s: _Step, mask: Any) -> list[_Node]:
        """The step's nodes whose key passes ``mask``, in tree order (parents before children)."""
        return self.forest.nodes(self.rows(s, mask))

    def find_rows(self, s: _Step, mask: Any) -> list[_Node]:
        """The step's nodes whose row passes ``mask`` (per row), in tree order."""
        return self.forest.nodes(self.rows(s, mask, by_key=False))

    def find_all(self, mask: Any) -> list[_Node]:
        """Every node whose key passes ``mask``, in tree order, inside the steps or not."""
        import numpy as np

        f = self.forest
        return f.nodes(np.flatnonzero(mask[f.key]))

    def spans(self, rows: Any) -> list[tuple[int, int]]:
        """The ``(start, end)`` of rows."""
        f = self.forest
        return list(zip(f.start[rows].tolist(), f.end[rows].tolist()))

    def top_spans(self, s: _Step, leave_out: Any = None) -> list[tuple[int, int]]:
        """The spans of the step's top-level calls, less those whose key is in ``leave_out`` (a per-key mask)."""
        f = self.forest
        rows = s.top_rows
        if leave_out is not None and len(rows):
            rows = rows[~leave_out[f.key[rows]]]
        return self.spans(rows) if len(rows) else []

    def release(self) -> None:
        """Let go of the forest's columns once the rules have read them."""
        for s in self.steps:
            s._f, s.top_rows, s.rows = None, (), None

    def step_ns(self, s: _Step) -> int:
        return max(s.end - s.start, 1)

    def busy_in(self, s: _Step) -> list[tuple[int, int]]:
        return self.busy.clip(s.start, s.end)

    def host_busy_in(self, s: _Step) -> list[tuple[int, int]]:
        # A synchronising op's time is spent waiting for the device, not launching work.
        return _union(self.top_spans(s, self.sync_keys))


def _in_order(rows: Any, order: Any) -> Any:
    """``rows`` (a subset of ``order``'s values) in ``order``'s order."""
    import numpy as np

    keep = np.isin(order, rows)
    return order[keep]
