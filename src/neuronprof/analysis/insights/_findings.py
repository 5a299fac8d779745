"""The engine's output: finding kinds, thresholds, findings and their text, Markdown, CSV and HTML forms."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, get_args
from urllib.parse import urlsplit, urlunsplit

from neuronprof._model_base import ResultModel, ResultRow
from neuronprof.model import row_from_dict

if TYPE_CHECKING:
    from neuronprof.render import Block, Format

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
    "host_overhead",
    "communication_wait",
    "emulated_low_precision",
    "cpu_fallback",
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
* ``"host_overhead"``: the host spends much of each step between ops (Python).
* ``"communication_wait"``: collectives take much of each step with no compute beside them.
* ``"emulated_low_precision"``: bfloat16/float16 work on a CPU that has no native
  instructions for it.
* ``"cpu_fallback"``: ops of a device step that fell back to the CPU.
* ``"dominant_op"``: one op takes most of the step: start there.
"""

FINDING_KINDS: tuple[str, ...] = get_args(FindingKind)

DEVICE_KINDS: frozenset[str] = frozenset({"idle_device", "cpu_bound"})
"""Kinds that need device time; skipped with a note on a profile without it."""

GUIDE_PAGE = "insights.md"
"""The guide page (in the documentation sources) that explains every kind."""
GUIDE_TITLE = "Reading the findings"
"""The guide page's title: its first heading, and its name in the site's navigation."""
GUIDE_URL = "docs/insights.md"
"""The guide page "Reading the findings" as a path in the project's sources (``make docs-serve``
serves it at ``/insights/``): where findings point while the guide has no published address."""
DOCS_URL_ENV = "NEURONPROF_DOCS_URL"
"""The environment variable holding the published guide's base address (``https://<host>/<path>/``).

The one place that address is set: ``mkdocs.yml`` builds the site for it (``site_url: !ENV``)
and [`guide_url`][neuronprof.analysis.insights.guide_url] links each finding into it. The
project declares no published address, so it is empty by default and findings point to
``GUIDE_URL``, the page in the sources.
"""


