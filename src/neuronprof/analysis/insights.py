"""What to fix first: findings read from a profile's timeline, with their evidence.

A table sorted by device time says where the time went; this module says what to
do about it. It looks for the patterns experienced engineers look for in every
trace (host↔device copies, hidden synchronisations, an idle device, a CPU-bound
loop, unfused elementwise chains, dtype conversions, recompilations and graph
breaks, a slow input pipeline, one dominant op) and returns them as
[`Finding`][neuronprof.analysis.insights.Finding]s, most costly first.

The engine, [`analyze`][neuronprof.analysis.insights.analyze], is torch-free and
works on a small [`Timeline`][neuronprof.analysis.insights.Timeline]: the host
events, device events and ``ProfilerStep`` spans of the recorded steps. Two
feeders build one: ``Session.insights()`` from the live profiler's events (in
``neuronprof._collect``), and [`advise`][neuronprof.analysis.insights.advise] from
a Chrome trace file. Both run the same rules, so a live session and its exported
trace give the same findings.

Every rule and threshold is written in the docstring of the function that applies
it and on the guide page "Reading the findings" (``docs/insights.md``). Device
findings need device time: on a profile without it they are skipped with a note,
never guessed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union, get_args

from neuronprof.model import loads, row_from_dict, row_to_dict

__all__ = [
    "DEVICE_KINDS",
    "FINDING_KINDS",
    "INSIGHTS_SCHEMA",
    "DeviceEvent",
    "Evidence",
    "Finding",
    "FindingKind",
    "HostEvent",
    "Insights",
    "Timeline",
    "advise",
    "analyze",
    "timeline_from_trace",
]

INSIGHTS_SCHEMA = "neuronprof.insights/1"

FindingKind = Literal[
    "host_device_copy",
    "hidden_sync",
    "idle_device",
    "cpu_bound",
    "unfused_chain",
    "dtype_conversion",
    "recompilation",
    "graph_break",
    "input_pipeline",
    "dominant_op",
]
"""What a finding is about; stable names, used as anchors of the guide page.

* ``"host_device_copy"``: data copied between host and device inside the steps.
* ``"hidden_sync"``: an op that makes the host wait for the device (``.item()``,
  ``nonzero``, a stream synchronise) inside the steps.
* ``"idle_device"``: the device has nothing to do for much of each step.
* ``"cpu_bound"``: the host spends longer launching ops than the device runs them.
* ``"unfused_chain"``: a run of small elementwise ops that one fused op would replace.
* ``"dtype_conversion"``: tensors converted to another dtype every step.
* ``"recompilation"``: ``torch.compile`` runs a recompiled version of a function.
* ``"graph_break"``: several compiled regions per step: the graph was split.
* ``"input_pipeline"``: the DataLoader takes a large share of each step.
* ``"dominant_op"``: one op takes most of the step: start there.
"""

FINDING_KINDS: tuple[str, ...] = get_args(FindingKind)

DEVICE_KINDS: frozenset[str] = frozenset({"idle_device", "cpu_bound"})
"""Kinds that need device time; skipped with a note on a profile without it."""

GUIDE_PAGE = "insights.md"
"""The guide page (in the documentation sources) that explains every kind."""
GUIDE_URL = "docs/insights.md"
"""The guide page "Reading the findings", as a path in the project's sources (``make docs-serve``
serves it at ``/insights/``); each finding links to ``GUIDE_URL#<kind>``.

The project declares no published documentation address yet (``mkdocs.yml`` has no
``site_url``), so no web address is made up here: once the guide is published, this
one constant becomes its address.
"""
SECTIONS: dict[str, str] = {
    "host_device_copy": "Host↔device copies",
    "hidden_sync": "Hidden synchronisations",
    "idle_device": "Idle device",
    "cpu_bound": "CPU-bound loop",
    "unfused_chain": "Unfused elementwise chains",
    "dtype_conversion": "dtype conversions",
    "recompilation": "Recompilations",
    "graph_break": "Graph breaks",
    "input_pipeline": "Input pipeline",
    "dominant_op": "One dominant op",
}
"""The guide's section title of each kind (the page's headings)."""

# -- thresholds (each one is explained on the guide page) -------------------------------
IDLE_SHARE = 0.5
"""``idle_device`` fires when the device is idle for at least this share of the step."""
CPU_BOUND_SHARE = 0.5
"""``cpu_bound`` fires when ops keep the host busy for at least this share of the step
and longer than the device is busy."""
CHAIN_MIN_OPS = 3
"""``unfused_chain`` fires for at least this many elementwise ops in a row (2 for matmul + add)."""
PIPELINE_SHARE = 0.1
"""``input_pipeline`` fires when ``DataLoader.__next__`` takes at least this share of the step."""
DOMINANT_SHARE = 0.5
"""``dominant_op`` fires when one op name takes more than this share of the op time."""
GAPS_SHOWN = 3
"""How many of the largest gaps between device executions ``idle_device`` lists."""
MIN_SHARE = 0.01
"""A finding whose time at stake is under this share of the step (1 %) is *minor*: listed
last, under "minor", after the findings that matter (and after ``dominant_op``)."""
EVIDENCE_OPS_SHOWN = 8
"""``print()`` and ``to_markdown()`` show at most this many (run-compressed) ops per finding;
``to_json()`` keeps them all."""

HostCategory = Literal["op", "python", "runtime", "annotation", "step", "other"]
DeviceCategory = Literal["kernel", "memcpy", "memset"]


# == the input: a small torch-free timeline ============================================


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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
    """

    host: tuple[HostEvent, ...]
    device: tuple[DeviceEvent, ...] = ()
    backend: str = "cpu"
    device_label: Optional[str] = None
    source: str = ""
    notes: tuple[str, ...] = ()


# == the output: findings ===============================================================


@dataclass(frozen=True)
class Evidence:
    """What a finding is based on, per recorded step (averaged over the steps).

    Attributes:
        ops: The ops involved, e.g. ``("aten::add", "aten::copy_")``.
        calls_per_step: How often the pattern occurs per step.
        us_per_step: Time the pattern takes per step, in microseconds (device time
            where the finding is about the device, host time otherwise).
        share_of_step: ``us_per_step`` over the mean step time, 0–1.
        detail: The specifics in one line (which op caused a copy, which dtypes...).
    """

    ops: tuple[str, ...]
    calls_per_step: Optional[float] = None
    us_per_step: Optional[float] = None
    share_of_step: Optional[float] = None
    detail: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.ops, tuple):
            object.__setattr__(self, "ops", tuple(self.ops))


@dataclass(frozen=True)
class Finding:
    """One thing to fix, with its evidence, the time at stake and what to do.

    Attributes:
        kind: What it is about; see [`FindingKind`][neuronprof.analysis.insights.FindingKind].
        title: One line in plain words.
        evidence: What the finding is based on.
        estimated_us: Time per step it could save, in microseconds, as estimated by the
            rule (see the guide page); ``None`` where no estimate is possible.
        suggestion: One concrete thing to try.
        docs: The full address of the guide section that explains it
            (``GUIDE_URL#<kind>``: "Reading the findings", the kind's section).
    """

    kind: FindingKind
    title: str
    evidence: Evidence
    estimated_us: Optional[float]
    suggestion: str
    docs: str = ""

    def __post_init__(self) -> None:
        if self.kind not in FINDING_KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}; kinds: {', '.join(FINDING_KINDS)}")
        if not self.docs:
            object.__setattr__(self, "docs", f"{GUIDE_URL}#{self.kind}")

    def to_dict(self) -> dict[str, Any]:
        """Return the finding as a JSON-ready dict."""
        return row_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        """Build a finding from [`to_dict`][neuronprof.analysis.insights.Finding.to_dict] output.

        Raises:
            ValueError: A field is missing, unknown or of the wrong type.
        """
        kwargs = dict(data)
        evidence = kwargs.get("evidence")
        if isinstance(evidence, Mapping):
            ev = dict(evidence)
            ev["ops"] = tuple(str(o) for o in ev.get("ops", ()))
            kwargs["evidence"] = row_from_dict(Evidence, ev, "Evidence")
        return row_from_dict(cls, kwargs, "Finding")


def _is_minor(f: Finding, step_us: Optional[float]) -> bool:
    """Whether a finding's time at stake is under ``MIN_SHARE`` of the step (no estimate: never minor)."""
    return f.estimated_us is not None and bool(step_us) and f.estimated_us < MIN_SHARE * (step_us or 0.0)


def _see(f: Finding) -> str:
    section = SECTIONS.get(f.kind, f.kind)
    return f"{f.docs} (the guide, 'Reading the findings' → {section})"


def _stake(f: Finding) -> str:
    if f.estimated_us is None:
        return "time at stake not estimated"
    return "< 0.1 µs/step at stake" if f.estimated_us < 0.05 else f"~{_us(f.estimated_us)}/step at stake"


