"""Variants side by side: [`Comparison`][neuronprof.model.Comparison] and its rows.

Part of [`neuronprof.model`][neuronprof.model], which re-exports every public name;
import from there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union, cast

from neuronprof._model_base import ResultModel, dataframe
from neuronprof._model_rows import COMPARISON_SCHEMA, _opt_float

if TYPE_CHECKING:
    import os
    from pathlib import Path

    import pandas

    from neuronprof.analysis.insights import Insights
    from neuronprof.model import Table
    from neuronprof.render import Block, Format


@dataclass(frozen=True)
class StepBreakdown:
    """Where one variant's profiled steps went, by category: the report's overview, kept small.

    Read from the variant's session while it was open (its recorded events are not
    kept): each instant of a step is counted once, in the first busy category in the
    order of the report's overview (device compute, memory copies and sets,
    communication, runtime and launch, data loading, host compute in ops, host time
    between ops, idle).

    Attributes:
        steps_us: Each profiled step's time, in microseconds, in recorded order.
        parts_us: ``(category, mean µs per step)`` in that order; the keys are
            ``device``, ``memory``, ``communication``, ``runtime``, ``dataloader``,
            ``host_ops``, ``python`` and ``idle``.
        notes: What the breakdown cannot tell apart in this run (e.g. Python
            between ops without ``with_stack=True``).

    Raises:
        ValueError: ``parts_us`` names a category twice.
    """

    steps_us: tuple[float, ...]
    parts_us: tuple[tuple[str, float], ...]
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps_us", tuple(float(v) for v in self.steps_us))
        object.__setattr__(self, "parts_us", tuple((str(k), float(v)) for k, v in self.parts_us))
        object.__setattr__(self, "notes", tuple(str(n) for n in self.notes))
        names = [k for k, _ in self.parts_us]
        if len(set(names)) != len(names):
            # Its JSON form keys the parts by category, so a repeated one would be lost.
            raise ValueError(f"StepBreakdown.parts_us names a category twice: {names}")

    @property
    def mean_us(self) -> Optional[float]:
        """The mean step time (µs); ``None`` without steps."""
        return sum(self.steps_us) / len(self.steps_us) if self.steps_us else None

    def to_dict(self) -> dict[str, Any]:
        """Return the breakdown as a JSON-ready dict."""
        return {
            "steps_us": list(self.steps_us),
            "parts_us": {k: v for k, v in self.parts_us},
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepBreakdown:
        """Build a breakdown from [`to_dict`][neuronprof.model.StepBreakdown.to_dict] output.

        Raises:
            ValueError: A field is missing or of the wrong type.
        """
        try:
            return cls(
                steps_us=tuple(data["steps_us"]),
                parts_us=tuple(dict(data["parts_us"]).items()),
                notes=tuple(data.get("notes", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"invalid StepBreakdown: {exc}") from None


@dataclass(frozen=True)
class ComparisonRow:
    """One variant of a [`Comparison`][neuronprof.model.Comparison]: its op count, times and speedup.

    Wall-clock figures are per call, timed outside the profiler; op counts and
    self times are per step, from one profiled session of the variant. A value
    that was not measured is ``None``.

    Attributes:
        name: The variant's label, as given to ``compare()``.
        op_calls: Operators called directly by one step (naive RMSNorm: 6;
            ``torch.rms_norm``: 1; a ``torch.compile``d function: 1, its compiled
            region, since torch.compile's guard check is not counted).
        self_cpu_us: Host time spent in operators per step, in microseconds; the
            Python time between operators is left out.
        self_device_us: Device (NeuronCore, TPU, GPU) time per step, in microseconds;
            ``None`` without a device, or when none was recorded.
        wall_us: Median wall-clock time per call, in microseconds, device work included.
        wall_us_min: Fastest timed sample, per call.
        wall_us_max: Slowest timed sample, per call.
        speedup: The baseline's ``wall_us`` divided by this variant's: 2.0 means twice
            as fast as the baseline; 1.0 for the baseline itself.
        compile_s: Seconds taken by the first call (``torch.compile`` compiles here;
            eager code initialises lazily). Kept out of every other figure.
        table: The variant's full profile ([`Table`][neuronprof.Table]).
        wall_samples_us: Every timed sample (per call, microseconds), in the order taken.
        calls_per_sample: Calls timed back to back in each sample, so that short
            calls are timed well above the clock's resolution.
        insights: What to fix first in the variant's profile
            ([`Insights`][neuronprof.analysis.insights.Insights]), from the same session.
        speedup_low: Lower end of the speedup's 95 % confidence interval (the
            Hodges–Lehmann interval of the baseline's wall samples over this variant's,
            as ``neuronprof diff``'s verdicts); ``None`` for the baseline, or with too
            few samples for an interval.
        speedup_high: Upper end of that interval.
        breakdown: Where the variant's profiled steps went, by category
            ([`StepBreakdown`][neuronprof.model.StepBreakdown]), for the report's
            two-run panes; ``None`` when not recorded.
    """

    name: str
    op_calls: Optional[float]
    self_cpu_us: Optional[float]
    self_device_us: Optional[float]
    wall_us: float
    wall_us_min: float
    wall_us_max: float
    speedup: float
    compile_s: float
    table: Optional[Table] = None
    wall_samples_us: tuple[float, ...] = ()
    calls_per_sample: int = 1
    insights: Optional[Insights] = None
    speedup_low: Optional[float] = None
    speedup_high: Optional[float] = None
    breakdown: Optional[StepBreakdown] = None

    @property
    def measurably_different(self) -> bool:
        """Whether the speedup's interval excludes 1.0: faster or slower than the baseline beyond noise."""
        return (
            self.speedup_low is not None
            and self.speedup_high is not None
            and (self.speedup_low > 1 or self.speedup_high < 1)
        )

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ComparisonRow.name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.wall_samples_us, tuple):
            object.__setattr__(self, "wall_samples_us", tuple(float(v) for v in self.wall_samples_us))
        # Table lives in neuronprof.model, which imports this module: imported on use.
        from neuronprof.model import Table

        if self.table is not None and not isinstance(self.table, Table):
            raise TypeError(f"ComparisonRow.table must be a Table or None, got {type(self.table).__name__}")

    def to_dict(self) -> dict[str, Any]:
        """Return the row as a JSON-ready dict (its table nested as a dict)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["table"] = None if self.table is None else self.table.to_dict()
        data["wall_samples_us"] = list(self.wall_samples_us)
        data["insights"] = None if self.insights is None else self.insights.to_dict()
        data["breakdown"] = None if self.breakdown is None else self.breakdown.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ComparisonRow:
        """Build a row from [`to_dict`][neuronprof.model.ComparisonRow.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: A field is missing, unknown or of the wrong type.
        """
        from neuronprof.model import Table

        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown ComparisonRow field(s): {', '.join(sorted(unknown))}")
        try:
            table = data.get("table")
            found = data.get("insights")
            if found is not None:
                from neuronprof.analysis.insights import Insights

                found = Insights.from_dict(found)
            return cls(
                name=str(data["name"]),
                op_calls=_opt_float(data.get("op_calls")),
                self_cpu_us=_opt_float(data.get("self_cpu_us")),
                self_device_us=_opt_float(data.get("self_device_us")),
                wall_us=float(data["wall_us"]),
                wall_us_min=float(data["wall_us_min"]),
                wall_us_max=float(data["wall_us_max"]),
                speedup=float(data["speedup"]),
                compile_s=float(data["compile_s"]),
                table=None if table is None else Table.from_dict(table),
                wall_samples_us=tuple(float(v) for v in data.get("wall_samples_us", ())),
                calls_per_sample=int(data.get("calls_per_sample", 1)),
                insights=found,
                speedup_low=_opt_float(data.get("speedup_low")),
                speedup_high=_opt_float(data.get("speedup_high")),
                breakdown=None if data.get("breakdown") is None else StepBreakdown.from_dict(data["breakdown"]),
            )
        except KeyError as exc:
            raise ValueError(f"invalid ComparisonRow: missing field {exc.args[0]!r}") from None
        except TypeError as exc:
            raise ValueError(f"invalid ComparisonRow: {exc}") from None


@dataclass(frozen=True)
class Comparison(ResultModel):
    """Variants of one computation measured side by side: what ``neuronprof.compare()`` returns.

    ``print()`` it for an aligned table (the best value of each column is marked
    ``*``); notebooks show it as HTML. Render it with
    [`to_markdown`][neuronprof.model.Comparison.to_markdown], save it with
    [`to_json`][neuronprof.model.Comparison.to_json] (read back with
    [`from_json`][neuronprof.model.Comparison.from_json]) or draw it with
    [`plot`][neuronprof.model.Comparison.plot].

    Attributes:
        rows: One [`ComparisonRow`][neuronprof.model.ComparisonRow] per variant, in
            the order the variants were given.
        baseline: Label of the variant speedups are relative to.
        backend: Backend of the profiled sessions (``"neuron"``, ``"cuda"``, ``"cpu"``...).
        device_label: Label of the device column (``"NEURON"``); ``None`` without a device.
        repeats: Interleaved timing rounds: each variant's wall figures are the
            median, min and max of this many samples.
        warmup: Untimed calls per variant after the first call, before any measurement.
        profiled_steps: Steps recorded in each variant's profiled session.
        notes: Remarks about the measurement (e.g. a noisy machine).
    """

    rows: tuple[ComparisonRow, ...]
    baseline: str
    backend: str = "cpu"
    device_label: Optional[str] = None
    repeats: int = 0
    warmup: int = 0
    profiled_steps: int = 0
    notes: tuple[str, ...] = field(default=())

    SCHEMA: ClassVar[str] = COMPARISON_SCHEMA
    _KIND: ClassVar[str] = "a neuronprof comparison"

    def __post_init__(self) -> None:
        self._as_tuples("rows", "notes")
        names = [r.name for r in self.rows]
        for r in self.rows:
            if not isinstance(r, ComparisonRow):
                raise TypeError(f"Comparison.rows must hold ComparisonRow objects, got {type(r).__name__}")
        if len(set(names)) != len(names):
            raise ValueError(f"variant labels must be unique, got {names}")
        if self.rows and self.baseline not in names:
            raise ValueError(f"baseline {self.baseline!r} is not one of the variants: {', '.join(names)}")

    def names(self) -> list[str]:
        """Return the variant labels in order."""
        return [r.name for r in self.rows]

    def row(self, name: str) -> ComparisonRow:
        """Return the row of the variant labelled ``name``.

        Args:
            name: The variant's label, as given to ``compare()``.

        Raises:
            KeyError: No variant has that label; the message lists them.
        """
        if name in self.names():
            return cast(ComparisonRow, super().row(name))
        raise KeyError(f"no variant named {name!r}; variants: {', '.join(self.names())}")

    def finding_differences(self) -> dict[str, tuple[str, ...]]:
        """Return, per variant, the finding kinds that not every variant has.

        Naive RMSNorm against ``torch.rms_norm``: ``{"naive": ("unfused_chain", ...),
        "torch.rms_norm": ()}``. Kinds every variant shares are left out; variants
        without insights are left out.
        """
        kinds = {r.name: tuple(dict.fromkeys(r.insights.kinds())) for r in self.rows if r.insights is not None}
        if not kinds:
            return {}
        shared = set.intersection(*(set(k) for k in kinds.values()))
        return {name: tuple(k for k in ks if k not in shared) for name, ks in kinds.items()}

    @property
    def fastest(self) -> Optional[str]:
        """Label of the variant with the lowest median wall time (None when empty)."""
        if not self.rows:
            return None
        return min(self.rows, key=lambda r: r.wall_us).name

    # -- the model's own parts of the shared verbs (see neuronprof._model_base) ---------------
    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        from neuronprof.render import comparison_view

        return comparison_view(self.head(row_limit), fmt)

    def _data(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "backend": self.backend,
            "device_label": self.device_label,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "profiled_steps": self.profiled_steps,
            "notes": list(self.notes),
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def _from_data(cls, data: Mapping[str, Any]) -> Comparison:
        return cls(
            rows=tuple(ComparisonRow.from_dict(r) for r in data["rows"]),
            baseline=str(data.get("baseline", "")),
            backend=str(data.get("backend", "cpu")),
            device_label=data.get("device_label"),
            repeats=int(data.get("repeats", 0)),
            warmup=int(data.get("warmup", 0)),
            profiled_steps=int(data.get("profiled_steps", 0)),
            notes=tuple(str(n) for n in data.get("notes", ())),
        )

    def to_dataframe(self, row_limit: Optional[int] = None) -> pandas.DataFrame:
        """Return one DataFrame row per variant (every field except the nested table, samples and findings).

        Args:
            row_limit: Keep the first ``row_limit`` variants. None for all.

        Raises:
            ImportError: pandas is not installed (``pip install pandas``).
        """
        nested = ("table", "wall_samples_us", "insights", "breakdown")
        columns = [f.name for f in dataclasses.fields(ComparisonRow) if f.name not in nested]
        rows = self.head(row_limit).rows
        return dataframe("Comparison", [{c: getattr(r, c) for c in columns} for r in rows], columns)

    def report(self, path: Union[str, os.PathLike[str]], *, overwrite: bool = False) -> Path:
        """Write one self-contained HTML page of the comparison, to look at and share.

        The page holds the comparison table (best value per column marked), a bar
        chart of the median wall time per call with its min–max range, then each
        variant against the baseline as differences: the verdict on their wall times
        (faster, slower or no measurable change, from the speedup's interval
        ``speedup_low``–``speedup_high``; with too few ``repeats`` for an interval, the
        page says so and which ``repeats`` gives one), the mean profiled step by
        category for both with the change in µs and % (from ``breakdown``), and the op
        table per profiled step for both with the change, the ops of one variant only
        marked; and each variant's findings and sortable, filterable op table. It opens
        offline in any browser: nothing is loaded from the network.

        Args:
            path: The ``.html`` file to write; missing parent folders are created.
            overwrite: Replace an existing file instead of raising ``FileExistsError``.

        Returns:
            The path written.

        Raises:
            FileExistsError: The file exists and ``overwrite`` is False.
            OSError: The disk refused the write; no partial file is left.
        """
        # Rendering and writing live above the model; they are imported on use.
        from neuronprof.export import save_comparison_report

        return save_comparison_report(self, path, overwrite=overwrite)

    def plot(self, path: Union[str, os.PathLike[str]]) -> Path:
        """Draw the comparison as a bar chart: wall time per call, and self time per step.

        The image format follows the suffix: ``.png`` or ``.svg``. An existing file
        is replaced; a failed write leaves nothing behind. Matplotlib draws off
        screen, without touching ``pyplot`` or its global backend, so this is safe
        in notebooks and on headless machines.

        Args:
            path: The image file to write; missing parent folders are created.

        Returns:
            The path written.

        Raises:
            ValueError: The suffix is neither ``.png`` nor ``.svg``.
            ImportError: matplotlib is not installed (``pip install 'neuronprof[plot]'``).
        """
        from neuronprof.export import save_comparison_plot

        return save_comparison_plot(self, path)
