"""Compare variants of one computation in a single call: op counts, device time, wall time, speedup.

```python
import torch
import neuronprof

def naive(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

def fused(x, w):
    return torch.rms_norm(x, (x.shape[-1],), w, 1e-6)

x, w = torch.randn(2048, 2048), torch.randn(2048)
cmp = neuronprof.compare(
    {"naive": naive, "torch.rms_norm": fused, "torch.compile": torch.compile(naive, fullgraph=True)},
    x, w,
)
print(cmp)
cmp.plot("rmsnorm.png")
```

How the figures are measured, so that they can be trusted side by side:

1. **First call.** Each variant is called once and timed on its own. This is
   where ``torch.compile`` compiles and eager code initialises lazily; the time
   is reported as ``compile_s`` and kept out of every other figure.
2. **Warm-up.** ``warmup`` untimed calls per variant.
3. **Wall time, outside the profiler.** The profiler's own overhead would
   distort wall-clock time, so timing runs with it off. Each sample times a
   block of back-to-back calls (enough to last about 10 ms, so that short ops
   are timed well above the clock's resolution), with a device synchronisation
   before and after. Samples are taken in ``repeats`` rounds; every round times
   each variant once, in an order rotated from round to round, so that a drift
   in machine speed (thermal throttling, a neighbour's job) spreads over all
   variants instead of penalising one.
4. **Profile.** One profiled session per variant, all with the same
   configuration, gives the op count and self CPU / device time per step, the
   variant's full [`Table`][neuronprof.Table], its findings
   ([`Session.insights`][neuronprof.Session.insights]) and where its steps' time
   went by category ([`StepBreakdown`][neuronprof.model.StepBreakdown], read while
   the session is open: the report's overview); the printed comparison ends with
   the findings that differ between variants.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, TextIO

from typing_extensions import Unpack

from neuronprof import _vocabulary
from neuronprof._config import SessionConfig, SessionOptions
from neuronprof._guard import profiler_running
from neuronprof._session import Session, _active_session
from neuronprof.errors import SessionStateError, VariantError
from neuronprof.model import Comparison, ComparisonRow, StepBreakdown, Table
from neuronprof.typing import Phase

if TYPE_CHECKING:
    from neuronprof.analysis.insights import Insights

__all__ = ["compare"]

# compare()'s session keywords: every SessionConfig field but warmup, which is compare's own argument.
_SESSION_OPTIONS = frozenset(f.name for f in dataclasses.fields(SessionConfig)) - {"warmup"}
_SESSION_DEFAULTS: dict[str, Any] = {"wait": 0, "active": 3}

# One timed sample lasts at least this long: far above perf_counter's resolution
# and a device sync's cost, short enough that many rounds stay cheap.
_TARGET_SAMPLE_S = 0.01
_MAX_CALLS_PER_SAMPLE = 100_000

# A sample range wider than this (max / min) suggests a busy machine.
_NOISY_SPREAD = 1.5

# The clock every figure is read from; a test seam for a fake clock.
_clock: Callable[[], float] = time.perf_counter


@contextlib.contextmanager
def _blame(variant: str, phase: Phase) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        raise VariantError(
            variant, phase, f"variant {variant!r} raised {type(exc).__name__} during its {phase}: {exc}"
        ) from exc


class _Progress:
    """One self-overwriting status line on stderr, for runs that take a while."""

    def __init__(self, enabled: bool, stream: TextIO) -> None:
        self._enabled = enabled
        self._stream = stream
        self._shown = False
        self._width = max(shutil.get_terminal_size(fallback=(80, 24)).columns - 1, 20)

    def __call__(self, text: str, *, keep: bool = False) -> None:
        """Show ``text``; with ``keep``, end the line so that later output starts below it."""
        if not self._enabled:
            return
        line = f"neuronprof.compare: {text}"
        if len(line) > self._width:
            line = line[: self._width - 1] + "…"
        # \r and "erase line" rewrite the status in place instead of scrolling.
        self._stream.write(f"\r\x1b[K{line}" + ("\n" if keep else ""))
        self._stream.flush()
        self._shown = not keep

    def clear(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no stream, or a closed one
        return False


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive int" if minimum >= 1 else "a non-negative int"
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return value


def _check_variants(variants: Any) -> list[tuple[str, Callable[..., Any]]]:
    if not isinstance(variants, Mapping):
        raise ValueError(
            "variants must be a dict mapping a label to a callable, e.g. "
            f"{{'naive': f, 'fused': g}}; got {type(variants).__name__}"
        )
    if not variants:
        raise ValueError("variants is empty: give at least one, e.g. {'naive': f, 'fused': g}")
    items = []
    for label, fn in variants.items():
        if not isinstance(label, str) or not label:
            raise ValueError(f"variant labels must be non-empty strings, got {label!r}")
        if not callable(fn):
            raise ValueError(f"variant {label!r} is not callable (got {type(fn).__name__}); pass the function itself")
        items.append((label, fn))
    return items


def _session_config(options: Mapping[str, Any], warmup: int) -> SessionConfig:
    unknown = [k for k in options if k not in _SESSION_OPTIONS]
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise TypeError(
            f"compare() got unexpected keyword argument(s) {names}. Its keywords are session options "
            f"({', '.join(sorted(_SESSION_OPTIONS))}); to pass arguments to the variants, give them "
            "positionally or bind them with functools.partial"
        )
    # The profiler's first recorded step carries its own start-up cost (torch warns
    # about a schedule without warm-up), so the sessions always warm up once.
    return SessionConfig(**{**_SESSION_DEFAULTS, **options, "warmup": max(warmup, 1)})


def _time_block(
    fn: Callable[..., Any], args: Sequence[Any], calls: int, sync: Callable[[], None], *, gc_off: bool = True
) -> float:
    """Return seconds per call of ``calls`` back-to-back calls, device work included."""
    sync()
    gc_was_enabled = gc.isenabled()
    # A collection landing inside one sample would be charged to whichever variant
    # ran then. A first call may compile for a while, and needs the collector.
    if gc_off:
        gc.disable()
    try:
        start = _clock()
        for _ in range(calls):
            fn(*args)
        sync()
        return (_clock() - start) / calls
    finally:
        if gc_was_enabled:
            gc.enable()


def _calls_per_sample(seconds_per_call: float) -> int:
    if seconds_per_call <= 0:
        return _MAX_CALLS_PER_SAMPLE
    return max(1, min(_MAX_CALLS_PER_SAMPLE, math.ceil(_TARGET_SAMPLE_S / seconds_per_call)))


def _op_calls(table: Table) -> Optional[float]:
    if table.top_level_calls is None or table.steps <= 0:
        return None
    return table.top_level_calls / table.steps


def _per_step(table: Table) -> tuple[Optional[float], Optional[float]]:
    """Return (self CPU, self device) per step; the step's own row is Python time between ops."""
    if table.steps <= 0:
        return None, None
    body = [r for r in table.rows if r.name != _vocabulary.STEP_ROW]
    cpu = sum(r.self_cpu_us for r in body) / table.steps
    if table.device_label is None or not table.has_device_time:
        return cpu, None
    # A kernel's time shows on its own row and on the op that launched it: count it once.
    return cpu, (_vocabulary.device_total(body) or 0.0) / table.steps


