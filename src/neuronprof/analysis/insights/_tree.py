"""The timeline, structured for the rules: call trees per thread, device work per op, steps.

Also the op names and patterns the rules look for (torch's own ``aten`` names and
torch.compile's ranges).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis.insights._intervals import _covered, _Spans, _union
from neuronprof.analysis.insights._timeline import DeviceEvent, HostCategory, HostEvent, Timeline

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


_NONE: tuple[Any, ...] = ()
"""A node's children or device work until it has some: most nodes have neither, and an empty list costs 56 bytes."""


class _Node:
    """A host event with its place in the call tree.

    It holds the event's own fields, under [`HostEvent`][neuronprof.analysis.insights.HostEvent]'s
    names and in its order, so that a trace's events are read straight into the tree
    (``read_of``) without a ``HostEvent`` apiece: one object per event, not two, for a
    trace of millions of events. Read-only to the rules.
    """

    children: Sequence[_Node]
    parent: Optional[_Node]
    device: Sequence[DeviceEvent]
    __slots__ = (
        "name",
        "start_ns",
        "end_ns",
        "thread",
        "category",
        "ext_id",
        "correlation",
        "input_shapes",
        "input_dtypes",
        "children",
        "parent",
        "device",
    )

    def __init__(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        thread: str = "0",
        category: HostCategory = "op",
        ext_id: Optional[int] = None,
        correlation: Optional[int] = None,
        input_shapes: Optional[tuple[tuple[int, ...], ...]] = None,
        input_dtypes: Optional[tuple[str, ...]] = None,
    ) -> None:
        self.name = name
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.thread = thread
        self.category = category
        self.ext_id = ext_id
        self.correlation = correlation
        self.input_shapes = input_shapes
        self.input_dtypes = input_dtypes
        # A root, with nothing under it, until the reader places it in its tree (``_TreeReader``).
        self.parent = None
        self.children = self.device = _NONE

    @classmethod
    def of(cls, ev: HostEvent) -> _Node:
        """The node of a timeline's host event."""
        return cls(
            ev.name,
            ev.start_ns,
            ev.end_ns,
            ev.thread,
            ev.category,
            ev.ext_id,
            ev.correlation,
            ev.input_shapes,
            ev.input_dtypes,
        )

    @property
    def dur(self) -> int:
        return self.end_ns - self.start_ns

    def lineage(self) -> Iterator[_Node]:
        """This node, its parent, the parent's parent... up to the root."""
        p: Optional[_Node] = self
        while p is not None:
            yield p
            p = p.parent

    def walk(self) -> Iterator[_Node]:
        """This node and everything under it, parents before children, children in order."""
        return iter(_preorder(self) if self.children else (self,))

    def device_spans(self) -> list[tuple[int, int]]:
        """The device work of this node and everything under it, as ``(start, end)`` ns, in no set order."""
        out = [(d.start_ns, d.end_ns) for d in self.device]
        stack = list(self.children)
        while stack:
            n = stack.pop()
            if n.device:
                out += [(d.start_ns, d.end_ns) for d in n.device]
            if n.children:
                stack += n.children
        return out

    def device_ns(self) -> int:
        # The union: work on several streams at once is not counted twice.
        return _covered(self.device_spans())

    def self_ns(self) -> int:
        # The duration less the union of the children (overlapping children count once).
        return self.dur - sum(e - s for s, e in _union((c.start_ns, c.end_ns) for c in self.children))


def _preorder(root: _Node) -> list[_Node]:
    """``root`` and everything under it as one list, parents before children, children in order."""
    out: list[_Node] = []
    stack = [root]
    pop, push, add = stack.pop, stack.extend, out.append
    while stack:
        node = pop()
        add(node)
        if node.children:
            push(reversed(node.children))
    return out


class _Step:
    """One step: its span, the ops it calls directly, and every node under it (``nodes``, walked once)."""

    __slots__ = ("node", "top", "start", "end", "nodes")

    def __init__(self, node: _Node) -> None:
        self.node = node
        self.top: list[_Node] = []
        self.start = node.start_ns
        self.end = node.end_ns
        self.nodes: list[_Node] = []


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


def _top_level(step: _Node, reads: Optional[_NameMemo] = None) -> list[_Node]:
    """The ops the step calls directly: Python frames and annotations are transparent.

    ``reads``: ``_top_level_read`` of each ``(name, category)``, kept between the steps of a profile.
    """
    reads = _NameMemo(_top_level_read) if reads is None else reads
    out: list[_Node] = []
    stack = list(reversed(step.children))
    while stack:
        node = stack.pop()
        call, transparent = reads[node.name, node.category]
        if call:
            out.append(node)
        elif transparent and node.children:
            stack.extend(reversed(node.children))
    return out


def _top_level_read(key: tuple[str, str]) -> tuple[bool, bool]:
    """Under a step, whether a ``(name, category)`` is a top-level call, else whether the calls under it are."""
    name, category = key
    # The vocabulary's top-level call (a compiled region once, the guard check never),
    # less torch.compile's own compiling, which runs on the first call only.
    if vocab.counts_as_call(_KINDS.get(category, vocab.K_OTHER), name) and not _COMPILE_WORK.search(name):
        return True, False
    return False, category in ("python", "annotation", "other") and not _DATALOADER.search(name)


