"""A gate for CI: did the current run get slower than the baseline, beyond a threshold?

``neuronprof check BASELINE CURRENT --max-slowdown 5%`` reads two saved profiles (trace
files, or folders of runs) and judges the step's host time (``--device``: its device
time; ``--op NAME``: named ops) with the method of ``neuronprof diff``'s verdicts
([`shift`][neuronprof.analysis.shift]). Exit status: 0 when no figure is slower beyond
the threshold with the stated confidence (the interval's lower end is at most
``1 + max_slowdown``), 1 when one is (named, with its interval), 2 when it cannot tell
(too few samples, a figure missing) or the input is bad.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from neuronprof.analysis._diff import (
    _trace_of,
    judge,
    op_time,
    runs_are_samples,
    sample_unit,
    step_device_time,
    step_time,
)
from neuronprof.analysis._verdict import Shift
from neuronprof.analysis.trace import TraceSource, load_trace
from neuronprof.typing import MeasuredTime

__all__ = ["Check", "CheckItem", "check"]

OK, REGRESSION, CANNOT_TELL = 0, 1, 2


@dataclass(frozen=True)
class CheckItem:
    """One judged figure of a [`Check`][neuronprof.analysis.Check].

    Attributes:
        what: The figure, e.g. ``"step time (host)"`` or ``"aten::mm self CPU"``.
        shift: Its change from the baseline; ``None`` when a side has no sample of it.
        status: 0 (no regression beyond the threshold), 1 (a regression) or 2 (cannot tell).
    """

    what: str
    shift: Optional[Shift]
    status: int

    def line(self, max_slowdown: float) -> str:
        """The figure's line for a CI log."""
        s = self.shift
        if s is None:
            return f"cannot tell, {self.what}: no sample of it in one of the profiles"
        if self.status == CANNOT_TELL:
            return f"cannot tell, {self.what}: {s.why_not}"
        assert s.ratio is not None and s.low is not None and s.high is not None
        interval = f"B/A {s.ratio:.3f}× ({s.confidence:.0%} CI {s.low:.3f}–{s.high:.3f}×, {s.n_a} vs {s.n_b} samples)"
        limit = 1 + max_slowdown
        if self.status == REGRESSION:
            return f"REGRESSION, {self.what}: slower beyond {max_slowdown:.0%}: {interval}"
        tail = (
            f"; a slowdown beyond {max_slowdown:.0%} is not ruled out (more samples would tell)"
            if s.high > limit
            else ""
        )
        return f"ok, {self.what}: {interval}{tail}"


@dataclass(frozen=True)
class Check:
    """The gate's answer: every judged figure, and the exit status they make.

    Attributes:
        items: The judged figures, in the order asked.
        max_slowdown: The threshold, as a fraction (0.05 for 5 %).
        confidence: The intervals' confidence level.
        unit: What one sample is (a step, or a run's median step), in words.
    """

    items: tuple[CheckItem, ...]
    max_slowdown: float
    confidence: float
    unit: str

    @property
    def exit_code(self) -> int:
        """1 when any figure regressed, else 2 when any cannot be told, else 0."""
        statuses = {i.status for i in self.items}
        return REGRESSION if REGRESSION in statuses else CANNOT_TELL if CANNOT_TELL in statuses else OK

    def to_text(self) -> str:
        """One line per figure, for a CI log."""
        return "\n".join(i.line(self.max_slowdown) for i in self.items)

    def to_markdown(self) -> str:
        """A block for a CI job summary (e.g. ``$GITHUB_STEP_SUMMARY``)."""
        head = {OK: "✅ no regression", REGRESSION: "❌ regression", CANNOT_TELL: "⚠️ cannot tell"}[self.exit_code]
        lines = [
            f"### neuronprof check: {head} (threshold {self.max_slowdown:.0%}, {self.confidence:.0%} confidence)",
            "",
            "| Figure | Result | B/A | Interval | Samples |",
            "| :--- | :--- | ---: | :--- | :--- |",
        ]
        for i in self.items:
            s = i.shift
            result = {OK: "ok", REGRESSION: "**regression**", CANNOT_TELL: "cannot tell"}[i.status]
            ratio = f"{s.ratio:.3f}×" if s is not None and s.ratio is not None else ""
            interval = f"{s.low:.3f}–{s.high:.3f}×" if s is not None and s.low is not None and s.high else ""
            samples = f"{s.n_a} vs {s.n_b}" if s is not None else ""
            lines.append(f"| {i.what} | {result} | {ratio} | {interval} | {samples} |")
        lines += ["", f"Samples: {self.unit}."]
        return "\n".join(lines) + "\n"


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
        ValueError: ``max_slowdown`` negative, or ``confidence`` out of range.
    """
    if not max_slowdown >= 0:
        raise ValueError(f"max_slowdown must be zero or more, got {max_slowdown!r}")
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be at least 0.5 and below 1, got {confidence!r}")
    ta, tb = load_trace(_trace_of(baseline)), load_trace(_trace_of(current))
    by_run = runs_are_samples(ta, tb, confidence)
    use: MeasuredTime = "device" if device else "cpu"
    targets = (
        [(f"{name} self {'device' if device else 'CPU'} time", op_time(name, use)) for name in ops]
        if ops
        else [("step time (device)", step_device_time)]
        if device
        else [("step time (host)", step_time)]
    )
    items = []
    for what, value in targets:
        has_a = any(value(s) for s in ta.samples)
        has_b = any(value(s) for s in tb.samples)
        if not (has_a and has_b):
            items.append(CheckItem(what, None, CANNOT_TELL))
            continue
        s = judge(ta, tb, value, by_run=by_run, confidence=confidence)
        if s.low is None:
            status = CANNOT_TELL
        elif s.low > 1 + max_slowdown:
            status = REGRESSION
        else:
            status = OK
        items.append(CheckItem(what, s, status))
    unit = sample_unit(ta, tb, by_run=by_run, confidence=confidence) if ta.samples and tb.samples else "none"
    return Check(tuple(items), max_slowdown, confidence, unit)
