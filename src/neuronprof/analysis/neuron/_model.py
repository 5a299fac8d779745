"""The model of Neuron's own profile: per-engine summaries, NEFF executions, per-step busy time.

Plain frozen data that round-trips through JSON; nothing here runs a tool or
reads a file. Units follow the rest of neuronprof: times in microseconds
(execution timestamps in epoch nanoseconds, as Neuron writes them), shares and
utilisations in percent (0-100), sizes in bytes. A value Neuron's tool did not
provide is ``None`` (a blank cell), never ``0``.

About 600 lines, kept in one module on purpose: the five classes form one
JSON schema (``NEURON_PROFILE_SCHEMA``) and most of the length is their documented
fields; renderers, plots and the roofline live in their own modules.
"""

from __future__ import annotations

import dataclasses
import operator
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Optional, Union

from neuronprof._model_base import ResultModel, frame_of
from neuronprof._vocabulary import limit_rows
from neuronprof.analysis._peaks import DevicePeak
from neuronprof.analysis.neuron._join import FlowJoin
from neuronprof.typing import ProfileKind

if TYPE_CHECKING:
    from pathlib import Path

    import pandas

    from neuronprof.analysis._roofline import Roofline
    from neuronprof.model import OpRow
    from neuronprof.render import Block, Format
    from neuronprof.typing import DevicePreset

__all__ = [
    "BOTTLENECK_ENGINES",
    "ENGINES",
    "NEURON_PROFILE_SCHEMA",
    "DeviceSummary",
    "EngineTime",
    "NeffExecution",
    "NeffStats",
    "NeuronProfile",
    "StepDevice",
]

NEURON_PROFILE_SCHEMA = "neuronprof.neuron_profile/1"

ENGINES: tuple[str, ...] = ("tensor", "vector", "scalar", "gpsimd", "sync", "dma")
"""The engines of a NeuronCore that ``summary-json`` reports active time for, in display order.

``tensor``, ``vector``, ``scalar``, ``gpsimd`` and ``sync`` are the compute
engines (``<engine>_engine_active_time``); ``dma`` is the DMA engines together
(``dma_active_time``).
"""


BOTTLENECK_ENGINES: tuple[str, ...] = ("tensor", "vector", "scalar", "gpsimd", "dma")
"""The engines AWS's bound analysis chooses the bottleneck among (every engine but ``sync``)."""


@dataclass(frozen=True)
class EngineTime:
    """How long one engine was active during a device profile.

    Attributes:
        engine: One of [`ENGINES`][neuronprof.analysis.neuron.ENGINES].
        active_us: Active time in microseconds (``<engine>_engine_active_time``
            or ``dma_active_time``, given in seconds by the tool); ``None`` when
            not available.
        share_pct: Active time as a percentage of the profile's total time, as
            the tool computed it (``..._percent``, a 0-1 fraction in the
            tool's output); ``None`` when not available.
    """

    engine: str
    active_us: Optional[float] = None
    share_pct: Optional[float] = None


