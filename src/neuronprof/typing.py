"""Every string option of neuronprof, defined once and documented value by value.

Each option is a ``typing.Literal``, so a type checker or an editor knows the
values and a typo is caught before anything runs; at run time each function
still checks its argument and names the valid values in its ``ValueError``.
The tuples beside some of them (``MODES``, ``SORT_KEYS``...) hold the same
values for those checks, taken from the ``Literal`` so that the two cannot
drift.

```python
from neuronprof.typing import Mode, SortKey

modes: tuple[Mode, ...] = ("device", "runtime")
key: SortKey = "device"
```

This module imports nothing of torch, and nothing of neuronprof itself.
"""

from __future__ import annotations

import os
from typing import Literal, Union, get_args

__all__ = [
    "EXPORT_FORMATS",
    "MODES",
    "RANKS",
    "SORT_KEYS",
    "BackendName",
    "Bound",
    "Core",
    "DevicePreset",
    "DeviceTime",
    "DiffMatch",
    "DiffMetric",
    "DiffStatus",
    "ExportFormat",
    "FlopsSource",
    "GroupBy",
    "MeasuredTime",
    "Mode",
    "NeuronBuild",
    "PeakSource",
    "Phase",
    "ProfileKind",
    "RankMetric",
    "RankSort",
    "Ranks",
    "SortKey",
    "TimeSource",
    "ToolChoice",
    "Verdict",
]

# -- opening a session -----------------------------------------------------------

Mode = Literal["device", "runtime", "cpu_util", "host_memory"]
"""What a session captures (``session(modes=...)``).

* ``"device"``: time spent on the device itself (kernels on the NeuronCore, TPU
  or GPU). On Neuron this is ``ProfileMode.DEVICE`` and writes ``.neff``/``.ntff``.
* ``"runtime"``: the device runtime's own activity (Neuron runtime API calls,
  ``trace_info.pb``/``ntrace.pb`` on Neuron).
* ``"cpu_util"``: host CPU utilisation (Neuron only, ``cpu_util.pb``).
* ``"host_memory"``: host memory usage (Neuron only, ``host_mem.pb``).

A mode the backend cannot capture is noted in ``Session.notes``, not an error.
"""

MODES: tuple[Mode, ...] = get_args(Mode)
"""The values of [`Mode`][neuronprof.typing.Mode], in order."""

Core = Union[str, int, None]
"""Which device cores a session captures and synchronises (``session(core=...)``).

* ``None``: the backend's default (on Neuron: every NeuronCore of this process;
  on CUDA: the current GPU).
* ``"all"``: every core this process sees.
* ``"0"``, ``"0,1"``, ``"2-5"``, ``"0,2-3"``: indices and ranges, the grammar of
  Neuron's ``capture_enabled_for_nc``; an ``int`` ``n`` means ``"n"``. Indices are
  process-local: under ``torchrun`` each process's cores start at 0.
"""

BackendName = Union[Literal["auto", "neuron", "tpu", "cuda", "cpu"], str]
"""Which backend a session uses (``session(backend=...)``, ``require_backend(name)``).

* ``"auto"``: the first that can run here: a PrivateUse1 device already
  registered in this process, then neuron, tpu, cuda, any backend added with
  ``register_backend``, and finally cpu.
* ``"neuron"``: AWS Trainium/Inferentia through TorchNeuron (``torch_neuronx``).
* ``"tpu"``: Google TPU through TorchTPU (``torch_tpu``).
* ``"cuda"``: NVIDIA GPUs.
* ``"cpu"``: the host only, no device columns.
* any other string: the name of a PrivateUse1 device (``torch.<name>``) or of a
  backend added with [`register_backend`][neuronprof.backends.register_backend].
"""

# -- reading the table -------------------------------------------------------------