@dataclass(frozen=True)
class Insights:
    """Findings of one profile, most costly first: what ``s.insights()`` and ``neuronprof advise`` return.

    ``print()`` it for a short list; render it with
    [`to_markdown`][neuronprof.analysis.insights.Insights.to_markdown] or save it with
    [`to_json`][neuronprof.analysis.insights.Insights.to_json] (read back with
    [`from_json`][neuronprof.analysis.insights.Insights.from_json]).

    Attributes:
        findings: The findings, largest estimated time at stake first (those
            without an estimate last).
        backend: Backend of the profile.
        device_label: Device label (``"NEURON"``); ``None`` for a CPU-only profile.
        steps: Recorded steps the figures are averaged over.
        step_us: Mean step time, in microseconds (host span, extended to the end of
            the step's device work).
        host_op_us: Mean time per step the host spends inside ops, in microseconds.
        device_busy_us: Mean time per step the device is busy, in microseconds;
            ``None`` without device time.
        bound: ``"device"`` (the device is busy most of the step), ``"cpu"`` (the
            host is), ``"neither"``, or ``"unknown"`` without device time.
        notes: Findings that were skipped and why, and remarks on the input.
        source: Where the profile came from.
    """

    findings: tuple[Finding, ...]
    backend: str = "cpu"
    device_label: Optional[str] = None
    steps: int = 0
    step_us: Optional[float] = None
    host_op_us: Optional[float] = None
    device_busy_us: Optional[float] = None
    bound: Literal["device", "cpu", "neither", "unknown"] = "unknown"
    notes: tuple[str, ...] = field(default=())
    source: str = ""

    def __post_init__(self) -> None:
        findings = tuple(self.findings)
        for f in findings:
            if not isinstance(f, Finding):
                raise TypeError(f"Insights.findings must hold Finding objects, got {type(f).__name__}")
        step_us = self.step_us

        def key(f: Finding) -> tuple[bool, bool, float]:
            # Minor findings (under MIN_SHARE of the step) come after everything else.
            return (_is_minor(f, step_us), f.estimated_us is None, -(f.estimated_us or 0.0))

        object.__setattr__(self, "findings", tuple(sorted(findings, key=key)))
        if not isinstance(self.notes, tuple):
            object.__setattr__(self, "notes", tuple(self.notes))

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def minor(self) -> list[Finding]:
        """Return the minor findings: time at stake under ``MIN_SHARE`` (1 %) of the step; listed last."""
        return [f for f in self.findings if _is_minor(f, self.step_us)]

    def kinds(self) -> list[str]:
        """Return the kinds of the findings, most costly first."""
        return [f.kind for f in self.findings]

    def of_kind(self, kind: str) -> list[Finding]:
        """Return the findings of one kind (several for, e.g., different chains).

        Raises:
            ValueError: ``kind`` is not a known kind.
        """
        if kind not in FINDING_KINDS:
            raise ValueError(f"unknown finding kind {kind!r}; kinds: {', '.join(FINDING_KINDS)}")
        return [f for f in self.findings if f.kind == kind]

    # -- renderers ------------------------------------------------------------------
    def _header(self) -> str:
        where = self.backend if self.device_label is None else f"{self.backend}, {self.device_label}"
        head = f"{len(self.findings)} finding(s) over {self.steps} step(s) ({where})"
        parts = []
        if self.step_us is not None:
            parts.append(f"step {_us(self.step_us)}")
        if self.host_op_us is not None:
            parts.append(f"host in ops {_us(self.host_op_us)}")
        if self.device_busy_us is not None:
            parts.append(f"device busy {_us(self.device_busy_us)}")
        if self.bound != "unknown":
            parts.append({"device": "device-bound", "cpu": "CPU-bound", "neither": "neither bound"}[self.bound])
        return head + (": " + ", ".join(parts) if parts else "")

    def __str__(self) -> str:
        lines = [self._header()]
        minor_from = len(self.findings) - len(self.minor())
        for i, f in enumerate(self.findings, 1):
            if i == minor_from + 1:
                lines.append(f"minor (under {MIN_SHARE:.0%} of the step each):")
            lines.append(f"{i}. [{f.kind}] {f.title} ({_stake(f)})")
            lines.append(f"   evidence: {_evidence_text(f.evidence, f.kind)}")
            lines.append(f"   try: {f.suggestion}")
            lines.append(f"   see: {_see(f)}")
        if not self.findings:
            lines.append("(nothing to flag)")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def to_text(self) -> str:
        """Return the findings as plain text (what ``print()`` shows)."""
        return str(self)

    def to_markdown(self) -> str:
        """Return the findings as GitHub-flavoured Markdown: one numbered section per finding."""
        lines = [f"**{self._header()}**", ""]
        minor_from = len(self.findings) - len(self.minor())
        for i, f in enumerate(self.findings, 1):
            if i == minor_from + 1:
                lines.append(f"*Minor (under {MIN_SHARE:.0%} of the step each):*")
                lines.append("")
            lines.append(f"{i}. **{_md(f.title)}** (`{f.kind}`, {_stake(f)})")
            lines.append(f"    - evidence: {_md(_evidence_text(f.evidence, f.kind))}")
            lines.append(f"    - try: {_md(f.suggestion)}")
            section = SECTIONS.get(f.kind, f.kind)
            lines.append(f"    - see: [{_md(section)}]({f.docs}) in the guide, 'Reading the findings'")
        if not self.findings:
            lines.append("(nothing to flag)")
        if self.notes:
            lines.append("")
            lines.extend(f"- note: {_md(n)}" for n in self.notes)
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """Return the insights as a JSON-ready dict, including a ``schema`` tag."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["findings"] = [f.to_dict() for f in self.findings]
        data["notes"] = list(self.notes)
        return {"schema": INSIGHTS_SCHEMA, **data}

    def to_json(self, indent: Optional[int] = 2) -> str:
        """Return the insights as JSON; [`from_json`][neuronprof.analysis.insights.Insights.from_json] reads it back."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Insights:
        """Build insights from [`to_dict`][neuronprof.analysis.insights.Insights.to_dict] output.

        Raises:
            ValueError: The data is not neuronprof insights.
        """
        if not isinstance(data, Mapping) or data.get("schema") != INSIGHTS_SCHEMA:
            raise ValueError(f"not neuronprof insights (expected schema {INSIGHTS_SCHEMA!r})")
        kwargs = {k: v for k, v in data.items() if k != "schema"}
        findings = kwargs.get("findings")
        if not isinstance(findings, list):
            raise ValueError("neuronprof insights JSON has no 'findings' list")
        kwargs["findings"] = tuple(Finding.from_dict(f) for f in findings)
        kwargs["notes"] = tuple(str(n) for n in kwargs.get("notes", ()))
        return row_from_dict(cls, kwargs, "Insights")

    @classmethod
    def from_json(cls, text: Union[str, bytes]) -> Insights:
        """Read insights written by [`to_json`][neuronprof.analysis.insights.Insights.to_json].

        Raises:
            ValueError: The text is not JSON, or not neuronprof insights.
        """
        return cls.from_dict(loads(text))


def _us(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f} µs" if value < 10_000 else f"{value / 1000:,.2f} ms"


def _compress(ops: Sequence[str]) -> list[str]:
    """Runs of one op as ``aten::add ×200``."""
    out: list[str] = []
    i = 0
    while i < len(ops):
        j = i
        while j < len(ops) and ops[j] == ops[i]:
            j += 1
        out.append(ops[i] if j - i == 1 else f"{ops[i]} ×{j - i}")
        i = j
    return out


def _ops_text(ev: Evidence, chain: bool) -> str:
    """The evidence's ops for print(): runs compressed, at most ``EVIDENCE_OPS_SHOWN``; "→" only for a sequence."""
    shown = _compress(ev.ops) if chain else list(ev.ops)
    more = len(shown) - EVIDENCE_OPS_SHOWN
    if more > 0:
        shown = [*shown[:EVIDENCE_OPS_SHOWN], f"… {more} more"]
    return (" → " if chain else ", ").join(shown)


def _evidence_text(ev: Evidence, kind: str = "unfused_chain") -> str:
    # Ops in a sequence (a chain, an op and the copy it makes) take arrows; lists take commas.
    parts = [_ops_text(ev, kind not in _LISTED_KINDS)] if ev.ops else []
    if ev.calls_per_step is not None:
        parts.append(f"{ev.calls_per_step:g} call(s)/step")
    if ev.us_per_step is not None:
        parts.append(f"{_us(ev.us_per_step)}/step")
    if ev.share_of_step is not None:
        parts.append(f"{ev.share_of_step:.0%} of the step")
    text = ", ".join(parts)
    return f"{text}; {ev.detail}" if ev.detail else text


_LISTED_KINDS = frozenset({"idle_device", "recompilation", "graph_break", "dominant_op", "input_pipeline"})


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")


# == the engine ==========================================================================

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
    "addcmul addcdiv lerp rsub"
)
ELEMENTWISE_OPS = frozenset("aten::" + n for n in _ELEMENTWISE_NAMES.split(" "))
"""Pointwise ops and the small reductions of normalisations: what fused kernels combine."""
MATMUL_OPS = frozenset({"aten::mm", "aten::matmul", "aten::bmm", "aten::baddbmm", "aten::linear"})
_REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)")
_DATALOADER = re.compile(r"DataLoader.*__next__|__next__.*DataLoader")
_NOT_OPS = ("TorchDynamo Cache Lookup",)
_COMPILE_WORK = re.compile(r"\(dynamo_timed\)$|^TorchDynamo|^_compile|^compile_fx|^dynamo$")