@dataclass(frozen=True)
class DeviceSummary:
    """One profile of ``neuron-explorer view --output-format summary-json``: the engine breakdown.

    ``summary-json`` holds one flat object of metrics per profile, keyed
    ``n_<40 hex>`` for a device profile (one NEFF on one NeuronCore) and
    ``s_<hex>`` for a system profile. Keys the reader does not know are
    ignored; a negative value means "not available" and becomes ``None``.

    Attributes:
        key: The profile's key in the tool's output (``"n_<40 hex>"``, ``"s_<hex>"``).
        kind: ``"device"`` (``n_`` keys) or ``"system"`` (``s_`` keys and anything else); see
            [`ProfileKind`][neuronprof.typing.ProfileKind].
        label: What to call it: the NEFF's file name when the profile was made
            from a ``.neff``/``.ntff`` pair, a ``model_name``/``neff_name`` field
            when the metrics carry one, else the key.
        total_us: ``total_time`` in microseconds.
        engines: One [`EngineTime`][neuronprof.analysis.neuron.EngineTime]
            per entry of [`ENGINES`][neuronprof.analysis.neuron.ENGINES], in that order.
        hbm_read_bytes: ``hbm_read_bytes``.
        hbm_write_bytes: ``hbm_write_bytes``.
        hardware_flops: ``hardware_flops``: floating-point operations the engines executed.
        model_flops: ``model_flops``: the model's own FLOPs (without padding or recomputation).
        mfu_pct: ``mfu_estimated_percent`` as a percentage (model FLOPs utilisation).
        mbu_pct: ``mbu_estimated_percent`` as a percentage (memory bandwidth utilisation).
        source: The file or command the metrics came from.
    """

    key: str
    kind: ProfileKind = "device"
    label: str = ""
    total_us: Optional[float] = None
    engines: tuple[EngineTime, ...] = ()
    hbm_read_bytes: Optional[int] = None
    hbm_write_bytes: Optional[int] = None
    hardware_flops: Optional[float] = None
    model_flops: Optional[float] = None
    mfu_pct: Optional[float] = None
    mbu_pct: Optional[float] = None
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.engines, tuple):
            object.__setattr__(self, "engines", tuple(self.engines))
        if not self.label:
            object.__setattr__(self, "label", self.key)

    def engine(self, name: str) -> EngineTime:
        """Return the [`EngineTime`][neuronprof.analysis.neuron.EngineTime] of ``name``.

        Args:
            name: An engine of [`ENGINES`][neuronprof.analysis.neuron.ENGINES], e.g. ``"tensor"``.

        Raises:
            KeyError: ``name`` is not one of [`ENGINES`][neuronprof.analysis.neuron.ENGINES].
        """
        for e in self.engines:
            if e.engine == name:
                return e
        if name in ENGINES:
            return EngineTime(name)
        raise KeyError(f"no engine {name!r}; engines: {', '.join(ENGINES)}")

    @property
    def bottleneck(self) -> Optional[str]:
        """The engine that bounds this profile by AWS's rule, or None when no active time is available.

        AWS's own bound analysis of a device profile takes the bottleneck as the engine with
        the most (interval-merged) active time among Tensor, Vector, Scalar, GpSimd and DMA
        (``BOTTLENECK_ENGINES``; the sync engine is not a candidate). The active times are
        the tool's (``<engine>_engine_active_time``, ``dma_active_time``). Not verified on
        hardware here.
        """
        times = [(e.active_us, e.engine) for e in self.engines if e.engine in BOTTLENECK_ENGINES and e.active_us]
        # Ties go to the first engine in BOTTLENECK_ENGINES' order.
        return max(times, key=lambda t: (t[0], -BOTTLENECK_ENGINES.index(t[1])))[1] if times else None

    @property
    def hbm_bytes(self) -> Optional[int]:
        """HBM bytes read plus written; ``None`` when either is not available."""
        if self.hbm_read_bytes is None or self.hbm_write_bytes is None:
            return None  # one of them not available: the sum is not known (never counted as 0)
        return self.hbm_read_bytes + self.hbm_write_bytes

    def to_dict(self) -> dict[str, Any]:
        """Return the summary as a JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceSummary:
        """Build a summary from [`to_dict`][neuronprof.analysis.neuron.DeviceSummary.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: A field is missing or unknown.
        """
        kwargs = dict(data)
        kwargs["engines"] = tuple(EngineTime(**e) for e in kwargs.get("engines", ()))
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise ValueError(f"invalid DeviceSummary: {exc}") from None


class NeffExecution(NamedTuple):
    """One execution of a NEFF on a NeuronCore (an ``nc_exec_running`` event of the system profile).

    With two physical cores per logical NeuronCore (Trn2's default LNC=2) the
    runtime records each execution once per physical core with the same
    ``exec_id``; those records are merged here into one execution that spans
    both (earliest start to latest end), with both cores in ``cores``.

    Attributes:
        neff: The NEFF that ran (``model_name``; ``"model <model_id>"`` when the name is empty).
        start_ns: Start, epoch nanoseconds on the host's CPU clock (``timestamp``).
        end_ns: End, epoch nanoseconds (``timestamp + duration``).
        exec_id: The runtime's execution id (``exec_id``), ``None`` when absent.
        cores: Physical NeuronCores it ran on (``device_core_idx``; ``nc_idx`` when absent).
        nc_idx: ``nc_idx`` as recorded.
        lnc_idx: ``lnc_idx`` (logical NeuronCore) as recorded.
        model_id: ``model_id`` as recorded.
        process_id: ``process_id`` (a string in the tool's output).
    """

    neff: str
    start_ns: int
    end_ns: int
    exec_id: Optional[int] = None
    cores: tuple[int, ...] = ()
    nc_idx: Optional[int] = None
    lnc_idx: Optional[int] = None
    model_id: Optional[int] = None
    process_id: Optional[str] = None

    @property
    def duration_us(self) -> float:
        """Device time of this execution, in microseconds."""
        return (self.end_ns - self.start_ns) / 1000.0


@dataclass(frozen=True)
class NeffStats:
    """Calls and device time of one NEFF over the whole profile.

    Attributes:
        neff: The NEFF (``model_name``).
        calls: Executions (duplicates on two physical cores counted once).
        device_us: Total NeuronCore time of its executions, in microseconds.
        min_us: Shortest execution, in microseconds.
        max_us: Longest execution, in microseconds.
        cores: Physical NeuronCores it ran on.
    """

    neff: str
    calls: int
    device_us: float
    min_us: float
    max_us: float
    cores: tuple[int, ...] = ()

    @property
    def mean_us(self) -> float:
        """Mean execution time, in microseconds."""
        return self.device_us / self.calls if self.calls else 0.0


@dataclass(frozen=True)
class StepDevice:
    """NeuronCore activity during one profiled step (a ``ProfilerStep#N`` span of the framework trace).

    Executions and steps share the host's CPU clock (epoch nanoseconds), so an
    execution is counted in the step whose span it overlaps, clipped to it.

    Attributes:
        step: ``N`` of ``ProfilerStep#N``.
        start_ns: Step start, epoch nanoseconds.
        end_ns: Step end, epoch nanoseconds.
        executions: Executions that started inside the step.
        busy_us: Time at least one NeuronCore of the process was executing, in microseconds.
        idle_us: The rest of the step, in microseconds.
        gaps: Idle stretches inside the step (before the first execution, between
            executions, after the last one).
        largest_gap_us: The longest idle stretch, in microseconds.
    """

    step: int
    start_ns: int
    end_ns: int
    executions: int
    busy_us: float
    idle_us: float
    gaps: int
    largest_gap_us: float

    @property
    def duration_us(self) -> float:
        """Length of the step, in microseconds."""
        return (self.end_ns - self.start_ns) / 1000.0

    @property
    def busy_pct(self) -> float:
        """Busy time as a percentage of the step."""
        length = self.end_ns - self.start_ns
        return 100.0 * self.busy_us * 1000.0 / length if length > 0 else 0.0


@dataclass(frozen=True)
class NeuronProfile(ResultModel):
    """What Neuron's own profile says about a run: engines, NEFF executions, busy time per step.

    Build one with [`neuron_profile`][neuronprof.analysis.neuron_profile]
    (or ``Session.neuron_profile()``). Print it for the per-engine table, the
    per-NEFF executions and the per-step busy time; render it with
    [`to_markdown`][neuronprof.analysis.NeuronProfile.to_markdown],
    [`to_csv`][neuronprof.analysis.NeuronProfile.to_csv] or
    [`to_json`][neuronprof.analysis.NeuronProfile.to_json]; draw it with
    [`plot`][neuronprof.analysis.NeuronProfile.plot]; place each
    NEFF on a roofline with
    [`roofline`][neuronprof.analysis.NeuronProfile.roofline].

    Attributes:
        summaries: One [`DeviceSummary`][neuronprof.analysis.neuron.DeviceSummary]
            per profile of the ``summary-json`` output.
        executions: Every NEFF execution of the system profile, merged across
            physical cores, in start order.
        steps: NeuronCore busy and idle time per profiled step (needs the
            framework trace beside the system profile).
        source: The path it was read from.
        tool: The tool that produced the JSON and its version (``"neuron-explorer 2.x ..."``),
            or ``None`` when existing JSON files were read.
        notes: Remarks on how it was read (files used, records skipped, what is missing).
        tool_error: Why part of the profile was not read: ``neuron-explorer`` was
            needed (only Neuron Runtime's files were there) but is not installed,
            failed, hung without output or wrote something unreadable; ``None``
            when nothing was left unread for that reason. The notes hold the same
            message with its fix.
        tool_missing: True when ``tool_error`` is because the tool is not installed.
        peak: The hardware peaks the profile itself carries (its Parquet ``Metadata`` table:
            TensorEngine rows x columns x 2 x clock, ``dma_ddr_bandwidth``), per NeuronCore;
            ``None`` when the Parquet output was not read or gives none.
        peak_note: Where ``peak`` came from, or why there is none.
        flow_join: Per-NEFF device time joined to framework ops through
            ``SystemProfileEvents.flow_id``, with its match rate; ``None`` when the Parquet
            output or a framework trace was not there.
    """

    summaries: tuple[DeviceSummary, ...] = ()
    executions: tuple[NeffExecution, ...] = ()
    steps: tuple[StepDevice, ...] = ()
    source: str = ""
    tool: Optional[str] = None
    notes: tuple[str, ...] = field(default=())
    tool_error: Optional[str] = None
    tool_missing: bool = False
    peak: Optional[DevicePeak] = None
    peak_note: str = ""
    flow_join: Optional[FlowJoin] = None

    SCHEMA: ClassVar[str] = NEURON_PROFILE_SCHEMA
    _KIND: ClassVar[str] = "a neuronprof Neuron profile"
    _ROWS: ClassVar[Optional[str]] = None  # sections, each its own table: shown whole
    _JSON: ClassVar[Mapping[str, Any]] = {"allow_nan": False}  # strict JSON: no NaN or Infinity

    def __post_init__(self) -> None:
        self._as_tuples("summaries", "executions", "steps", "notes")

    def to_dataframe(self, row_limit: Optional[int] = None, *, section: str = "neffs") -> pandas.DataFrame:
        """Return one section of the profile as a pandas DataFrame, one column per field of its rows.

        Args:
            row_limit: Keep the first ``row_limit`` rows. None for all.
            section: ``"neffs"`` (calls and device time per NEFF), ``"executions"``
                (every NEFF execution), ``"steps"`` (busy time per step) or
                ``"summaries"`` (one row per device profile; its engines as a list).

        Raises:
            ValueError: ``section`` is none of those.
            ImportError: pandas is not installed (``pip install pandas``).
        """
        types = {"neffs": NeffStats, "executions": NeffExecution, "steps": StepDevice, "summaries": DeviceSummary}
        if section not in types:
            raise ValueError(f"section must be one of {', '.join(map(repr, types))}, got {section!r}")
        rows = limit_rows(getattr(self, section), row_limit)
        return frame_of(f"NeuronProfile({section!r})", rows, types[section])

    # -- queries --------------------------------------------------------------------
    @cached_property
    def neffs(self) -> tuple[NeffStats, ...]:
        """Calls and device time per NEFF, most device time first."""
        # Group the executions by NEFF in one pass, then sum, min and max each group's durations in C
        # (map over the group): a few Python steps per execution, not one per figure.
        groups: dict[str, list[NeffExecution]] = {}
        get = groups.get
        for ex in self.executions:
            g = get(ex[0])
            if g is None:
                groups[ex[0]] = [ex]
            else:
                g.append(ex)
        stats = []
        for neff, g in groups.items():
            ns = list(map(operator.sub, map(_END, g), map(_START, g)))
            cores: set[int] = set().union(*set(map(_CORES, g)))
            stats.append(
                NeffStats(neff, len(g), sum(ns) / 1000.0, min(ns) / 1000.0, max(ns) / 1000.0, sorted_cores(cores))
            )
        stats.sort(key=lambda s: s.device_us, reverse=True)
        return tuple(stats)

    @property
    def device_us(self) -> Optional[float]:
        """NeuronCore time of every execution, in microseconds; ``None`` without a system profile."""
        if not self.executions:
            return None
        return sum(s.device_us for s in self.neffs)

    @property
    def has_device_time(self) -> bool:
        """True when the profile holds at least one NEFF execution."""
        return bool(self.executions)

    def neff(self, name: str) -> NeffStats:
        """Return the [`NeffStats`][neuronprof.analysis.neuron.NeffStats] of the NEFF ``name``.

        Args:
            name: The NEFF's name, as in [`NeffStats.neff`][neuronprof.analysis.neuron.NeffStats].

        Raises:
            KeyError: No execution of that NEFF; the message lists the NEFFs.
        """
        for s in self.neffs:
            if s.neff == name:
                return s
        raise KeyError(f"no NEFF named {name!r}; NEFFs: {', '.join(s.neff for s in self.neffs) or '(none)'}")

    def summary(self, label: str) -> DeviceSummary:
        """Return the device summary whose label or key is ``label``.

        Args:
            label: A summary's ``label`` (e.g. the NEFF's file name) or its ``key`` (``"n_<hex>"``).

        Raises:
            KeyError: No summary has that label or key.
        """
        for s in self.summaries:
            if label in (s.label, s.key):
                return s
        raise KeyError(f"no profile {label!r}; profiles: {', '.join(s.label for s in self.summaries) or '(none)'}")

    def rows(self) -> tuple[OpRow, ...]:
        """Return one table row per NEFF, labelled as NEFF executions, for a session table.

        Each row is named ``"NEFF <name>"`` and marked ``on_device``; its
        ``calls`` are the executions and its self / total device time the
        NeuronCore time, in microseconds. The CPU columns are 0, as for any
        device kernel row of torch.profiler.
        """
        from neuronprof.model import OpRow

        return tuple(
            OpRow(
                name=f"{NEFF_ROW_PREFIX}{s.neff}",
                calls=s.calls,
                self_cpu_us=0.0,
                cpu_total_us=0.0,
                self_device_us=s.device_us,
                device_total_us=s.device_us,
                on_device=True,
            )
            for s in self.neffs
        )

    # -- the model's own parts of the shared verbs (see neuronprof._model_base) ---------------
    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        from neuronprof.analysis.neuron._render import profile_view

        return profile_view(self, fmt)  # shown whole: its sections are not cut

    def row(self, name: str) -> NeffStats:
        """Return the [`NeffStats`][neuronprof.analysis.neuron.NeffStats] of the NEFF ``name`` (as ``neff``).

        Args:
            name: The NEFF's name.

        Raises:
            KeyError: No execution of that NEFF; the message lists the NEFFs.
        """
        return self.neff(name)

    def _data(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "tool": self.tool,
            "notes": list(self.notes),
            "tool_error": self.tool_error,
            "tool_missing": self.tool_missing,
            "peak": None if self.peak is None else self.peak.to_dict(),
            "peak_note": self.peak_note,
            "flow_join": None if self.flow_join is None else self.flow_join.to_dict(),
            "summaries": [s.to_dict() for s in self.summaries],
            "neffs": [dataclasses.asdict(s) for s in self.neffs],
            "steps": [dataclasses.asdict(s) for s in self.steps],
            "executions": [ex._asdict() for ex in self.executions],
        }

    @classmethod
    def _from_data(cls, data: Mapping[str, Any]) -> NeuronProfile:
        try:
            executions = tuple(
                NeffExecution(**{**e, "cores": tuple(e.get("cores", ()))}) for e in data.get("executions", ())
            )
            steps = tuple(StepDevice(**s) for s in data.get("steps", ()))
            peak = None if data.get("peak") is None else DevicePeak(**data["peak"])
        except TypeError as exc:
            raise ValueError(f"invalid neuronprof Neuron profile: {exc}") from None
        return cls(
            summaries=tuple(DeviceSummary.from_dict(s) for s in data.get("summaries", ())),
            executions=executions,
            steps=steps,
            source=str(data.get("source", "")),
            tool=data.get("tool"),
            notes=tuple(str(n) for n in data.get("notes", ())),
            tool_error=None if data.get("tool_error") is None else str(data["tool_error"]),
            tool_missing=bool(data.get("tool_missing", False)),
            peak=peak,
            peak_note=str(data.get("peak_note", "")),
            flow_join=None if data.get("flow_join") is None else FlowJoin.from_dict(data["flow_join"]),
        )

    def plot(self, path: Union[str, os.PathLike[str]], *, normalize: bool = False) -> Path:
        """Draw one stacked bar of engine active time per device profile (NEFF) into a PNG or SVG file.

        Engines of a NeuronCore run concurrently, so a stack can be longer than
        the profile's total time, which is marked on each bar. Matplotlib draws
        off screen (no ``pyplot``); an existing file is replaced; a failed write
        leaves nothing behind.

        Args:
            path: The image file (``.png`` or ``.svg``); missing parent folders are created.
            normalize: Draw each bar as percentages of its own profile's total time,
                so that a profile far shorter than the others is still visible.

        Returns:
            The path written.

        Raises:
            ValueError: The suffix is neither ``.png`` nor ``.svg``, or there is no
                device profile with engine times to draw.
            ImportError: matplotlib is not installed (``pip install 'neuronprof[plot]'``).
        """
        # Drawing and writing live above the model; they are imported on use.
        from neuronprof.export import save_engines_plot

        return save_engines_plot(self, path, normalize=normalize)

    def roofline(
        self,
        device: Optional[Union[DevicePreset, DevicePeak]] = None,
        *,
        peak_flops: Optional[float] = None,
        peak_bw: Optional[float] = None,
    ) -> Roofline:
        """Place each device profile (NEFF) on a device's roofline from its hardware counters.

        Each profile's ``hardware_flops`` and HBM bytes (read + written) over its
        ``total_time`` give its arithmetic intensity and achieved rates; the
        ridge point of the preset (``peak FLOP/s ÷ peak bytes/s``, 16-bit roof,
        since the counters do not say the dtype) says compute- or memory-bound.
        Profiles without FLOPs, bytes or time are left out, and the notes say so.

        A profile does not record which Trainium generation, nor which logical-core
        size (LNC), it ran on, and those set the peaks: name the preset.

        Args:
            device: A preset of [`DEVICE_PEAKS`][neuronprof.analysis.DEVICE_PEAKS]
                (``"trn1"``, ``"trn2"``, ...) or a [`DevicePeak`][neuronprof.analysis.DevicePeak].
                ``None`` (the default) raises ``UnknownDeviceError``, unless both
                ``peak_flops`` and ``peak_bw`` are given.
            peak_flops: Peak FLOP/s overriding the preset's.
            peak_bw: Peak memory bandwidth in bytes/s overriding the preset's.

        Returns:
            A [`Roofline`][neuronprof.analysis.Roofline] with one row per device profile.

        Raises:
            UnknownDeviceError: No ``device`` was given, the profile carries no peaks, and not both
                ``peak_flops`` and ``peak_bw`` were given.
            ValueError: Unknown preset, or a peak that is not positive.
        """
        from neuronprof.analysis.neuron._roofline import profile_roofline

        return profile_roofline(self, device, peak_flops=peak_flops, peak_bw=peak_bw)


def sorted_cores(cores: Iterable[Any]) -> tuple[Any, ...]:
    """Core indices in order; indices of mixed types (a malformed record) in the order given."""
    seen = tuple(cores)
    try:
        return tuple(sorted(seen))
    except TypeError:
        return seen


_START = operator.itemgetter(1)
_END = operator.itemgetter(2)
_CORES = operator.itemgetter(4)

NEFF_ROW_PREFIX = "NEFF "
"""Prefix of the table rows that hold one NEFF's executions (``"NEFF <model_name>"``)."""