SortKey = Literal[
    "device",
    "device_total",
    "cpu",
    "cpu_total",
    "calls",
    "name",
    "flops",
    "self_device_time_total",
    "device_time_total",
    "self_cpu_time_total",
    "cpu_time_total",
    "count",
    "self_cuda_time_total",
    "cuda_time_total",
    "self_privateuse1_time_total",
    "privateuse1_time_total",
    "self_xpu_time_total",
    "xpu_time_total",
    "self_cpu_memory_usage",
    "self_device_memory_usage",
]
"""How a table is sorted (``Session.table(sort_by=...)``, ``Table.sorted()``, ``summarize()``).

* ``"device"``: self device time, largest first (falls back to ``"cpu"`` when no
  row has device time, e.g. on a CPU-only run).
* ``"device_total"``: device time including children.
* ``"cpu"``: self CPU time, largest first.
* ``"cpu_total"``: CPU time including children, largest first.
* ``"calls"``: number of calls, most first.
* ``"name"``: alphabetical.
* ``"flops"``: estimated floating-point operations (needs ``with_flops=True``).
* torch.profiler's own keys mean what they mean in
  ``key_averages().table(sort_by=...)``: ``"self_device_time_total"``,
  ``"self_cuda_time_total"``, ``"self_privateuse1_time_total"`` and
  ``"self_xpu_time_total"`` are ``"device"``; ``"device_time_total"``,
  ``"cuda_time_total"``, ``"privateuse1_time_total"`` and ``"xpu_time_total"`` are
  ``"device_total"`` (torch rewrites cuda/privateuse1/xpu to device);
  ``"self_cpu_time_total"`` is ``"cpu"``; ``"cpu_time_total"`` is ``"cpu_total"``;
  ``"count"`` is ``"calls"``; ``"self_cpu_memory_usage"`` and
  ``"self_device_memory_usage"`` sort by memory allocated by the op itself (bytes,
  needs ``profile_memory=True``).
"""

SORT_KEYS: tuple[SortKey, ...] = get_args(SortKey)
"""The values of [`SortKey`][neuronprof.typing.SortKey], in order."""

Ranks = Literal["local", "all"]
"""Whose table ``Session.table(ranks=...)`` returns.

* ``"local"``: this process's own [`Table`][neuronprof.Table].
* ``"all"``: every ``torch.distributed`` rank's table gathered into one
  [`RankTable`][neuronprof.model.RankTable]; a collective call, made on every rank.
"""

RANKS: tuple[Ranks, ...] = get_args(Ranks)
"""The values of [`Ranks`][neuronprof.typing.Ranks], in order."""

RankMetric = Literal["self_device_us", "self_cpu_us", "device_total_us", "cpu_total_us"]
"""The time a [`RankTable`][neuronprof.model.RankTable] compares across ranks (``RankTable.metric``), in µs.

* ``"self_device_us"``: self device time (the default when any rank has device time).
* ``"self_cpu_us"``: self CPU time.
* ``"device_total_us"``: device time including children.
* ``"cpu_total_us"``: CPU time including children.
"""

RankSort = Literal["max", "calls", "name"]
"""How a [`RankTable`][neuronprof.model.RankTable]'s rows are ordered (``RankTable.sort_by``).

* ``"max"``: the largest value of ``metric`` on any rank, largest first.
* ``"calls"``: the most calls on any rank first.
* ``"name"``: alphabetical.
"""

DeviceTime = Literal["linked", "unlinked", "none"]
"""What device time a backend delivers to torch.profiler in a session (``Backend.device_time()``).

* ``"linked"``: device kernels linked to the ops that launched them (CUDA; TorchNeuron
  with ``correlate_device_time``): ops and kernel rows both carry device time.
* ``"unlinked"``: device kernels linked to no op (TorchTPU): device time sits on the
  kernel rows only; table totals count those rows.
* ``"none"``: no device time reaches torch.profiler (the CPU; TorchNeuron builds whose
  NeuronCore time stays in Neuron's own profile). An empty device column is then the
  expected outcome, not a fault.
"""