class _Profiled(NamedTuple):
    """What a comparison keeps of a variant's profiled session: small read-outs, not its events."""

    table: Table
    insights: Insights
    breakdown: Optional[StepBreakdown]


def _profile(name: str, fn: Callable[..., Any], args: Sequence[Any], config: SessionConfig) -> _Profiled:
    s = Session(config)
    # _blame is the inner context: the session is closed before the VariantError leaves.
    with s, _blame(name, "profiling"):
        for _ in s.steps():
            fn(*args)
    return _Profiled(s.table(row_limit=None), s.insights(), _breakdown(s))


def _breakdown(s: Session) -> Optional[StepBreakdown]:
    """The session's steps by category, as its report's overview counts them; read while its events are held."""
    from neuronprof._report_overview import overview_data
    from neuronprof._report_two_runs import pane_notes
    from neuronprof.analysis.insights._trace import read_of

    ov = overview_data(read_of(s.recording).columns)
    if not ov["steps"]:
        return None
    return StepBreakdown(
        steps_us=tuple(st["us"] for st in ov["steps"]),
        parts_us=tuple(ov["mean"].items()),
        notes=tuple(pane_notes(ov["notes"])),
    )


def compare(
    variants: Mapping[str, Callable[..., Any]],
    *args: Any,
    baseline: Optional[str] = None,
    repeats: int = 5,
    warmup: int = 2,
    quiet: bool = False,
    **options: Unpack[SessionOptions],
) -> Comparison:
    """Run several variants of one computation on the same inputs and compare them side by side.

    ```python
    cmp = neuronprof.compare({"naive": naive, "torch.rms_norm": fused}, x, weight)
    print(cmp)  # op calls, self CPU / device time, wall median, speedup, first-call time
    ```

    Every variant runs on the same ``*args`` under an identical session
    configuration. Wall time is measured outside the profiler, in ``repeats``
    interleaved rounds; each variant is then profiled once for its op count,
    self times and full table. The first call (where ``torch.compile`` compiles)
    is timed apart and never mixed into the steady-state figures. The module
    documentation describes the procedure step by step.

    While it runs, a status line on stderr says which variant and phase are
    running (a first ``torch.compile`` can take 10-20 s on a small CPU); it stays
    silent when stderr is not a terminal, or with ``quiet=True``.

    Args:
        variants: Label → callable, e.g. ``{"naive": f, "fused": g}``; the order is
            kept in the result. Each callable is called as ``fn(*args)``.
        *args: Inputs passed to every variant, unchanged (create them on the
            device beforehand). Variants that modify their inputs in place see
            each other's changes.
        baseline: Label of the variant speedups are relative to; default: the first.
        repeats: Interleaved timing rounds, one wall-clock sample per variant each.
        warmup: Untimed calls per variant after the first call; also the profiled
            sessions' warm-up steps (at least one: the profiler's first step
            carries its own start-up cost).
        quiet: Never print progress.
        **options: Session options, the same for every variant: the fields of
            [`SessionConfig`][neuronprof.SessionConfig] but ``warmup`` (listed in
            [`SessionOptions`][neuronprof.SessionOptions]): ``backend``, ``core``,
            ``modes``, ``output_dir``, ``wait`` (default 0), ``active`` (default 3),
            ``repeat``, ``record_shapes``, ``with_stack``, ``profile_memory``,
            ``with_flops``, ``keep_cycles``, ``profile_all_threads``.
            They are **not** passed to the variants: bind variant keyword arguments
            with ``functools.partial`` or a lambda.

    Returns:
        A [`Comparison`][neuronprof.model.Comparison], one row per variant in the
        order given; ``print()`` it, or use ``to_markdown()``, ``to_json()``,
        ``plot(path)`` and ``report(path)`` (an HTML page with each variant against the
        baseline as differences, under the verdict of its speedup's interval; at least
        four ``repeats`` give one).

    Raises:
        ValueError: ``variants`` is empty, not a dict, or holds something that is
            not callable; ``baseline`` is not a label; ``repeats`` or ``warmup`` is
            out of range; a session option is invalid. Nothing has run yet.
        TypeError: A keyword is neither one of compare's arguments nor a session option.
        BackendUnavailableError: The named backend cannot run here.
        SessionStateError: A profiler is already running in this process.
        VariantError: A variant raised. Nothing after it runs; ``.variant`` names
            it, ``.phase`` says when, and the original error is its ``__cause__``.
    """
    items = _check_variants(variants)
    labels = [label for label, _ in items]
    if baseline is None:
        baseline = labels[0]
    elif baseline not in labels:
        raise ValueError(f"baseline {baseline!r} is not one of the variants: {', '.join(map(repr, labels))}")
    _check_int("repeats", repeats, 1)
    _check_int("warmup", warmup, 0)
    if not isinstance(quiet, bool):
        raise ValueError(f"quiet must be True or False, got {quiet!r}")
    config = _session_config(options, warmup)
    # Building a session checks every option (modes, core, schedule, backend,
    # output folder) before any variant runs; this one is never started.
    probe = Session(config)
    if probe.total_steps is None:
        raise ValueError("repeat must be at least 1 in compare(): each variant's session needs a finite schedule")
    if _active_session() is not None or profiler_running():
        raise SessionStateError(
            "compare() runs its own profiling sessions; call it outside any `with neuronprof.session()` "
            "block or torch.profiler profile"
        )
    sync = probe.synchronize
    progress = _Progress(not quiet and _isatty(sys.stderr), sys.stderr)
    count = len(items)

    first_call_s: dict[str, float] = {}
    calls: dict[str, int] = {}
    samples: dict[str, list[float]] = {label: [] for label in labels}
    profiled: dict[str, _Profiled] = {}
    try:
        for index, (label, fn) in enumerate(items, 1):
            progress(f"[{index}/{count}] {label}: first call (compilation, if any)")
            with _blame(label, "first call"):
                first_call_s[label] = _time_block(fn, args, 1, sync, gc_off=False)
            if warmup:
                progress(f"[{index}/{count}] {label}: warm-up")
                with _blame(label, "warm-up"):
                    for _ in range(warmup):
                        fn(*args)
                    sync()
            progress(f"[{index}/{count}] {label}: calibrating")
            with _blame(label, "calibration"):
                calls[label] = _calls_per_sample(_time_block(fn, args, 1, sync))
        for round_index in range(repeats):
            progress(f"timing, round {round_index + 1}/{repeats}")
            shift = round_index % count
            for label, fn in items[shift:] + items[:shift]:
                with _blame(label, "timing"):
                    samples[label].append(_time_block(fn, args, calls[label], sync))
        for index, (label, fn) in enumerate(items, 1):
            # The profiler's own start-up lines go to the same terminal; a finished
            # line keeps them from being glued to the status.
            progress(f"[{index}/{count}] {label}: profiling", keep=True)
            profiled[label] = _profile(label, fn, args, config)
    finally:
        progress.clear()

    from neuronprof.analysis._verdict import shift as speedup_shift

    base_median = statistics.median(samples[baseline]) * 1e6
    base_wall = [s * 1e6 for s in samples[baseline]]
    rows = []
    notes = []
    for label in labels:
        table = profiled[label].table
        wall = [s * 1e6 for s in samples[label]]
        median = statistics.median(wall)
        self_cpu, self_device = _per_step(table)
        # The speedup's interval: the baseline's samples over this variant's (B/A with A the variant).
        interval = (
            speedup_shift(wall, base_wall) if label != baseline and min(wall) > 0 and min(base_wall) > 0 else None
        )
        rows.append(
            ComparisonRow(
                name=label,
                op_calls=_op_calls(table),
                self_cpu_us=self_cpu,
                self_device_us=self_device,
                wall_us=median,
                wall_us_min=min(wall),
                wall_us_max=max(wall),
                speedup=1.0 if label == baseline else (base_median / median if median > 0 else math.inf),
                compile_s=first_call_s[label],
                table=table,
                wall_samples_us=tuple(wall),
                calls_per_sample=calls[label],
                insights=profiled[label].insights,
                speedup_low=None if interval is None else interval.low,
                speedup_high=None if interval is None else interval.high,
                breakdown=profiled[label].breakdown,
            )
        )
        if min(wall) > 0 and max(wall) / min(wall) > _NOISY_SPREAD:
            notes.append(
                f"{label}: wall samples range from {min(wall):.1f} to {max(wall):.1f} µs; the machine may be "
                "busy. Medians resist this; more repeats narrow it further"
            )
    # The backend's own remarks (the same in every variant's session, e.g. why a build
    # has no device column) belong under the comparison too.
    shared = [n for n in profiled[labels[0]].table.notes if all(n in profiled[k].table.notes for k in labels)]
    notes = list(dict.fromkeys(shared + notes))
    return Comparison(
        rows=tuple(rows),
        baseline=baseline,
        backend=probe.backend,
        device_label=probe.device_label,
        repeats=repeats,
        warmup=warmup,
        profiled_steps=profiled[labels[0]].table.steps,
        notes=tuple(notes),
    )
