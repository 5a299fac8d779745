"""The samples of two profiles, and the verdicts ``diff`` and ``check`` read from them.

Every recorded step is a sample (its host time, its device time, each op's self time
in it), or, when both sides hold enough runs, each run's median step; ``judge`` turns
one figure's samples into a [`Shift`][neuronprof.analysis.Shift], or says why there is none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from neuronprof import _vocabulary as vocab
from neuronprof.analysis._verdict import Shift, min_samples, shift
from neuronprof.analysis.trace import StepSample, Trace
from neuronprof.typing import MeasuredTime

__all__ = [
    "MAX_SAMPLES",
    "OPS_JUDGED",
    "OPS_MIN_SHARE",
    "judge",
    "op_time",
    "sample_unit",
    "step_device_time",
    "step_time",
    "trace_of",
    "verdicts",
]

OPS_JUDGED = 10
"""How many ops ``diff`` gives a verdict on: those with the most compared time per step."""
OPS_MIN_SHARE = 0.01
"""The least share of a step's time (on either side) for an op to be judged."""
MAX_SAMPLES = 500
"""The most samples a side keeps: more (a long run's steps) are grouped into this many
blocks of consecutive ones, each block's median one sample. It bounds the verdict's
pairwise ratios (at most 250,000) whatever the number of steps."""


def trace_of(source: Any) -> Any:
    """A session stands for its recording (``Session.trace()``); anything else is read as given."""
    trace = getattr(source, "trace", None)
    return trace() if callable(trace) else source


def verdicts(
    ta: Trace, tb: Trace, use: MeasuredTime, confidence: float
) -> tuple[Optional[Shift], Optional[Shift], tuple[tuple[str, Shift], ...], list[str]]:
    """The verdicts of B against A (the step's host time, its device time, the ops that matter) and notes on them."""
    step, why = judge(ta, tb, step_time, confidence=confidence)
    if step is None:
        return None, None, (), [f"no verdict: {why}"]
    notes = [f"verdicts: {sample_unit(ta, tb, confidence=confidence)}"]
    step_device = None
    if any(s.device_us for s in ta.samples) or any(s.device_us for s in tb.samples):
        step_device, why = judge(ta, tb, step_device_time, confidence=confidence)
        if step_device is None:
            notes.append(f"no verdict on device time per step: {why}")

    def per_step_total(trace: Trace) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in trace.samples:
            for name, cpu, dev in s.ops:
                out[name] = out.get(name, 0.0) + ((cpu if use == "cpu" else dev) or 0.0)
        return {n: v / len(trace.samples) for n, v in out.items() if n != vocab.STEP_ROW}

    weight_a, weight_b = per_step_total(ta), per_step_total(tb)
    wall = max(sum(s.wall_us for s in t.samples) / len(t.samples) for t in (ta, tb))
    weight = {n: max(weight_a[n], weight_b[n]) for n in set(weight_a) & set(weight_b)}
    judged = sorted((n for n, w in weight.items() if w >= OPS_MIN_SHARE * wall), key=lambda n: (-weight[n], n))
    shifts = []
    skipped = []
    for name in judged[:OPS_JUDGED]:
        found, _why = judge(ta, tb, op_time(name, use), confidence=confidence)
        if found is None:
            skipped.append(name)
        else:
            shifts.append((name, found))
    if skipped:
        notes.append(
            f"no verdict per step for {', '.join(skipped)}: not in every recorded step (an op that runs every "
            "few steps has no time per step to compare)"
        )
    return step, step_device, tuple(shifts), notes


SampleValue = Callable[[StepSample], Optional[float]]


def step_time(s: StepSample) -> Optional[float]:
    """A step's host time (µs): the figure a step verdict compares."""
    return s.wall_us


def step_device_time(s: StepSample) -> Optional[float]:
    """A step's device time (µs)."""
    return s.device_us