def docs_base_url() -> Optional[str]:
    """Return the published guide's base address, ending in ``/``; ``None`` while it has none.

    Read from ``NEURONPROF_DOCS_URL`` (see ``DOCS_URL_ENV``) each time, as ``mkdocs.yml`` reads
    it for ``site_url``, and written as mkdocs writes ``site_url``. Only an ``http``/``https``
    address with a host is one; any other value is not used.
    """
    parts = urlsplit(os.environ.get(DOCS_URL_ENV, "").strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return urlunsplit(parts._replace(path=path))


def guide_url(kind: str) -> str:
    """Return the address of ``kind``'s section of the guide "Reading the findings".

    ``<base>insights/#<kind>`` on the published guide (mkdocs publishes ``insights.md``
    at ``insights/``) when ``NEURONPROF_DOCS_URL`` is set, else ``docs/insights.md#<kind>``,
    the page in the project's sources. Each section's heading carries the kind as its id.

    Args:
        kind: A finding kind (see [`FindingKind`][neuronprof.analysis.insights.FindingKind]).
    """
    base = docs_base_url()
    if base is None:
        return f"{GUIDE_URL}#{kind}"
    return f"{base}{GUIDE_PAGE.rsplit('.', 1)[0]}/#{kind}"


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
    "host_overhead": "Host time between ops",
    "communication_wait": "Waiting in collectives",
    "emulated_low_precision": "Low precision without hardware support",
    "cpu_fallback": "CPU fallbacks",
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
HOST_OVERHEAD_SHARE = 0.6
"""``host_overhead`` fires when the host is between ops for at least this share of the step..."""
HOST_OVERHEAD_MIN_OPS = 10
"""... and the step calls at least this many ops: with fewer, the gaps are the loop's and the profiler's own
per-step cost, not the model's Python."""
COMMUNICATION_SHARE = 0.1
"""``communication_wait`` fires when collectives with no compute beside them take at least this share of the step."""
LOW_PRECISION_SHARE = 0.1
"""``emulated_low_precision`` fires when such ops take at least this share of the step."""
DOMINANT_SHARE = 0.5
"""``dominant_op`` fires when one op name takes more than this share of the op time..."""
DOMINANT_MIN_STEP_SHARE = 0.1
"""... and at least this share of the step: an op that dominates 2 % of the step is not where to start."""
GAPS_SHOWN = 3
"""How many of the largest gaps between device executions ``idle_device`` lists."""
MIN_SHARE = 0.01
"""A finding whose time at stake is under this share of the step (1 %) is *minor*: listed
last, under "minor", after the findings that matter (and after ``dominant_op``)."""
EVIDENCE_OPS_SHOWN = 8
"""``print()`` and ``to_markdown()`` show at most this many (run-compressed) ops per finding;
``to_json()`` keeps them all."""

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
class Finding(ResultRow):
    """One thing to fix, with its evidence, the time at stake and what to do.

    Attributes:
        kind: What it is about; see [`FindingKind`][neuronprof.analysis.insights.FindingKind].
        title: One line in plain words.
        evidence: What the finding is based on.
        estimated_us: Time per step it could save, in microseconds, as estimated by the
            rule (see the guide page); ``None`` where no estimate is possible.
        suggestion: One concrete thing to try.
        docs: The address of the guide section that explains it ("Reading the findings",
            the kind's section): on the published guide when ``NEURONPROF_DOCS_URL`` sets
            its address, else the page in the sources (see
            [`guide_url`][neuronprof.analysis.insights.guide_url]).
    """

    kind: FindingKind
    title: str
    evidence: Evidence
    estimated_us: Optional[float]
    suggestion: str
    docs: str = ""

    _KIND: ClassVar[str] = "Finding"

    def __post_init__(self) -> None:
        if self.kind not in FINDING_KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}; kinds: {', '.join(FINDING_KINDS)}")
        if not self.docs:
            object.__setattr__(self, "docs", guide_url(self.kind))

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
        return super().from_dict(kwargs)


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
class Insights(ResultModel):
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
        total_findings: How many findings there were before a cut (``head``,
            ``row_limit``); the header counts them and a cut says "showing n of m".
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
    total_findings: Optional[int] = None

    SCHEMA: ClassVar[str] = INSIGHTS_SCHEMA
    _KIND: ClassVar[str] = "neuronprof insights"
    _ROWS: ClassVar[Optional[str]] = "findings"
    _ROW_TYPE: ClassVar[Optional[type]] = Finding
    _ROW_KEY: ClassVar[str] = "kind"
    _ROW_WORDS: ClassVar[str] = "finding of kind"
    _JSON: ClassVar[Mapping[str, Any]] = {"ensure_ascii": False}
    _TOTALS: ClassVar[tuple[str, ...]] = ("total_findings",)

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
        self._as_tuples("notes")
        if self.total_findings is None:
            object.__setattr__(self, "total_findings", len(findings))

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
        head = f"{self.total_findings} finding(s) over {self.steps} step(s) ({where})"
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

    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        """Text and Markdown: a numbered list, the minor findings last; HTML and CSV: a table of the findings."""
        from neuronprof.render import Column, Grid, csv_value, shown

        if row_limit is not None:
            return self.head(row_limit)._view(fmt, None)
        minor_from = len(self.findings) - len(self.minor())
        if fmt == "csv":
            # One line per finding: its fields, the evidence's spread over columns of its own.
            fields = ("calls_per_step", "us_per_step", "share_of_step", "detail")
            raw: list[Column[Finding]] = [
                Column("kind", lambda f: f.kind),
                Column("title", lambda f: f.title),
                Column("estimated_us", lambda f: csv_value(f.estimated_us)),
                Column("ops", lambda f: " ".join(f.evidence.ops)),
                *(Column(n, functools.partial(_evidence_field, name=n)) for n in fields),
                Column("suggestion", lambda f: f.suggestion),
                Column("docs", lambda f: f.docs),
            ]
            return [Grid(raw, self.findings)]
        if fmt == "html":
            cols: list[Column[Finding]] = [
                Column("Finding", lambda f: f.title, left=True),
                Column("Kind", lambda f: f.kind, left=True),
                Column("At stake", _stake, left=True),
                Column("Evidence", lambda f: _evidence_text(f.evidence, f.kind), left=True),
                Column("Try", lambda f: f.suggestion, left=True),
                Column("See", _see, left=True),
            ]
            cut = shown(self.findings, self.total_findings, "findings")
            return [self._header(), Grid(cols, self.findings), "", *cut, *(f"note: {n}" for n in self.notes)]
        lines = [self._header()] if fmt == "text" else [f"**{self._header()}**", ""]
        for i, f in enumerate(self.findings, 1):
            if fmt == "text":
                if i == minor_from + 1:
                    lines.append(f"minor (under {MIN_SHARE:.0%} of the step each):")
                lines.append(f"{i}. [{f.kind}] {f.title} ({_stake(f)})")
                lines.append(f"   evidence: {_evidence_text(f.evidence, f.kind)}")
                lines.append(f"   try: {f.suggestion}")
                lines.append(f"   see: {_see(f)}")
                continue
            if i == minor_from + 1:
                lines += [f"*Minor (under {MIN_SHARE:.0%} of the step each):*", ""]
            lines.append(f"{i}. **{_md(f.title)}** (`{f.kind}`, {_stake(f)})")
            lines.append(f"    - evidence: {_md(_evidence_text(f.evidence, f.kind))}")
            lines.append(f"    - try: {_md(f.suggestion)}")
            section = SECTIONS.get(f.kind, f.kind)
            lines.append(f"    - see: [{_md(section)}]({f.docs}) in the guide, 'Reading the findings'")
        if not self.findings:
            lines.append("(nothing to flag)")
        lines += shown(self.findings, self.total_findings, "findings")
        if fmt == "text":
            return [*lines, *(f"note: {n}" for n in self.notes)]
        return [*lines, *([""] if self.notes else []), *(f"- note: {_md(n)}" for n in self.notes)]

    def _data(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["findings"] = [f.to_dict() for f in self.findings]
        data["notes"] = list(self.notes)
        return data

    @classmethod
    def _from_data(cls, data: Mapping[str, Any]) -> Insights:
        kwargs = {k: v for k, v in data.items() if k != "schema"}
        kwargs["findings"] = tuple(Finding.from_dict(f) for f in kwargs["findings"])
        kwargs["notes"] = tuple(str(n) for n in kwargs.get("notes", ()))
        return row_from_dict(cls, kwargs, "Insights")


def _evidence_field(f: Finding, name: str) -> str:
    from neuronprof.render import csv_value

    return csv_value(getattr(f.evidence, name))


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
        # Under MIN_SHARE never rounds up to it: a minor finding does not read "1% of the step".
        share = ev.share_of_step
        parts.append(f"<{MIN_SHARE:.0%} of the step" if share < MIN_SHARE else f"{share:.0%} of the step")
    text = ", ".join(parts)
    return f"{text}; {ev.detail}" if ev.detail else text


_LISTED_KINDS = frozenset(
    {
        "idle_device",
        "recompilation",
        "graph_break",
        "dominant_op",
        "input_pipeline",
        "host_overhead",
        "communication_wait",
        "emulated_low_precision",
    }
)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")
