"""A gate for CI: did the current run get slower than the baseline, beyond a threshold?

``neuronprof check BASELINE CURRENT --max-slowdown 5%`` reads two saved profiles (trace
files, or folders of runs) and judges the step's host time (``--device``: its device
time; ``--ops NAME``: named ops) with the method of ``neuronprof diff``'s verdicts
([`shift`][neuronprof.analysis.shift]). Exit status: 0 when no figure is slower beyond
the threshold with the stated confidence (the whole interval at or below
``1 + max_slowdown``), 1 when one is (the whole interval above it; named, with its
interval), 2 when it cannot tell (the interval holds both, too few samples, a figure
missing: the line says what) or the input is bad. A regression wins over "cannot tell".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from neuronprof._model_base import ResultModel, ResultRow
from neuronprof.analysis._samples import judge, op_time, sample_unit, step_device_time, step_time, trace_of
from neuronprof.analysis._verdict import Shift
from neuronprof.analysis.trace import TraceSource, load_trace
from neuronprof.typing import MeasuredTime

if TYPE_CHECKING:
    from neuronprof.render import Block, Column, Format

__all__ = ["Check", "CheckItem", "check"]

OK, REGRESSION, CANNOT_TELL = 0, 1, 2
CHECK_SCHEMA = "neuronprof.check/1"


@dataclass(frozen=True)
class CheckItem(ResultRow):
    """One judged figure of a [`Check`][neuronprof.analysis.Check].

    Attributes:
        what: The figure, e.g. ``"step time (host)"`` or ``"aten::mm self CPU time"``.
        shift: Its change from the baseline; ``None`` when there is no verdict (see ``reason``).
        status: 0 (no slowdown beyond the threshold at this confidence), 1 (a slowdown
            beyond it) or 2 (cannot tell).
        reason: Why it cannot tell, in words (what is missing); ``None`` otherwise.
    """

    what: str
    shift: Optional[Shift]
    status: int
    reason: Optional[str] = None

    _KIND: ClassVar[str] = "check item"

    def to_dict(self) -> dict[str, Any]:
        """Return the item as a JSON-ready dict (its shift nested)."""
        shift = None if self.shift is None else self.shift.to_dict()
        return {"what": self.what, "shift": shift, "status": self.status, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckItem:
        """Build an item from ``to_dict()`` output.

        Raises:
            ValueError: A field is missing or of the wrong type.
        """
        status, shift = data.get("status"), data.get("shift")
        if not isinstance(data.get("what"), str) or status not in (OK, REGRESSION, CANNOT_TELL):
            raise ValueError(f"not a {cls._KIND}: {dict(data)!r}")
        reason = data.get("reason")
        return cls(str(data["what"]), None if shift is None else Shift.from_dict(shift), int(status), reason)

    def line(self, max_slowdown: float) -> str:
        """The figure's line for a CI log.

        Args:
            max_slowdown: The threshold it was judged against, as a fraction (0.05 for 5 %).
        """
        s = self.shift
        if s is None or s.ratio is None or s.low is None or s.high is None:
            return f"cannot tell, {self.what}: {self.reason}"
        interval = f"B/A {s.ratio:.3f}× ({s.confidence:.0%} CI {s.low:.3f}–{s.high:.3f}×, {s.n_a} vs {s.n_b} samples)"
        if self.status == REGRESSION:
            return f"REGRESSION, {self.what}: slower beyond {max_slowdown:.0%}: {interval}"
        if self.status == CANNOT_TELL:
            return f"cannot tell, {self.what}: {interval}; {self.reason}"
        return f"ok, {self.what}: not slower beyond {max_slowdown:.0%}: {interval}"


@dataclass(frozen=True)
class Check(ResultModel):
    """The gate's answer: every judged figure, and the exit status they make.

    It has the verbs of every result: ``print()``/``to_text`` (one line per figure for a
    CI log), ``to_markdown`` (a block for a CI job summary, e.g. ``$GITHUB_STEP_SUMMARY``),
    ``to_csv``, ``to_html``, ``to_dataframe``, ``to_json``/``from_json``, ``head`` and
    ``row`` (a figure by its name).

    Attributes:
        items: The judged figures, in the order asked.
        max_slowdown: The threshold, as a fraction (0.05 for 5 %).
        confidence: The intervals' confidence level.
        unit: What one sample is (a step, or a run's median step), in words.
        total_items: How many figures were judged before any limit (``head``).
    """

    items: tuple[CheckItem, ...]
    max_slowdown: float
    confidence: float
    unit: str
    total_items: Optional[int] = None
    # The exit status of every figure, taken before any limit (carried by head() and the JSON).
    _exit_code: Optional[float] = field(default=None, init=False, repr=False)

    SCHEMA: ClassVar[str] = CHECK_SCHEMA
    _KIND: ClassVar[str] = "a neuronprof check"
    _ROWS: ClassVar[Optional[str]] = "items"
    _ROW_TYPE: ClassVar[Optional[type]] = CheckItem
    _ROW_KEY: ClassVar[str] = "what"
    _ROW_WORDS: ClassVar[str] = "figure named"
    _TOTALS: ClassVar[tuple[str, ...]] = ("total_items", "_exit_code")

    def __post_init__(self) -> None:
        self._as_tuples("items")
        if self.total_items is None:
            object.__setattr__(self, "total_items", len(self.items))
        statuses = {i.status for i in self.items}
        code = REGRESSION if REGRESSION in statuses else CANNOT_TELL if CANNOT_TELL in statuses else OK
        object.__setattr__(self, "_exit_code", float(code))

    @property
    def exit_code(self) -> int:
        """1 when any figure regressed (a regression is never hidden), else 2 when any cannot be told, else 0.

        Of every figure judged, also after ``head``.
        """
        return int(self._exit_code or 0)

    # -- the model's own parts of the shared verbs (see neuronprof._model_base) ---------------
    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        from neuronprof.render import Column, Grid, shown

        items = self.head(row_limit).items
        cut = shown(items, self.total_items, "figures")
        if fmt == "text":
            return [*(i.line(self.max_slowdown) for i in items), *cut, f"note: {self.unit}"]
        head = {OK: "✅ no regression", REGRESSION: "❌ regression", CANNOT_TELL: "⚠️ cannot tell"}[self.exit_code]
        results = {OK: "ok", REGRESSION: "**regression**", CANNOT_TELL: "cannot tell"}
        if fmt != "markdown":
            results = {OK: "ok", REGRESSION: "regression", CANNOT_TELL: "cannot tell"}
        cols: list[Column[CheckItem]] = [
            Column("Figure", lambda i: i.what, left=True),
            Column("Result", lambda i: results[i.status], left=True),
            Column(
                "B/A", lambda i: f"{i.shift.ratio:.3f}×" if i.shift is not None and i.shift.ratio is not None else ""
            ),
            Column("Interval", _interval, left=True),
            Column("Samples", lambda i: f"{i.shift.n_a} vs {i.shift.n_b}" if i.shift is not None else "", left=True),
            Column("Why", lambda i: i.reason or "", left=True),
        ]
        title = f"neuronprof check: {head} (threshold {self.max_slowdown:.0%}, {self.confidence:.0%} confidence)"
        if fmt == "markdown":
            title = "### " + title
        return [title, "", Grid(cols, items), "", *cut, f"Samples: {self.unit}."]

    def _data(self) -> dict[str, Any]:
        own = {name: getattr(self, name) for name in _FIELDS}
        return {**own, "exit_code": self.exit_code, "items": [i.to_dict() for i in self.items]}

    @classmethod
    def _from_data(cls, data: Mapping[str, Any]) -> Check:
        kinds = {"max_slowdown": float, "confidence": float, "unit": str, "total_items": int}
        own: dict[str, Any] = {name: None if data.get(name) is None else kinds[name](data[name]) for name in _FIELDS}
        return cls(items=tuple(CheckItem.from_dict(i) for i in data["items"]), **own)


_FIELDS = ("max_slowdown", "confidence", "unit", "total_items")
"""The fields of a ``Check`` besides its items, written to its JSON as they are."""


def _interval(i: CheckItem) -> str:
    s = i.shift
    return f"{s.low:.3f}–{s.high:.3f}×" if s is not None and s.low is not None and s.high else ""


def check(
    baseline: TraceSource,
    current: TraceSource,
    *,
    max_slowdown: float = 0.05,
    ops: Sequence[str] = (),
    device: bool = False,
    confidence: float = 0.95,
) -> Check:
    """Judge whether ``current`` is slower than ``baseline`` beyond ``max_slowdown``.

    A figure is *ok* when its whole confidence interval lies at or below
    ``1 + max_slowdown`` (no slowdown beyond the threshold, at this confidence), a
    *regression* when the whole interval lies above it, and *cannot tell* when the
    interval holds both, or there is no interval (too few samples, the figure missing
    from a profile): the reason says what is missing.

    Args:
        baseline: The baseline profile: a trace file, a folder of runs, a loaded
            [`Trace`][neuronprof.analysis.Trace] or a session.
        current: The profile to judge.
        max_slowdown: The slowdown allowed, as a fraction (0.05 for 5 %).
        ops: Op names to judge (their self time per step) instead of the step.
        device: Judge device time (the step's, or the ops' self device time) instead of host time.
        confidence: Confidence level of the intervals (0.95 for 95 %).

    Returns:
        The [`Check`][neuronprof.analysis.Check]; its ``exit_code`` is the CLI's exit status.

    Raises:
        TraceError: A profile cannot be read.
        ValueError: ``ops`` is not a list of names (a single ``str`` is refused: it
            would be judged letter by letter), ``max_slowdown`` is negative, or
            ``confidence`` is out of range.
    """
    if isinstance(ops, str) or not all(isinstance(o, str) for o in ops):
        raise ValueError(f"ops must be a list of op names, e.g. ops=[{ops!r}], got {ops!r}")
    if not max_slowdown >= 0:
        raise ValueError(f"max_slowdown must be zero or more, got {max_slowdown!r}")
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be at least 0.5 and below 1, got {confidence!r}")
    ta, tb = load_trace(trace_of(baseline)), load_trace(trace_of(current))
    use: MeasuredTime = "device" if device else "cpu"
    targets = (
        [(f"{name} self {'device' if device else 'CPU'} time", op_time(name, use)) for name in ops]
        if ops
        else [("step time (device)", step_device_time)]
        if device
        else [("step time (host)", step_time)]
    )
    limit = 1 + max_slowdown
    items = []
    for what, value in targets:
        s, why = judge(ta, tb, value, confidence=confidence)
        if s is None or s.low is None or s.high is None:
            items.append(CheckItem(what, s, CANNOT_TELL, why or s.why_not if s is not None else why))
        elif s.low > limit:
            items.append(CheckItem(what, s, REGRESSION))
        elif s.high <= limit:
            items.append(CheckItem(what, s, OK))
        else:
            more = f"±{s.detectable:.1%}" if s.detectable is not None else "too wide"
            items.append(
                CheckItem(
                    what,
                    s,
                    CANNOT_TELL,
                    f"the interval holds both no change and a slowdown beyond {max_slowdown:.0%}: more samples "
                    f"would tell (the smallest change these samples can detect is {more})",
                )
            )
    unit = sample_unit(ta, tb, confidence=confidence) if ta.samples and tb.samples else "no samples"
    return Check(tuple(items), max_slowdown, confidence, unit)