def op_time(name: str, use: MeasuredTime) -> SampleValue:
    """An op's self CPU (``use="cpu"``) or self device time in a step; ``None`` when it did not run there."""

    def value(s: StepSample) -> Optional[float]:
        found = s.op(name)
        return None if found is None else found[0] if use == "cpu" else found[1]

    return value


def _runs(trace: Trace) -> int:
    return len({s.run for s in trace.samples})


def runs_are_samples(ta: Trace, tb: Trace, confidence: float) -> bool:
    """Whether both sides hold enough runs (files) for each run's median step to be a sample.

    Steps of one run share its machine's state (load, clocks): a difference between two
    runs would read as a change. With enough runs on both sides, runs are the samples.
    """
    return min(_runs(ta), _runs(tb)) >= min_samples(confidence)


def judge(ta: Trace, tb: Trace, value: SampleValue, *, confidence: float) -> tuple[Optional[Shift], Optional[str]]:
    """The [`Shift`][neuronprof.analysis.Shift] of one figure from A to B, or why there is none.

    Steps are the samples, or each run's median step when both sides hold enough runs
    (``runs_are_samples``). No verdict for a folder of ranks (the ranks of one job are
    not independent samples), a profile without steps, or a figure missing from some
    of a profile's steps (an op that runs every few steps, a step without device work).
    """
    by_run = runs_are_samples(ta, tb, confidence)
    per_side = []
    for side, trace in (("A", ta), ("B", tb)):
        if trace.ranks:
            return None, (
                f"{side} is a folder of {len(trace.ranks)} ranks of one job, whose steps are not independent "
                "samples; compare one rank's trace with the same rank's"
            )
        if not trace.samples:
            return None, f"{side} has no recorded steps (ProfilerStep#N spans) to take samples from"
        values = [value(s) for s in trace.samples]
        missing = sum(1 for v in values if not v)
        if missing == len(values):
            return None, f"{side} has none of it in any recorded step"
        if missing:
            return None, f"{side} lacks it in {missing} of its {len(values)} recorded steps"
        if by_run:
            import statistics  # on use: `diff` and `check` start without it

            runs: dict[int, list[float]] = {}
            for sample, v in zip(trace.samples, values):
                runs.setdefault(sample.run, []).append(v or 0.0)
            per_side.append(_at_most(MAX_SAMPLES, [statistics.median(v) for v in runs.values()]))
        else:
            per_side.append(_at_most(MAX_SAMPLES, [v or 0.0 for v in values]))
    return shift(per_side[0], per_side[1], confidence=confidence), None


def _at_most(n: int, values: list[float]) -> list[float]:
    """``values``, or the medians of ``n`` blocks of consecutive ones when there are more."""
    if len(values) <= n:
        return values
    import statistics

    edges = [len(values) * i // n for i in range(n + 1)]
    return [statistics.median(values[lo:hi]) for lo, hi in zip(edges, edges[1:])]


def sample_unit(ta: Trace, tb: Trace, *, confidence: float) -> str:
    """What one sample of a verdict is, in words, with the caveat when it is a step."""
    runs = (_runs(ta), _runs(tb))
    if runs_are_samples(ta, tb, confidence):
        return f"each run's median step is a sample ({runs[0]} and {runs[1]} runs)"
    steps = (len(ta.samples), len(tb.samples))
    if max(steps) > MAX_SAMPLES:
        return (
            f"each of at most {MAX_SAMPLES} blocks of consecutive steps (its median step) is a sample "
            f"({steps[0]} and {steps[1]} steps, from {runs[0]} and {runs[1]} run(s)): steps of one run share its "
            f"machine's state; record at least {min_samples(confidence)} runs of each for verdicts that hold "
            "across runs"
        )
    return (
        f"each step is a sample ({steps[0]} and {steps[1]} steps, from {runs[0]} and {runs[1]} "
        "run(s)): steps of one run share its machine's state, so a slower machine at the time of one run reads "
        f"as a change; record at least {min_samples(confidence)} runs of each (a folder of traces) for verdicts "
        "that hold across runs"
    )