_START, _END, _DEVICE = attrgetter("start_ns"), attrgetter("end_ns"), attrgetter("device")
_SHAPES, _NAME, _CATEGORY = attrgetter("input_shapes"), attrgetter("name"), attrgetter("category")


def _fold_redispatches(nodes: list[_Node]) -> list[_Node]:
    """Fold an only child of the same name into its parent: one call, as the tables count it.

    The vocabulary's rule (``folds_into_parent``, torch's ``key_averages()``): a
    dispatcher re-dispatch (``aten::div_`` → ``aten::div_``) is one call; the child's
    children and device work become the parent's.
    """
    folded: set[int] = set()
    for node in nodes:  # parents before children: a chain folds into its top
        parent = node.parent
        if (
            parent is not None
            and len(parent.children) == 1
            and vocab.folds_into_parent(parent.name, node.name, _kind(node))
        ):
            parent.children = node.children
            for child in node.children:
                child.parent = parent
            if node.device:
                parent.device = [*parent.device, *node.device]
            folded.add(id(node))
    return [n for n in nodes if id(n) not in folded] if folded else nodes


# The vocabulary's kinds of the timeline's host categories; annotations and the rest are K_OTHER.
_KINDS = {"op": vocab.K_OP, "python": vocab.K_PY, "step": vocab.K_STEP, "runtime": vocab.K_RUNTIME}


def _kind(node: _Node) -> int:
    """A host event's kind in the vocabulary's terms, for its rules (``counts_as_call``, ``is_collective``...)."""
    return _KINDS.get(node.category, vocab.K_OTHER)


class _Profile:
    """The timeline, structured: steps, their top-level ops, device work per op."""

    def __init__(self, tl: Timeline, unlinked: Optional[int] = None) -> None:
        """``unlinked``, when given: ``tl.host`` holds ``_Node``s in their tree already (a trace's, ``read_of``),
        their device work attached, and so many device events were left unlinked; else its events are read
        into the tree here, as a trace's are."""
        from neuronprof.analysis.insights._tree_reader import _TreeReader

        self.tl = tl
        self.notes: list[str] = list(tl.notes)
        if unlinked is None:
            reader = _TreeReader()
            self.nodes = reader.nodes_of(tl.host, tl.device)
            self.unlinked = reader.link(self.nodes, tl.device)
        else:
            self.nodes, self.unlinked = list(tl.host), unlinked  # type: ignore[arg-type]
        self.nodes = _fold_redispatches(self.nodes)
        self.steps: list[_Step] = []
        reads = _NameMemo(_top_level_read)
        for n in self.nodes:
            if n.category == "step":
                step = _Step(n)
                self.steps.append(step)
                step.top = _top_level(n, reads)
        self.steps.sort(key=lambda s: s.start)
        if not self.steps and self.nodes:
            self.notes.append("no ProfilerStep in this profile: the whole recording is read as one step")
            roots = [n for n in self.nodes if n.parent is None]
            start = min(n.start_ns for n in roots)
            end = max(n.end_ns for n in roots)
            fake = _Node(WHOLE_RECORDING, start, end, category="step")
            fake.parent, fake.device = None, _NONE
            fake.children = sorted(roots, key=lambda n: n.start_ns)
            step = _Step(fake)
            step.top = _top_level(fake, reads)
            self.steps.append(step)
        # A step lasts until its own device work ends (torch.profiler may close the
        # step before the device catches up when nothing synchronises).
        for s in self.steps:
            s.nodes = _preorder(s.node)  # walked once here; every rule reads the list
            s.end = max([s.end, *(d.end_ns for m in filter(_DEVICE, s.nodes) for d in m.device)])
        self.busy = _Spans.covering(list(map(_START, tl.device)), list(map(_END, tl.device)))  # the device's busy time
        self.has_device_time = bool(self.busy)
        self.has_device = tl.device_label is not None or self.has_device_time
        # Shapes seen on any event are proof enough; otherwise what the feeder was told, if anything.
        shapes = map(is_not, map(_SHAPES, tl.host), repeat(None))
        self.record_shapes = True if any(shapes) else tl.record_shapes
        self.n = len(self.steps)
        self.mean_step_ns = sum(self.step_ns(s) for s in self.steps) / self.n if self.n else 0.0
        # Filled by the rules that measure them (see RULE_MODULES): the copies a host_device_copy
        # finding explains, and the step's split between host and device that Insights reports.
        self.claimed: set[int] = set()
        self.host_op_us: Optional[float] = None
        self.device_busy_us: Optional[float] = None
        self.bound = "unknown"

    def release(self) -> None:
        """Take the call tree apart once the rules have read it.

        A parent and its children refer to each other: left so, a large trace's nodes wait
        for the garbage collector; taken apart, they are freed with their timeline.
        """
        for n in self.nodes:
            n.parent = None
            n.children = n.device = _NONE
        for s in self.steps:
            s.node.children, s.nodes, s.top = _NONE, [], []

    def step_ns(self, s: _Step) -> int:
        return max(s.end - s.start, 1)

    def busy_in(self, s: _Step) -> list[tuple[int, int]]:
        return self.busy.clip(s.start, s.end)

    def host_busy_in(self, s: _Step) -> list[tuple[int, int]]:
        # A synchronising op's time is spent waiting for the device, not launching work.
        return _union((n.start_ns, n.end_ns) for n in s.top if n.name not in SYNC_OPS)