_MACHINERY = re.compile(r"^## .*##$|^##|PythonDispatchMode|^AOTDispatcher|Runtime Wrapper|^CompiledFunction")
"""torch.compile's runtime wrappers and dispatcher bookkeeping (``## Call CompiledFxGraph <hash> ##``,
``PythonDispatchMode``, ``AOTDispatcher Runtime Wrapper Prologue``): never named as an op of the user's."""
_OPTIMIZER = re.compile(r"^Optimizer\.(step|zero_grad)#")
"""The ranges torch.optim records around ``step()`` and ``zero_grad()``."""


def _bookkeeping(name: str) -> bool:
    """torch.compile's own work (guard checks, compiling): not an op of the user's code."""
    return name.startswith(_NOT_OPS) or bool(_COMPILE_WORK.search(name))


class _Node:
    """A host event with its place in the call tree."""

    __slots__ = ("ev", "children", "parent", "device")

    def __init__(self, ev: HostEvent) -> None:
        self.ev = ev
        self.children: list[_Node] = []
        self.parent: Optional[_Node] = None
        self.device: list[DeviceEvent] = []

    @property
    def name(self) -> str:
        return self.ev.name

    @property
    def dur(self) -> int:
        return self.ev.end_ns - self.ev.start_ns

    def walk(self) -> Iterator[_Node]:
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def device_ns(self) -> int:
        # The union: work on several streams at once is not counted twice.
        return sum(e - s for s, e in _union((d.start_ns, d.end_ns) for n in self.walk() for d in n.device))

    def self_ns(self) -> int:
        return self.dur - sum(c.dur for c in self.children)


class _Step:
    __slots__ = ("node", "top", "start", "end")

    def __init__(self, node: _Node) -> None:
        self.node = node
        self.top: list[_Node] = []
        self.start = node.ev.start_ns
        self.end = node.ev.end_ns


def _is_region(name: str) -> bool:
    return name.startswith("Torch-Compiled Region")


def _top_level(step: _Node) -> list[_Node]:
    """The ops the step calls directly: Python frames and annotations are transparent."""
    out: list[_Node] = []
    stack = list(reversed(step.children))
    while stack:
        node = stack.pop()
        cat = node.ev.category
        if (cat == "op" or _is_region(node.name)) and not _bookkeeping(node.name):
            out.append(node)
        elif cat in ("python", "annotation", "other") and not _DATALOADER.search(node.name):
            stack.extend(reversed(node.children))
    return out


def _build_tree(host: Sequence[HostEvent]) -> list[_Node]:
    """Rebuild the nesting per thread (parents first: by start, then longest first)."""
    by_thread: dict[str, list[HostEvent]] = defaultdict(list)
    for ev in host:
        by_thread[ev.thread].append(ev)
    nodes: list[_Node] = []
    for events in by_thread.values():
        events.sort(key=lambda e: (e.start_ns, -(e.end_ns - e.start_ns)))
        stack: list[_Node] = []
        for ev in events:
            node = _Node(ev)
            while stack and (ev.start_ns >= stack[-1].ev.end_ns or ev.end_ns > stack[-1].ev.end_ns):
                stack.pop()
            if stack:
                node.parent = stack[-1]
                stack[-1].children.append(node)
            stack.append(node)
            nodes.append(node)
    return nodes


def _link_device(nodes: Sequence[_Node], device: Sequence[DeviceEvent]) -> int:
    """Attach each device event to the op that launched it; return how many stayed unlinked.

    The correlation id comes first: it ties the device event to the runtime call that
    launched it, and that call to its op (the op whose External id the call carries,
    else the innermost op around the call). The External id is the fallback.
    """
    runtime_by_corr: dict[int, _Node] = {}
    op_by_ext: dict[int, _Node] = {}
    for n in nodes:
        if n.ev.category == "runtime" and n.ev.correlation is not None:
            runtime_by_corr.setdefault(n.ev.correlation, n)
        elif (n.ev.category == "op" or _is_region(n.name)) and n.ev.ext_id is not None:
            op_by_ext.setdefault(n.ev.ext_id, n)
    unlinked = 0
    for d in device:
        target: Optional[_Node] = None
        rt = runtime_by_corr.get(d.correlation) if d.correlation is not None else None
        if rt is not None:
            owner = op_by_ext.get(rt.ev.ext_id) if rt.ev.ext_id is not None else None
            if owner is not None and owner.ev.start_ns <= rt.ev.start_ns and rt.ev.end_ns <= owner.ev.end_ns:
                target = owner
            else:
                target = rt.parent
                while target is not None and target.ev.category != "op" and not _is_region(target.name):
                    target = target.parent
        if target is None and d.ext_id is not None:
            target = op_by_ext.get(d.ext_id)
        if target is None:
            unlinked += 1
        else:
            target.device.append(d)
    return unlinked