NeuronBuild = Literal["correlating", "beta", "documented", "legacy"]
"""Which TorchNeuron profiling API is installed (``NeuronBackend.build()``).

* ``"correlating"``: ``NeuronConfig`` accepts ``correlate_device_time``; with it set,
  NeuronCore executions reach torch.profiler as device kernels linked to their ops,
  which fills the ``Self NEURON`` column.
* ``"beta"``: TorchNeuron's public beta (Neuron 2.33: ``torch-neuronx`` 2.13.3.0 with
  torch 2.13.0, 2.14.3.0 with torch 2.14.0), told by its version (2.13 or newer). Its
  documented profiling surface is the ``"documented"`` one: ``NeuronConfig`` without
  ``correlate_device_time``, so the NEURON column is empty (a beta whose
  ``NeuronConfig`` accepts the keyword counts as ``"correlating"``).
* ``"documented"``: ``NeuronConfig`` without that keyword (Neuron 2.30-2.32 docs):
  NeuronCore time stays in Neuron's own profile files and the NEURON column is empty.
* ``"legacy"``: no ``NeuronConfig``/``ProfileMode``; settings travel as kineto's
  ``custom_profiler_config`` string alone; device time stays in Neuron's own
  profile files.
"""

# -- writing files -------------------------------------------------------------------

ExportFormat = Literal["chrome", "tensorboard", "neuron", "stacks"]
"""What ``Session.export(format=...)`` writes.

* ``"chrome"``: one Chrome/Perfetto JSON trace (``.json``, or ``.json.gz`` gzipped);
  open it in https://ui.perfetto.dev or ``chrome://tracing``.
* ``"tensorboard"``: a folder with a ``*.pt.trace.json`` file, as
  ``torch.profiler.tensorboard_trace_handler`` writes; point TensorBoard's
  ``--logdir`` at it.
* ``"neuron"``: a folder ready for Neuron Explorer (Neuron backend only).
* ``"stacks"``: collapsed stacks (``frame;frame;op value`` per line, the value in
  µs of self time) that flame-graph tools (``flamegraph.pl``, speedscope) read;
  needs ``with_stack=True``.
"""

EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
"""The values of [`ExportFormat`][neuronprof.typing.ExportFormat], in order."""

# -- comparing variants ----------------------------------------------------------------

Phase = Literal["first call", "warm-up", "calibration", "timing", "profiling"]
"""The stage of [`compare`][neuronprof.compare] a variant was in when it raised (``VariantError.phase``).

* ``"first call"``: the first, separately timed call (``torch.compile`` compiles here).
* ``"warm-up"``: the untimed calls after it.
* ``"calibration"``: the call that sizes the timed blocks.
* ``"timing"``: the interleaved wall-clock rounds.
* ``"profiling"``: the variant's profiled session.
"""

# -- offline analysis ----------------------------------------------------------------------

GroupBy = Literal["name", "shape"]
"""How a trace's operators are grouped into rows (``summarize(group_by=...)``, ``Trace.table()``).

* ``"name"``: one row per operator name, like ``key_averages()``.
* ``"shape"``: one row per name and input shapes, like
  ``key_averages(group_by_input_shape=True)``; needs ``record_shapes=True``.
"""

DiffMatch = Literal["auto", "name", "shape"]
"""How ops of two traces are paired (``diff(match=...)``).

* ``"auto"``: by name and input shapes when both traces recorded shapes, else by name.
* ``"name"``: by name only.
* ``"shape"``: by name, input shapes and dtypes.
"""

DiffMetric = Literal["auto", "device", "cpu"]
"""Which time a diff's change and ratio are computed on (``diff(metric=...)``).

* ``"auto"``: self device time when both traces have device time, else self CPU time.
* ``"device"``: self device time.
* ``"cpu"``: self CPU time.
"""

DiffStatus = Literal["both", "only_a", "only_b"]
"""Where an op of a diff was found (``DiffRow.status``).

* ``"both"``: in both traces.
* ``"only_a"``: only in the first (baseline) trace: it went away.
* ``"only_b"``: only in the second trace: it is new.
"""

Verdict = Literal["faster", "slower", "no measurable change", "cannot tell"]
"""What a comparison of two runs says of B against A (``Shift.verdict``, ``neuronprof diff``).

* ``"faster"``: the confidence interval of the ratio B/A lies below 1.
* ``"slower"``: it lies above 1.
* ``"no measurable change"``: it holds 1.
* ``"cannot tell"``: the samples are too few for an interval at that confidence.
"""