def _union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def _clip(intervals: Sequence[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The parts of sorted, disjoint ``intervals`` inside ``[lo, hi)``."""
    out = []
    for s, e in intervals:
        if s >= hi:
            break
        if e > lo:
            out.append((max(s, lo), min(e, hi)))
    return out


class _Profile:
    """The timeline, structured: steps, their top-level ops, device work per op."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.notes: list[str] = list(tl.notes)
        self.nodes = _build_tree(tl.host)
        self.unlinked = _link_device(self.nodes, tl.device) if tl.device else 0
        self.steps: list[_Step] = []
        for n in self.nodes:
            if n.ev.category == "step":
                step = _Step(n)
                self.steps.append(step)
                step.top = _top_level(n)
        self.steps.sort(key=lambda s: s.start)
        if not self.steps and self.nodes:
            self.notes.append("no ProfilerStep in this profile: the whole recording is read as one step")
            roots = [n for n in self.nodes if n.parent is None]
            start = min(n.ev.start_ns for n in roots)
            end = max(n.ev.end_ns for n in roots)
            fake = _Node(HostEvent("(whole recording)", start, end, category="step"))
            fake.children = sorted(roots, key=lambda n: n.ev.start_ns)
            step = _Step(fake)
            step.top = _top_level(fake)
            self.steps.append(step)
        # A step lasts until its own device work ends (torch.profiler may close the
        # step before the device catches up when nothing synchronises).
        for s in self.steps:
            for m in s.node.walk():
                for d in m.device:
                    s.end = max(s.end, d.end_ns)
        self.device_busy = _union((d.start_ns, d.end_ns) for d in tl.device)
        self._busy_ends = [e for _, e in self.device_busy]
        self.has_device_time = bool(self.device_busy)
        self.has_device = tl.device_label is not None or self.has_device_time
        self.n = len(self.steps)

    def step_ns(self, s: _Step) -> int:
        return max(s.end - s.start, 1)

    @property
    def mean_step_ns(self) -> float:
        return sum(self.step_ns(s) for s in self.steps) / self.n if self.n else 0.0

    def busy_in(self, s: _Step) -> list[tuple[int, int]]:
        # The merged intervals are sorted and disjoint: their ends are sorted too.
        first = bisect_right(self._busy_ends, s.start)
        return _clip(self.device_busy[first:], s.start, s.end)

    def host_busy_in(self, s: _Step) -> list[tuple[int, int]]:
        # A synchronising op's time is spent waiting for the device, not launching work.
        return _union((n.ev.start_ns, n.ev.end_ns) for n in s.top if n.name not in SYNC_OPS)


def _per_step(total_ns: float, n: int) -> float:
    return total_ns / n / 1000.0


def _share(us: Optional[float], step_us: float) -> Optional[float]:
    # Not clamped: a share above 1 is a rule's overcount, to be seen, not hidden.
    if us is None or step_us <= 0:
        return None
    return us / step_us


def _cause(node: _Node) -> Optional[_Node]:
    """The op a copy or conversion was made for: the nearest ancestor that is not a conversion wrapper."""
    p = node.parent
    while p is not None and p.ev.category != "step":
        if (p.ev.category == "op" or _is_region(p.name)) and p.name not in CONVERSION_WRAPPERS:
            return p
        p = p.parent
    return None


def _in_sync_op(node: _Node) -> bool:
    p: Optional[_Node] = node
    while p is not None:
        if p.name in SYNC_OPS:
            return True
        p = p.parent
    return False


def _direction(names: Iterable[str]) -> Optional[str]:
    for name in names:
        if _HTOD.search(name):
            return "host→device"
        if _DTOH.search(name):
            return "device→host"
    return None


def _copy_evidence(node: _Node) -> tuple[bool, bool, Optional[str]]:
    """Return (certain memcpy evidence, launched device work, direction) for a copy op's subtree."""
    memcpy_names: list[str] = []
    device_work = False
    for n in node.walk():
        for d in n.device:
            device_work = True
            if (d.category == "memcpy" or _MEMCPY.search(d.name)) and not _DTOD.search(d.name):
                memcpy_names.append(d.name)
        if n.ev.category == "runtime" and _MEMCPY.search(n.name):
            memcpy_names.append(n.name)
    return bool(memcpy_names), device_work, _direction(memcpy_names)


def _dtype_pair(copy: _Node) -> Optional[tuple[str, str]]:
    """(from, to) dtypes of a copy, read from ``aten::copy_(dst, src)`` input types."""
    for n in copy.walk():
        if n.name == "aten::copy_" and n.ev.input_dtypes and len(n.ev.input_dtypes) >= 2:
            dst, src = n.ev.input_dtypes[0], n.ev.input_dtypes[1]
            if dst and src:
                return _torch_dtype(src), _torch_dtype(dst)
    return None


# The C++ type names the profiler records ("Input type"), as torch dtypes.
_TORCH_DTYPES = {
    "float": "torch.float32",
    "double": "torch.float64",
    "c10::Half": "torch.float16",
    "c10::BFloat16": "torch.bfloat16",
    "c10::Float8_e4m3fn": "torch.float8_e4m3fn",
    "c10::Float8_e5m2": "torch.float8_e5m2",
    "c10::complex<float>": "torch.complex64",
    "c10::complex<double>": "torch.complex128",
    "long int": "torch.int64",
    "int64_t": "torch.int64",
    "int": "torch.int32",
    "short int": "torch.int16",
    "signed char": "torch.int8",
    "unsigned char": "torch.uint8",
    "bool": "torch.bool",
}
_FAMILY = {"bool": 0, "int": 1, "uint": 1, "float": 2, "bfloat": 2, "complex": 3}


def _torch_dtype(name: str) -> str:
    """``c10::Half`` → ``torch.float16``; names already torch's, or unknown, unchanged."""
    return _TORCH_DTYPES.get(name.strip(), name)


def _family(dtype: str) -> Optional[int]:
    m = re.match(r"torch\.([a-z]+)", _torch_dtype(dtype))
    return _FAMILY.get(m.group(1)) if m else None


def _in_optimizer(node: _Node) -> bool:
    """Whether the op runs inside ``Optimizer.step``/``zero_grad`` (torch.optim's own internals)."""
    p: Optional[_Node] = node.parent
    while p is not None and p.ev.category != "step":
        if _OPTIMIZER.match(p.name):
            return True
        p = p.parent
    return False


def _is_scalar_source(copy: _Node) -> Optional[bool]:
    for n in copy.walk():
        if n.name == "aten::copy_" and n.ev.input_shapes and len(n.ev.input_shapes) >= 2:
            return n.ev.input_shapes[1] == ()
    return None


class _Tally:
    """Occurrences of one pattern, grouped by a key, summed over the steps."""

    def __init__(self) -> None:
        self.calls: Counter[Any] = Counter()
        self.ns: defaultdict[Any, float] = defaultdict(float)
        self.extra: dict[Any, Any] = {}
        self.steps: defaultdict[Any, set[int]] = defaultdict(set)
        self.step = 0  # the step being read: set by the rule's loop

    def add(self, key: Any, ns: float, extra: Any = None) -> None:
        self.calls[key] += 1
        self.ns[key] += ns
        self.steps[key].add(self.step)
        if extra is not None:
            self.extra.setdefault(key, extra)

    def when(self, key: Any, n: int) -> str:
        """``"in every step"``, or ``"in k of n steps"`` when the pattern is missing from some."""
        k = len(self.steps[key])
        return "in every step" if k >= n else f"in {k} of {n} steps"


def _copies(p: _Profile) -> tuple[list[Finding], set[int]]:
    """``host_device_copy``: data moved between host and device inside the steps.

    Rule: a copy op (``aten::copy_``, ``aten::_copy_from``...) counts when

    1. a device memcpy (``Memcpy HtoD``/``DtoH``, category ``gpu_memcpy``) or a
       runtime call named ``*Memcpy*`` (``cudaMemcpyAsync``) belongs to it, anywhere
       in the step (device-to-device copies excepted); or
    2. on a profile with device time, the copy is *implicit*, made inside a
       compute op the step calls directly (``aten::add`` → ``aten::to`` →
       ``aten::_to_copy`` → ``aten::copy_``), it launched device work, and its
       source is a host value: a 0-dim tensor (a Python scalar or CPU scalar) when
       shapes were recorded, else a copy made for an elementwise op (where Python
       scalars meet device tensors). Reported as host→device. Other implicit copies
       (autocast's casts for a matmul) are dtype conversions.

    Device memcpys not under any copy op (e.g. inside ``aten::nonzero``) count under
    rule 1 too, with the op that launched them as the cause. Copies inside the
    hidden-synchronisation ops are left to ``hidden_sync``. Threshold: any
    occurrence in the recorded steps. Time at stake: the copies' device time per
    step (their host time where there is no device time).
    """
    tally = _Tally()
    claimed: set[int] = set()
    for tally.step, step in enumerate(p.steps):
        top_ids = {id(t) for t in step.top}
        for node in step.node.walk():
            if node.name not in COPY_OPS or (node.parent is not None and node.parent.name in COPY_OPS):
                continue
            if _in_sync_op(node):
                continue
            certain, device_work, direction = _copy_evidence(node)
            cause = _cause(node)
            implicit = cause is not None and id(cause) in top_ids and _host_source(node, cause)
            if not (certain or (p.has_device_time and device_work and implicit)):
                continue
            claimed.add(id(node))
            dev = node.device_ns()
            cost = dev if dev else node.dur
            cause_name = cause.name if cause is not None else _outer_wrapper(node).name
            scalar = _is_scalar_source(node)
            if direction is None and not certain:
                direction = "host→device"  # rule 2: a host value brought to the device for its op
            tally.add((cause_name, direction), cost, (_dtype_pair(node), scalar, bool(dev)))
        # Memcpys the host ops above did not claim (launched by other ops).
        for node in step.node.walk():
            if node.name in COPY_OPS or _in_sync_op(node):
                continue
            for d in node.device:
                if (d.category == "memcpy" or _MEMCPY.search(d.name)) and not _DTOD.search(d.name):
                    if _claimed_ancestor(node, claimed):
                        continue
                    tally.add((node.name, _direction([d.name])), d.end_ns - d.start_ns, (None, None, True))
    findings = []
    step_us = p.mean_step_ns / 1000
    for key, calls in tally.calls.items():
        cause_name, direction = key
        dtypes, scalar, on_device = tally.extra.get(key, (None, None, False))
        us = _per_step(tally.ns[key], p.n)
        what = direction or "host↔device"
        detail = f"{cause_name} copies data {what} on every call"
        if scalar:
            detail += "; the source is a 0-dim tensor: a Python scalar or CPU scalar meeting a device tensor"
        if dtypes:
            detail += f"; {dtypes[0]} → {dtypes[1]}"
        if not on_device:
            detail += "; host time (the copy has no device time here)"
        ops = (cause_name, "aten::copy_") if cause_name not in COPY_OPS else (cause_name,)
        findings.append(
            Finding(
                kind="host_device_copy",
                title=f"{cause_name} copies data {what} {tally.when(key, p.n)}",
                evidence=Evidence(ops, calls / p.n, us, _share(us, step_us), detail),
                estimated_us=us,
                suggestion=_copy_suggestion(cause_name, direction, scalar),
            )
        )
    return findings, claimed


def _copy_suggestion(cause_name: str, direction: Optional[str], scalar: Optional[bool]) -> str:
    if direction == "device→host":
        return "keep results on the device and read them on the host once, after the loop (or every N steps)"
    if scalar or cause_name not in ("aten::to", "aten::_to_copy"):
        return (
            "create constants and inputs on the device once, before the loop (torch.tensor(value, device=...)), "
            "or use a fused op that takes the scalar as a parameter (torch.rms_norm takes eps)"
        )
    return "move the tensor to the device once, before the loop, and keep it there"


def _host_source(copy: _Node, cause: _Node) -> bool:
    """Whether an implicit copy brings a host value to the device (rule 2 of ``_copies``).

    With recorded shapes: the source is 0-dim (a Python scalar or a CPU scalar tensor).
    Without them: the copy is made for an elementwise op, where Python scalars meet
    device tensors; casts made for a matmul (autocast's) are device-side conversions.
    """
    scalar = _is_scalar_source(copy)
    if scalar is not None:
        return scalar
    return cause.name in ELEMENTWISE_OPS


def _claimed_ancestor(node: _Node, claimed: set[int]) -> bool:
    p: Optional[_Node] = node
    while p is not None:
        if id(p) in claimed:
            return True
        p = p.parent
    return False


def _outer_wrapper(node: _Node) -> _Node:
    out = node
    p = node.parent
    while p is not None and p.name in CONVERSION_WRAPPERS:
        out = p
        p = p.parent
    return out


def _syncs(p: _Profile) -> list[Finding]:
    """``hidden_sync``: the host waits for the device in the middle of a step.

    Rule: an op whose result the host must read (``aten::item``,
    ``aten::_local_scalar_dense``, ``aten::nonzero``, ``aten::masked_select``, the
    ``unique`` family; see ``SYNC_OPS``), counted once at its outermost call; a
    device→host copy (``.cpu()``, ``.tolist()``: a ``Memcpy DtoH`` under
    ``aten::copy_``); or a runtime call named ``*Synchronize*``
    (``cudaStreamSynchronize``) inside an op,
    or outside any op except the last one of the step (the loop's own end-of-step
    synchronisation). Only on profiles with a device (on the CPU there is nothing
    to wait for). Threshold: any occurrence. Time at stake: the host time of the
    waiting ops per step.
    """
    if not p.has_device:
        return []
    tally = _Tally()
    for tally.step, step in enumerate(p.steps):
        loose: list[_Node] = []
        for node in step.node.walk():
            if node.name in SYNC_OPS:
                if node.parent is not None and _in_sync_op(node.parent):
                    continue
                tally.add(node.name, node.dur)
            elif node.name in COPY_OPS and not (node.parent is not None and node.parent.name in COPY_OPS):
                certain, _, direction = _copy_evidence(node)
                waits = any(n.ev.category == "runtime" and _SYNC_RUNTIME.search(n.name) for n in node.walk())
                # A synchronise call inside the copy is counted below, by its own name.
                if certain and direction == "device→host" and not waits and not _in_sync_op(node):
                    made_for = _cause(node)
                    source = made_for.name if made_for is not None else _outer_wrapper(node).name
                    tally.add(f"{source} → aten::copy_", node.dur, "a device→host copy")
            elif node.ev.category == "runtime" and _SYNC_RUNTIME.search(node.name):
                parent = node.parent
                while parent is not None and parent.ev.category not in ("op", "step"):
                    parent = parent.parent
                if parent is None or parent.ev.category == "step":
                    loose.append(node)
                elif not _in_sync_op(parent):
                    tally.add(f"{parent.name} → {node.name}", node.dur)
        for node in sorted(loose, key=lambda n: n.ev.start_ns)[:-1]:
            tally.add(node.name, node.dur)
    step_us = p.mean_step_ns / 1000
    findings = []
    for name, calls in tally.calls.items():
        us = _per_step(tally.ns[name], p.n)
        findings.append(
            Finding(
                kind="hidden_sync",
                title=f"{name} makes the host wait for the device {tally.when(name, p.n)}",
                evidence=Evidence(
                    tuple(name.split(" → ")),
                    calls / p.n,
                    us,
                    _share(us, step_us),
                    ("a device→host copy (.cpu(), .tolist(), printing a tensor): " if name in tally.extra else "")
                    + "the host stops launching work until the device has finished everything queued",
                ),
                estimated_us=us,
                suggestion=(
                    "keep values on the device (no .item(), .cpu(), .tolist() or printing of tensors inside "
                    "the loop); read them once after the loop, or every N steps"
                ),
            )
        )
    return findings


def _idle_and_bound(p: _Profile) -> tuple[list[Finding], Optional[float], Optional[float], str]:
    """``idle_device`` and ``cpu_bound``: how the step's time splits between host and device.

    Per step, the window runs from the start of ``ProfilerStep#N`` to the later of
    its end and the end of its device work. *Device busy* is the union of every
    device event inside the window; *host in ops* is the union of the ops the step
    calls directly, except the synchronising ones (their time is spent waiting).

    * ``idle_device`` fires when the device is idle for at least ``IDLE_SHARE``
      (50 %) of the mean step; it lists the ``GAPS_SHOWN`` largest gaps between two
      device executions with the ops on either side and the step they were in (each
      pair of ops once, with its largest gap). Time at stake: the idle time
      per step.
    * ``cpu_bound`` fires when the host is in ops for at least ``CPU_BOUND_SHARE``
      (50 %) of the step and longer than the device is busy: the device waits for
      launches. Time at stake: host-in-ops minus device-busy per step.

    Both need device time; without it they are skipped with a note.
    """
    host_ns = sum(sum(e - s for s, e in p.host_busy_in(st)) for st in p.steps)
    host_us = _per_step(host_ns, p.n) if p.n else None
    if not p.has_device_time:
        return [], host_us, None, "unknown"
    step_us = p.mean_step_ns / 1000
    busy_ns = 0
    gaps: list[tuple[int, str, str, str]] = []
    owner: dict[tuple[int, int], str] = {}
    for node in p.nodes:
        for d in node.device:
            owner[(d.start_ns, d.end_ns)] = node.name
    dev_sorted = sorted(p.tl.device, key=lambda d: d.start_ns)
    starts = [d.start_ns for d in dev_sorted]
    longest = max((d.end_ns - d.start_ns for d in dev_sorted), default=0)
    for st in p.steps:
        busy = p.busy_in(st)
        busy_ns += sum(e - s for s, e in busy)
        # Only events starting within one longest duration before the window can overlap it.
        lo, hi = bisect_left(starts, st.start - longest), bisect_left(starts, st.end)
        events = [d for d in dev_sorted[lo:hi] if d.end_ns > st.start]
        for a, b in zip(events, events[1:]):
            gap = b.start_ns - a.end_ns
            if gap > 0:
                where = st.node.name if st.node.name.startswith("ProfilerStep#") else "the recording"
                gaps.append(
                    (gap, owner.get((a.start_ns, a.end_ns), a.name), owner.get((b.start_ns, b.end_ns), b.name), where)
                )
    busy_us = _per_step(busy_ns, p.n)
    idle_us = max(step_us - busy_us, 0.0)
    findings = []
    if step_us > 0 and idle_us / step_us >= IDLE_SHARE:
        gaps.sort(key=lambda g: -g[0])
        # The largest gap of each pair of ops only: a loop repeats the same gap every step.
        largest: dict[tuple[str, str], tuple[int, str, str, str]] = {}
        for g in gaps:
            largest.setdefault((g[1], g[2]), g)
        gaps = list(largest.values())[:GAPS_SHOWN]
        shown = "; ".join(f"{g[0] / 1000:.1f} µs between {g[1]} and {g[2]} (in {g[3]})" for g in gaps)
        detail = f"device busy {busy_us:.1f} of {step_us:.1f} µs per step"
        if shown:
            detail += f"; largest gaps: {shown}"
        findings.append(
            Finding(
                kind="idle_device",
                title=f"The device is idle {idle_us / step_us:.0%} of each step",
                evidence=Evidence(
                    tuple(dict.fromkeys(n for g in gaps for n in g[1:3])),
                    None,
                    idle_us,
                    _share(idle_us, step_us),
                    detail,
                ),
                estimated_us=idle_us,
                suggestion=(
                    "give the device more work per launch (larger batches, fused ops, torch.compile) and keep "
                    "Python work (logging, data preparation) out of the step"
                ),
            )
        )
    bound = "neither"
    if busy_us >= CPU_BOUND_SHARE * step_us and busy_us >= (host_us or 0):
        bound = "device"
    elif host_us is not None and host_us >= CPU_BOUND_SHARE * step_us and host_us > busy_us:
        bound = "cpu"
        stake = host_us - busy_us
        findings.append(
            Finding(
                kind="cpu_bound",
                title="The loop is CPU-bound: launching ops takes longer than running them",
                evidence=Evidence(
                    (),
                    sum(len(st.top) for st in p.steps) / p.n,
                    host_us,
                    _share(host_us, step_us),
                    f"host in ops {host_us:.1f} µs, device busy {busy_us:.1f} µs per step",
                ),
                estimated_us=stake,
                suggestion=(
                    "launch fewer, larger ops: torch.compile the step (or use CUDA graphs on a GPU), "
                    "fuse small ops, or increase the batch size"
                ),
            )
        )
    return findings, host_us, busy_us, bound


_FUSED_FORMS: tuple[tuple[str, frozenset[str], str], ...] = (
    (
        "rms_norm",
        frozenset({"aten::mean", "aten::rsqrt", "aten::mul"}),
        "torch.rms_norm(x, (x.shape[-1],), weight, eps) (or torch.nn.RMSNorm): one op instead of the chain",
    ),
    (
        "layer_norm",
        frozenset({"aten::mean", "aten::sub", "aten::sqrt"}),
        "torch.nn.functional.layer_norm (or torch.nn.LayerNorm): one op instead of the chain",
    ),
    (
        "layer_norm",
        frozenset({"aten::mean", "aten::sub", "aten::rsqrt"}),
        "torch.nn.functional.layer_norm (or torch.nn.LayerNorm): one op instead of the chain",
    ),
)


def _is_attention(names: Sequence[str], before: Optional[str], after: Optional[str]) -> bool:
    """A softmax (with its scaling and masking) between two matmuls: attention written by hand."""
    return bool({"aten::softmax", "aten::_softmax"} & set(names)) and before in MATMUL_OPS and after in MATMUL_OPS


def _chain_suggestion(names: Sequence[str], before: Optional[str], after: Optional[str]) -> str:
    present = set(names)
    if _is_attention(names, before, after):
        return "torch.nn.functional.scaled_dot_product_attention: one fused attention op"
    if len(names) == 1 and before in MATMUL_OPS and names[0] in ("aten::add", "aten::add_"):
        return "torch.addmm(bias, x, w) or nn.Linear: the bias add fused into the matmul"
    for _form, needed, text in _FUSED_FORMS:
        if needed <= present:
            return text
    return "torch.compile the function: it fuses these elementwise ops into one kernel"


_REDUCTIONS = frozenset(
    "aten::" + n
    for n in ("mean", "sum", "var", "var_mean", "std", "amax", "softmax", "_softmax", "log_softmax", "_log_softmax")
)


def _feeds(prev: _Node, cur: _Node) -> bool:
    """Whether ``cur`` may consume ``prev``'s output: the data-dependence test of a chain.

    Traces record input shapes, not tensor ids or output shapes, so this is a heuristic:
    with shapes recorded for both ops, ``cur`` must take an input of a shape ``prev``
    took (an elementwise op's output has its input's shape), of a matmul's output
    shape after a matmul (``mm`` ``(n, k) @ (k, m)`` → ``(n, m)``), or, after a reduction,
    an input of the same rank as the reduced one (``mean(-1, keepdim=True)``). Without
    shapes, any two consecutive ops on the step's thread with no other op between pass.
    """
    a, b = prev.ev.input_shapes, cur.ev.input_shapes
    if not a or not b:
        return True
    a_shapes = {s for s in a if s}
    b_shapes = {s for s in b if s}
    if not a_shapes or not b_shapes:
        return True  # only scalars recorded: nothing to compare
    if prev.name in MATMUL_OPS:
        # A matmul's output: the first input's leading dims and the second's last one.
        if len(a) >= 2 and a[0] and a[1]:
            last = a[1][0] if prev.name == "aten::linear" else a[1][-1]  # linear's weight is (out, in)
            return (*a[0][:-1], last) in b_shapes
        return True
    if a_shapes & b_shapes:
        return True
    if prev.name in _REDUCTIONS:
        ranks = {len(s) for s in a_shapes}
        return any(len(s) in ranks for s in b_shapes)
    return False


def _tensor_operand(add: _Node) -> bool:
    """Whether an ``add`` adds a tensor (a bias), not a Python number; unknown without shapes."""
    shapes = add.ev.input_shapes
    if not shapes:
        return True
    return sum(1 for s in shapes[:2] if s) >= 2


def _chains(p: _Profile) -> list[Finding]:
    """``unfused_chain``: consecutive small ops that one fused op would replace.

    Rule: a run of at least ``CHAIN_MIN_OPS`` (3) ops called directly by the step,
    one after another, each elementwise or a normalisation's small reduction
    (``ELEMENTWISE_OPS``: ``add``, ``mul``, ``pow``, ``mean``, ``rsqrt``, ``softmax``...),
    each one consuming the previous one's output as far as the trace can tell (see
    ``_feeds``: a shared input shape when shapes are recorded; independent ops on
    tensors of other shapes break the chain);
    also a matmul followed by a bias ``add`` of a tensor (which ``addmm`` fuses; adding
    a Python number is not a bias), and any run
    holding a softmax between two matmuls (attention). Ops inside a
    library op (``aten::rms_norm``'s own decomposition), a compiled region or an
    optimizer's step (``Optimizer.step#...``: its per-parameter ``add_``, ``sqrt``,
    ``div``; ``foreach=True``/``fused=True`` is the optimizer's own fix) are not the
    caller's to fuse and never count. The suggestion names the fused op when the
    chain matches one (``rms_norm``, ``layer_norm``, ``scaled_dot_product_attention``,
    ``addmm``), else ``torch.compile``. Time at stake: the chain's device time minus
    its longest op's (one fused pass remains; for a bias add, the add's whole time),
    or the same on host time without device time.
    """
    tally = _Tally()
    totals: defaultdict[Any, int] = defaultdict(int)  # the chains' own time
    gaps: defaultdict[Any, int] = defaultdict(int)  # device idle between their executions
    for tally.step, step in enumerate(p.steps):
        tops = step.top
        link = [not _in_optimizer(t) and t.name in ELEMENTWISE_OPS for t in tops]
        i = 0
        while i < len(tops):
            if not link[i]:
                i += 1
                continue
            j = i + 1
            while j < len(tops) and link[j] and _feeds(tops[j - 1], tops[j]):
                j += 1
            run = tops[i:j]
            before = tops[i - 1].name if i > 0 else None
            after = tops[j].name if j < len(tops) else None
            addmm = (
                len(run) == 1
                and before in MATMUL_OPS
                and run[0].name in ("aten::add", "aten::add_")
                and _feeds(tops[i - 1], run[0])
                and _tensor_operand(run[0])
            )
            attention = _is_attention([n.name for n in run], before, after)
            if len(run) >= CHAIN_MIN_OPS or addmm or attention:
                names = tuple(n.name for n in run)
                costs = [n.device_ns() for n in run] if p.has_device_time else [n.dur for n in run]
                # One fused pass remains; a fused bias add costs nothing extra.
                stake = sum(costs) if addmm else sum(costs) - max(costs)
                gap_ns = 0
                if p.has_device_time:
                    merged = _union((d.start_ns, d.end_ns) for n in run for m in n.walk() for d in m.device)
                    gap_ns = sum(b[0] - a[1] for a, b in zip(merged, merged[1:]))
                # Plain chains are told apart by their ops; the fused forms also by their neighbours.
                key = (names, before, after) if addmm or attention else (names, None, None)
                tally.add(key, stake, (before, after))
                totals[key] += sum(costs)
                gaps[key] += gap_ns
            i = j
    findings = []
    step_us = p.mean_step_ns / 1000
    for key, calls in tally.calls.items():
        names = key[0]
        before, after = tally.extra[key]
        total_ns, gap_total = totals[key], gaps[key]
        us = _per_step(total_ns, p.n)
        saved = _per_step(tally.ns[key], p.n)
        label = "device" if p.has_device_time else "host"
        detail = f"{len(names)} separate ops, each a full pass over memory; {label} time shown"
        if p.has_device_time and gap_total:
            detail += f"; {_per_step(gap_total, p.n):.1f} µs/step of gaps between their device executions"
        if len(names) == 1:
            title = f"{before} then {names[0]}: an unfused bias add"
            ops = (str(before), *names)
            detail = f"the bias is added in a second pass over the matmul's output; {label} time shown"
        elif _is_attention(names, before, after):
            title = "Attention written as matmul, softmax, matmul: one fused op exists"
            ops = (str(before), *names, str(after))
            detail = f"the seq × seq scores go through memory between {len(names) + 2} ops; {label} time shown"
        else:
            title = f"{len(names)} elementwise ops in a row could be one fused op"
            ops = names
        findings.append(
            Finding(
                kind="unfused_chain",
                title=title,
                evidence=Evidence(ops, calls / p.n, us, _share(us, step_us), detail),
                estimated_us=saved,
                suggestion=_chain_suggestion(names, before, after),
            )
        )
    return findings


def _promotes(src: str, dst: str) -> bool:
    """Whether a 0-dim ``src`` converted to ``dst`` is a Python number's promotion: same family or wider."""
    a, b = _family(src), _family(dst)
    return a is not None and b is not None and a <= b


def _conversions(p: _Profile, claimed: set[int]) -> list[Finding]:
    """``dtype_conversion``: tensors converted to another dtype in every step.

    Rule: an ``aten::_to_copy`` (each call is a real conversion; ``aten::to`` returns
    its input unchanged when nothing changes) that is either called by the step
    itself (an explicit ``.float()``/``.to(dtype)``) or made implicitly by an op the
    step calls directly (``aten::add`` converting a ``double`` Python scalar to
    ``float``). Conversions inside a library op's implementation or an optimizer's
    step (``Optimizer.step#...``) are not counted, and copies already reported as
    ``host_device_copy`` are not reported twice. A 0-dim source (a Python scalar:
    ``x * 3``, ``.add_(1.0)``) converted to a dtype of its own family or a wider one
    (bool → int → float → complex; ``torch.float64`` → ``torch.float32``) is torch's
    type promotion of a number, not the caller's conversion, and is not reported.
    Time at stake: the time the conversions keep the host or the device busy (the
    union of their host calls and their device work, which overlap), per step.
    Threshold: any occurrence. Time at stake: the conversions' host time plus their
    device time per step.
    """
    tally = _Tally()
    for tally.step, step in enumerate(p.steps):
        top_ids = {id(t) for t in step.top}
        for node in step.node.walk():
            if node.name != "aten::_to_copy":
                continue
            copies = [n for n in node.walk() if n.name in COPY_OPS]
            if any(id(c) in claimed for c in copies):
                continue
            cause = _cause(node)
            wrapper = _outer_wrapper(node)
            explicit = id(wrapper) in top_ids
            implicit = cause is not None and id(cause) in top_ids
            if not (explicit or implicit) or _in_optimizer(node):
                continue
            pair, scalar = _dtype_pair(node), _is_scalar_source(node)
            if not explicit and scalar and pair and _promotes(*pair):
                continue  # a Python number meeting a tensor: torch's own type promotion
            key = cause.name if implicit and cause is not None else wrapper.name
            # The host call and its device work overlap in time: their union, not their sum.
            spans = [(node.ev.start_ns, node.ev.end_ns)]
            spans += [(d.start_ns, d.end_ns) for m in node.walk() for d in m.device]
            tally.add(key, sum(e - s for s, e in _union(spans)), (pair, scalar, explicit))
    findings = []
    step_us = p.mean_step_ns / 1000
    for key, calls in tally.calls.items():
        dtypes, scalar, explicit = tally.extra[key]
        us = _per_step(tally.ns[key], p.n)
        conv = f" ({dtypes[0]} → {dtypes[1]})" if dtypes else ""  # dtypes need record_shapes=True
        if explicit:
            detail = f"an explicit conversion{conv} in the step"
            suggestion = "convert once before the loop (weights and constants), or create the tensor in the dtype used"
        else:
            detail = f"{key} converts one of its inputs to another dtype{conv} on every call"
            if scalar:
                detail += "; the input is a 0-dim tensor: a Python scalar or a constant of another dtype"
            suggestion = (
                "give constants the tensor's dtype (torch.tensor(eps, dtype=x.dtype)), or use a fused op that "
                "takes the scalar as a parameter (torch.rms_norm takes eps)"
            )
        findings.append(
            Finding(
                kind="dtype_conversion",
                title=f"{key} converts a tensor's dtype {tally.when(key, p.n)}",
                evidence=Evidence((key, "aten::_to_copy"), calls / p.n, us, _share(us, step_us), detail),
                estimated_us=us,
                suggestion=suggestion,
            )
        )
    return findings


def _compiled(p: _Profile) -> list[Finding]:
    """``recompilation`` and ``graph_break``: what ``Torch-Compiled Region: k/n`` says.

    * ``recompilation``: a region ``k/n`` with ``n > 0`` ran: frame ``k`` was compiled
      ``n + 1`` times (guards failed: new shapes, dtypes or Python values). Threshold:
      any. Time at stake: torch.compile's own work (``... (dynamo_timed)`` ranges,
      guard building, compiling) recorded inside the steps, per step, as the *union*
      of those ranges in each step (they nest, and are never added up), so it can
      never exceed the step; no estimate when the recompilation happened before the
      recorded steps (no compile work inside them).
    * ``graph_break``: more than one distinct compiled frame per step (on average):
      the function was split into several graphs with eager Python between them.
      Threshold: more than one frame per step. Time at stake: the host time of the
      ops run between the regions, per step; not estimated when no op runs between them.
    """
    findings = []
    versions: dict[int, set[int]] = defaultdict(set)
    frames_per_step: list[int] = []
    between_ns = 0
    compile_ns = 0
    for st in p.steps:
        frames: set[int] = set()
        compile_spans: list[tuple[int, int]] = []
        for node in st.node.walk():
            m = _REGION.match(node.name)
            if m:
                k, n = int(m.group(1)), int(m.group(2))
                frames.add(k)
                versions[k].add(n)
            elif _COMPILE_WORK.search(node.name) and not node.name.startswith(_NOT_OPS):
                # (the cache lookup is the guard check of every call, not compiling)
                compile_spans.append((node.ev.start_ns, node.ev.end_ns))
        # The union of the compile ranges inside the step: the ranges nest ("compile_attempt_0
        # (dynamo_timed)" inside "compile_attempt_0") and must not be added up.
        compile_ns += sum(e - s for s, e in _clip(_union(compile_spans), st.start, st.end))
        frames_per_step.append(len(frames))
        if len(frames) > 1:
            regions = [t for t in st.top if _is_region(t.name)]
            if regions:
                lo, hi = regions[0].ev.start_ns, regions[-1].ev.end_ns
                between_ns += sum(t.dur for t in st.top if not _is_region(t.name) and lo <= t.ev.start_ns <= hi)
    step_us = p.mean_step_ns / 1000
    recompiled = {k: sorted(v) for k, v in versions.items() if any(n > 0 for n in v)}
    if recompiled:
        names = tuple(f"Torch-Compiled Region: {k}/{max(v)}" for k, v in sorted(recompiled.items()))
        stake = _per_step(compile_ns, p.n) if compile_ns else None
        findings.append(
            Finding(
                kind="recompilation",
                title="torch.compile recompiled: "
                + ", ".join(f"frame {k} has {max(v) + 1} versions" for k, v in sorted(recompiled.items())),
                evidence=Evidence(
                    names,
                    None,
                    stake,
                    _share(stake, step_us),
                    "a compiled function's guards failed (new shapes, dtypes or Python values) and it was compiled "
                    "again",
                ),
                estimated_us=stake,
                suggestion=(
                    "keep shapes and dtypes stable (pad to fixed sizes), mark varying sizes dynamic "
                    "(torch._dynamo.mark_dynamic) and see why with TORCH_LOGS=recompiles"
                ),
            )
        )
    if frames_per_step and p.n and sum(frames_per_step) / p.n > 1:
        per = sum(frames_per_step) / p.n
        us = _per_step(between_ns, p.n) if between_ns else None  # nothing between: not estimated
        findings.append(
            Finding(
                kind="graph_break",
                title=f"{per:g} compiled regions per step: graph breaks split the compiled function",
                evidence=Evidence(
                    tuple(sorted({f"Torch-Compiled Region: {k}/*" for k in versions})),
                    per,
                    us,
                    _share(us, step_us),
                    "eager Python and ops run between the compiled graphs, and each graph is launched separately",
                ),
                estimated_us=us,
                suggestion=(
                    "find the breaks with TORCH_LOGS=graph_breaks (or torch._dynamo.explain) and remove them; "
                    "fullgraph=True makes any break an error"
                ),
            )
        )
    return findings


def _pipeline(p: _Profile) -> list[Finding]:
    """``input_pipeline``: the DataLoader's ``__next__`` takes a large share of the step.

    Rule: the ``enumerate(DataLoader)#...__next__`` ranges torch.profiler records
    inside the steps take at least ``PIPELINE_SHARE`` (10 %) of the mean step. Time
    at stake: their time per step.
    """
    ns = 0
    calls = 0
    name = ""
    for st in p.steps:
        for node in st.node.walk():
            if _DATALOADER.search(node.name) and not (node.parent is not None and _DATALOADER.search(node.parent.name)):
                ns += node.dur
                calls += 1
                name = node.name
    step_us = p.mean_step_ns / 1000
    us = _per_step(ns, p.n) if p.n else 0.0
    if not calls or step_us <= 0 or us / step_us < PIPELINE_SHARE:
        return []
    return [
        Finding(
            kind="input_pipeline",
            title=f"Loading the next batch takes {us / step_us:.0%} of each step",
            evidence=Evidence(
                (name,), calls / p.n, us, _share(us, step_us), "the device waits while the host loads data"
            ),
            estimated_us=us,
            suggestion=(
                "load in the background: DataLoader(num_workers=4, pin_memory=True, persistent_workers=True), "
                "and move preprocessing into the workers or onto the device"
            ),
        )
    ]


def _dominant(p: _Profile) -> list[Finding]:
    """``dominant_op``: one op takes most of the time: start there.

    Rule: self time per op name (device time where the profile has it, else host
    time), summed over the steps; the top name fires when it holds more than
    ``DOMINANT_SHARE`` (50 %) of the total. torch.compile's machinery (``## Call
    CompiledFxGraph <hash> ##``, ``PythonDispatchMode``, the AOT runtime wrappers;
    ``_MACHINERY``) is never named: its time counts for the compiled region around it
    (``Torch-Compiled Region: k/n``), which is named instead when it dominates.
    No time-at-stake estimate: how much of it can be saved depends on the op.
    """
    totals: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for st in p.steps:
        for node in st.node.walk():
            if node.ev.category != "op" and not _is_region(node.name) and not _MACHINERY.search(node.name):
                continue
            if _bookkeeping(node.name) or (node.parent is not None and _bookkeeping(node.parent.name)):
                continue
            name = node.name
            if _MACHINERY.search(name):
                # A compiled graph's wrapper: its time is the compiled region's, else nobody's.
                region = node.parent
                while region is not None and not _is_region(region.name):
                    region = region.parent
                if region is None:
                    continue
                name = region.name
            value = sum(d.end_ns - d.start_ns for d in node.device) if p.has_device_time else node.self_ns()
            totals[name] += value
            if name == node.name:
                calls[name] += 1
    total = sum(totals.values())
    if not total:
        return []
    name, value = totals.most_common(1)[0]
    share = value / total
    if share <= DOMINANT_SHARE or len(totals) < 2:
        return []
    label = "device" if p.has_device_time else "host"
    us = _per_step(value, p.n)
    return [
        Finding(
            kind="dominant_op",
            title=f"{name} takes {share:.0%} of the {label} time: start here",
            evidence=Evidence(
                (name,),
                calls[name] / p.n,
                us,
                _share(us, p.mean_step_ns / 1000),
                f"{share:.0%} of the self {label} time",
            ),
            estimated_us=None,
            suggestion=(
                f"look at {name}'s input shapes (record_shapes=True) and its place on the roofline "
                "(s.roofline()): a smaller dtype, a better layout or a fused form may speed it up"
            ),
        )
    ]


def analyze(timeline: Timeline) -> Insights:
    """Return the findings of a profile's timeline, most costly first.

    Every rule is applied to the recorded steps (``ProfilerStep#N``; a profile
    without them is read as one step) and its figures are averaged over them.

    Args:
        timeline: The events, from ``Session.insights()``'s feeder or
            [`timeline_from_trace`][neuronprof.analysis.insights.timeline_from_trace].

    Returns:
        [`Insights`][neuronprof.analysis.insights.Insights]; device findings are
        skipped with a note when the profile has no device time.

    Raises:
        TypeError: ``timeline`` is not a [`Timeline`][neuronprof.analysis.insights.Timeline].
    """
    if not isinstance(timeline, Timeline):
        raise TypeError(f"analyze() takes a Timeline, got {type(timeline).__name__}")
    p = _Profile(timeline)
    notes = p.notes
    if not p.steps:
        notes.append("the profile holds no events to analyse")
        return Insights((), timeline.backend, timeline.device_label, 0, notes=tuple(notes), source=timeline.source)
    copies, claimed = _copies(p)
    idle, host_us, busy_us, bound = _idle_and_bound(p)
    findings = [
        *copies,
        *_syncs(p),
        *idle,
        *_chains(p),
        *_conversions(p, claimed),
        *_compiled(p),
        *_pipeline(p),
        *_dominant(p),
    ]
    if timeline.device_label is None and not p.has_device_time:
        notes.append(
            "CPU-only profile: there is no device, so the device findings (host↔device copies, hidden "
            "synchronisations, idle device, CPU-bound loop) do not apply"
        )
    elif not p.has_device_time:
        notes.append(
            f"no {timeline.device_label or 'device'} time in this profile: the idle-device and CPU-bound findings "
            "were skipped, not guessed (run `neuronprof doctor` to see what this build can record)"
        )
    if p.unlinked and p.has_device_time:
        notes.append(f"{p.unlinked} device event(s) carry no link to a host op; they count as device time only")
    return Insights(
        findings=tuple(findings),
        backend=timeline.backend,
        device_label=timeline.device_label,
        steps=p.n,
        step_us=p.mean_step_ns / 1000,
        host_op_us=host_us,
        device_busy_us=busy_us,
        bound=bound,  # type: ignore[arg-type]
        notes=tuple(notes),
        source=timeline.source,
    )


# == the offline feeder ===================================================================

_DEVICE_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "memcpy": "memcpy",
    "memset": "memset",
    "mtia_ccp_events": "kernel",
}


def _shapes(dims: Any) -> Optional[tuple[tuple[int, ...], ...]]:
    if not isinstance(dims, list):
        return None
    out = []
    for d in dims:
        if isinstance(d, list) and all(type(x) is int for x in d):
            out.append(tuple(d))
        else:
            out.append(())
    return tuple(out)


def timeline_from_trace(path: Union[str, os.PathLike[str]]) -> Timeline:
    """Read a Chrome/Perfetto trace file or folder into a [`Timeline`][neuronprof.analysis.insights.Timeline].

    What an event is (device work, a step, an op, a runtime call) and which processes
    and lanes are left out (derived views such as torch_npu's "Overlap Analysis", the
    XLA viewer's "Steps"/"XLA Modules" lanes) is decided by the table loader's own
    functions (``analysis/trace.py``: ``event_kind``, ``process_roles``,
    ``is_container_lane``), so the findings and the tables read the same events.

    Raises:
        TraceError: The path is missing, or a file is not a readable trace.
    """
    from neuronprof.analysis._jsonstream import EventStream
    from neuronprof.analysis.errors import TraceError
    from neuronprof.analysis.trace import (
        _K_DEVICE,
        _K_OP,
        _K_PY,
        _K_RUNTIME,
        _K_STEP,
        _SKIP_CATS,
        _id,
        _ns,
        _time_error,
        event_kind,
        find_trace_files,
        is_container_lane,
        process_roles,
    )

    def _int_or_none(value: Any) -> Optional[int]:
        found = _id(value)  # the table loader's rule: an int or the text of one ("7"); 0 is an id
        return found if found >= 0 else None

    files = find_trace_files(path)
    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    notes: list[str] = []
    backend, label = "cpu", None
    for fi, f in enumerate(files):
        stream = EventStream(f)
        skipped = 0
        procs: dict[Any, list[str]] = {}
        lanes: dict[Any, str] = {}
        read: list[tuple[str, str, int, int, Any, Any, dict[str, Any]]] = []
        for index, ev in enumerate(stream):
            ph = ev.get("ph")
            if ph == "M":
                meta_args = ev.get("args")
                value = (
                    meta_args.get("name" if ev.get("name") != "process_labels" else "labels")
                    if isinstance(meta_args, dict)
                    else None
                )
                if isinstance(value, str):
                    with _suppress_unhashable():
                        if ev.get("name") in ("process_name", "process_labels"):
                            procs.setdefault(ev.get("pid"), []).append(value)
                        elif ev.get("name") == "thread_name":
                            lanes[(ev.get("pid"), ev.get("tid"))] = value
                continue
            if ph != "X":
                if ph in ("B", "E", "b", "e"):
                    skipped += 1
                continue
            name, cat, ts, dur = ev.get("name"), ev.get("cat"), ev.get("ts"), ev.get("dur")
            if not isinstance(name, str):
                raise TraceError(f"{f}: event #{index} is not a complete event with name, ts and dur")
            start, length = _ns(ts), _ns(dur)
            if start is None:
                raise TraceError(_time_error(f, index, name, "ts", ts))
            if length is None:
                raise TraceError(_time_error(f, index, name, "dur", dur))
            if length < 0:
                raise TraceError(f"{f}: event #{index} ({name!r}) has a negative duration ({dur})")
            cat = cat if isinstance(cat, str) else ""
            if cat in _SKIP_CATS:
                continue
            raw_args = ev.get("args")
            args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
            read.append((name, cat, start, start + length, ev.get("pid"), ev.get("tid"), args))
        analysis_pids, device_pids = process_roles(procs)
        for name, cat, start, end, pid, tid, args in read:
            with _suppress_unhashable():
                if pid in analysis_pids:
                    continue
                if pid in device_pids and is_container_lane(lanes.get((pid, tid))):
                    continue
            kind = event_kind(name, cat)
            on_device = kind == _K_DEVICE
            with _suppress_unhashable():
                on_device = on_device or (pid in device_pids and kind != _K_STEP)
            if kind == _K_STEP and pid in device_pids:
                continue  # the device-side copy of a step annotation (as the table reader)
            if on_device:
                dcat = _DEVICE_CATS.get(cat.lower()) or ("memcpy" if _MEMCPY.search(name) else "kernel")
                device.append(
                    DeviceEvent(
                        name,
                        start,
                        end,
                        dcat,  # type: ignore[arg-type]
                        ext_id=_int_or_none(args.get("External id", args.get("external id"))),
                        correlation=_int_or_none(args.get("correlation")),
                    )
                )
                continue
            hcat: HostCategory
            if kind == _K_STEP:
                hcat = "step"
            elif kind == _K_OP:
                hcat = "op"
            elif kind == _K_PY:
                hcat = "python"
            elif kind == _K_RUNTIME:
                hcat = "runtime"
            elif cat.lower() == "user_annotation":
                hcat = "annotation"
            else:
                hcat = "other"
            dtypes = args.get("Input type")
            host.append(
                HostEvent(
                    name,
                    start,
                    end,
                    thread=f"{fi}:{pid}:{tid}",
                    category=hcat,
                    ext_id=_int_or_none(args.get("External id", args.get("external id"))),
                    correlation=_int_or_none(args.get("correlation")) if hcat == "runtime" else None,
                    input_shapes=_shapes(args.get("Input Dims", args.get("Input dims"))),
                    input_dtypes=tuple(str(t) for t in dtypes) if isinstance(dtypes, list) else None,
                )
            )
        if skipped:
            notes.append(f"{os.path.basename(f)}: {skipped} begin/end or async event(s) not read")
        meta = stream.metadata.get("neuronprof")
        if isinstance(meta, dict) and isinstance(meta.get("backend"), str):
            backend = meta["backend"]
            label = meta.get("device_label") if isinstance(meta.get("device_label"), str) else None
        elif isinstance(stream.metadata.get("deviceProperties"), list) and stream.metadata["deviceProperties"]:
            backend, label = "cuda", "CUDA"
    if label is None and device:
        label = "DEVICE"
        backend = "device" if backend == "cpu" else backend
    return Timeline(tuple(host), tuple(device), backend, label, ", ".join(files), tuple(notes))


def _suppress_unhashable() -> contextlib.AbstractContextManager[None]:
    """An unhashable pid/tid names no process: it matches nothing (as in the table reader)."""
    return contextlib.suppress(TypeError)


def advise(source: Union[str, os.PathLike[str]]) -> Insights:
    """Return the findings of a trace file or folder (what ``neuronprof advise`` prints).

    Args:
        source: A Chrome/Perfetto trace (``.json``, ``.json.gz``) or a folder of them.

    Raises:
        TraceError: The trace cannot be read.
    """
    return analyze(timeline_from_trace(source))