TimeSource = Literal["auto", "device", "cpu"]
"""Which measured time a roofline's achieved rates use (``roofline(time_source=...)``).

* ``"auto"``: device time when the trace attributes device time to host ops,
  else host CPU time.
* ``"device"``: self device time (kernels launched by the op).
* ``"cpu"``: self CPU time (for CPU-only traces, or to look at the host side).
"""

MeasuredTime = Literal["device", "cpu"]
"""Which time a result was computed on, once ``"auto"`` is resolved (``TraceDiff.metric``, ``Roofline.time_source``).

* ``"device"``: self device time.
* ``"cpu"``: self CPU time.
"""

Bound = Literal["compute", "memory"]
"""Which roof limits an op.

* ``"compute"``: right of the ridge point; peak FLOP/s is the ceiling.
* ``"memory"``: left of the ridge point; memory bandwidth is the ceiling.
"""

FlopsSource = Literal["trace", "formula", "counters"]
"""Where a roofline row's FLOP count comes from (``RooflineRow.flops_source``).

* ``"trace"``: torch.profiler's own count, recorded with ``with_flops=True``.
* ``"formula"``: neuronprof's formula for the op, from its recorded shapes and dtypes.
* ``"counters"``: the device's hardware counters (Neuron's own profile).
"""

DevicePreset = Literal["trn1", "trn1-chip", "trn2", "trn2-core", "trn2-chip", "h100", "h200", "a100", "a100-40gb"]
"""A device whose published peaks a roofline is drawn against (``roofline(device=...)``).

* ``"trn1"``: one Trainium1 NeuronCore-v2 (half a chip).
* ``"trn1-chip"``: one Trainium1 chip (two NeuronCore-v2).
* ``"trn2"``: one Trainium2 logical NeuronCore at the default LNC=2 (two NeuronCore-v3,
  a quarter chip): what one NeuronCore is to a workload on trn2.
* ``"trn2-core"``: one physical NeuronCore-v3 (LNC=1, an eighth of a chip).
* ``"trn2-chip"``: one Trainium2 chip (eight NeuronCore-v3).
* ``"h100"``: NVIDIA H100 SXM.
* ``"h200"``: NVIDIA H200 SXM.
* ``"a100"``: NVIDIA A100 SXM 80 GB.
* ``"a100-40gb"``: NVIDIA A100 40 GB.

The figures and their sources are in
[`DEVICE_PEAKS`][neuronprof.analysis.DEVICE_PEAKS]; names are matched without regard to case.
"""

PeakSource = Literal["run", "preset", "custom", "profile"]
"""Where the peaks of a roofline come from (``Roofline.peak_source``).

* ``"run"``: the published figures of the device the run was on, the preset its
  model name maps to (``device=None``, the default).
* ``"preset"``: a preset, or a ``DevicePeak``, named with ``device=``; it may
  describe another machine than the one the run was on.
* ``"custom"``: peaks given by hand with ``peak_flops=``/``peak_bw=``.
* ``"profile"``: the hardware peaks a Neuron profile carries in its Parquet ``Metadata``
  table (``NeuronProfile.roofline()`` without ``device``); not verified on hardware.
"""

ToolChoice = Union[Literal["auto", "never"], str, "os.PathLike[str]"]
"""Whether and which ``neuron-explorer`` runs when a folder holds Neuron Runtime files without their JSON.

* ``"auto"``: find it (``NEURONPROF_NEURON_EXPLORER``, ``PATH``, ``/opt/aws/neuron/bin``).
* ``"never"``: read JSON files that exist, never run a tool.
* a path: run that executable.
"""

ProfileKind = Literal["device", "system"]
"""Which kind of profile a summary of Neuron's own profile describes (``DeviceSummary.kind``).

* ``"device"``: a device profile: one NEFF on one NeuronCore (``n_<hex>`` keys of ``summary-json``).
* ``"system"``: a system profile (``s_<hex>`` keys, and any other key).
"""
