"""Stand-in for ``torch_neuronx.profiling``, in the build chosen by ``NEURONPROF_STANDIN_NEURON_BUILD``.

Documented, beta and correlating builds (Neuron Explorer guide, "Capture PyTorch
profiles with Neuron Explorer")::

    config = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME],
                          profile_output_dir="./profile_output")
    with torch.profiler.profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        experimental_config=config,
        on_trace_ready=NeuronProfiler(config).export_trace,
    ):
        ...

* ``NeuronConfig`` is a ``torch._C._profiler._ExperimentalConfig`` (torch
  refuses anything else) with keywords ``modes`` (default ``[DEVICE, RUNTIME]``),
  ``max_events_per_nc``, ``capture_enabled_for_nc``, ``profile_output_dir``,
  ``neff_cache_dir``, ``precache_node_info`` and, on the correlating build only,
  ``correlate_device_time``. It validates nothing itself: the values go to the
  plugin as ``custom_profiler_config`` and the runtime's parser decides
  (:mod:`torch_neuronx._runtime`).
* ``NeuronProfiler(config).export_trace(prof)`` is an ``on_trace_ready``
  handler. The runtime has already written its files when it runs; it writes the
  framework trace beside them, in the newest session folder, and returns
  nothing. Whether the real one consumes kineto's one-time save is not
  documented, so ``NEURONPROF_STANDIN_NEURON_EXPORT`` chooses: ``kineto``
  (default: ``prof.export_chrome_trace``, after which kineto says "Trace is
  already saved") or ``python`` (torch's repeatable Python exporter, leaving
  kineto's save alone). ``NEURONPROF_STANDIN_NEURON_TRACE_NAME`` names the file:
  ``trace.json`` (default), ``neuron_framework_trace_rank_{rank}.json`` or
  ``pytorch_trace.json`` (``{rank}`` is ``RANK``, else 0). Both are read at
  each call, so one process can try several.

Legacy build (Feb-Apr 2026 source): no ``NeuronConfig``, no ``ProfileMode``;
``NeuronProfiler(pytorch_activities=None, record_shapes=False,
pytorch_trace_file=None, neuron_output_dir="./output", event_filters=None)`` is a
self-contained context manager around torch.profiler.

Records for tests: :data:`configs`, :data:`last_config`, :data:`profilers`,
:data:`exports` (one :class:`ExportRecord` per ``export_trace`` call) and
:func:`reset_records`.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch._C._profiler import _ExperimentalConfig

from torch_neuronx import BUILD, _runtime


def _export_mode() -> str:
    mode = os.environ.get("NEURONPROF_STANDIN_NEURON_EXPORT", "kineto")
    if mode not in ("kineto", "python"):
        raise ValueError(f"NEURONPROF_STANDIN_NEURON_EXPORT must be kineto or python, got {mode!r}")
    return mode


CORRELATE_VARIANT = BUILD == "correlating"
DEFAULT_OUTPUT_DIR = _runtime.DEFAULT_OUTPUT_DIR

configs: list[Any] = []
last_config: Any = None
profilers: list[Any] = []
exports: list[ExportRecord] = []


def reset_records() -> None:
    """Forget every recorded config, profiler and export (and the runtime's sessions)."""
    global last_config
    configs.clear()
    profilers.clear()
    exports.clear()
    last_config = None
    _runtime.reset()


@dataclass
class ExportRecord:
    """One ``export_trace`` call, as seen by tests."""

    profiler: Any
    prof: Any
    directory: Path
    trace_path: Path
    files: list[Path] = field(default_factory=list)
    error: BaseException | None = None


def _trace_name() -> str:
    name = os.environ.get("NEURONPROF_STANDIN_NEURON_TRACE_NAME", "trace.json")
    return name.format(rank=os.environ.get("RANK", "0"))


def _write_framework_trace(prof: Any, directory: Path, owner: Any) -> None:
    trace = directory / _trace_name()
    record = ExportRecord(profiler=owner, prof=prof, directory=directory, trace_path=trace)
    exports.append(record)
    try:
        if _export_mode() == "python":
            prof.export_chrome_trace(str(trace), use_python_export=True)
        else:
            prof.export_chrome_trace(str(trace))
    except BaseException as exc:
        record.error = exc
        raise
    record.files = sorted(directory.iterdir())


if BUILD != "legacy":

    class ProfileMode(enum.Enum):
        """What the Neuron runtime captures; each mode adds its own output files."""

        DEVICE = "device"
        RUNTIME = "runtime"
        CPU_UTIL = "cpu_util"
        HOST_MEMORY = "host_memory"

    _MODE_KEYS = {
        ProfileMode.DEVICE: "device_profile",
        ProfileMode.RUNTIME: "system_profile",
        ProfileMode.CPU_UTIL: "cpu_util",
        ProfileMode.HOST_MEMORY: "host_memory",
    }

    class _NeuronConfigBase(_ExperimentalConfig):
        def _setup(
            self,
            *,
            modes: Sequence[ProfileMode] | None,
            max_events_per_nc: int,
            capture_enabled_for_nc: str | None,
            profile_output_dir: str | os.PathLike[str] | None,
            neff_cache_dir: str | os.PathLike[str] | None,
            precache_node_info: bool,
            extra: dict[str, str],
        ) -> None:
            global last_config
            modes = [ProfileMode.DEVICE, ProfileMode.RUNTIME] if modes is None else list(modes)
            for mode in modes:
                if not isinstance(mode, ProfileMode):
                    raise TypeError(f"modes must hold ProfileMode values, got {mode!r}")
            parts: list[str] = []
            if profile_output_dir is not None:
                parts.append(f"profile_output_dir:{os.fspath(profile_output_dir)}")
            parts.append(f"max_events_per_nc:{max_events_per_nc}")
            if capture_enabled_for_nc is not None:
                parts.append(f"capture_enabled_for_nc:{capture_enabled_for_nc}")
            for mode in ProfileMode:
                parts.append(f"{_MODE_KEYS[mode]}:{'true' if mode in modes else 'false'}")
            if neff_cache_dir is not None:
                parts.append(f"neff_cache_dir:{os.fspath(neff_cache_dir)}")
            parts.append(f"precache_node_info:{'true' if precache_node_info else 'false'}")
            parts.extend(f"{k}:{v}" for k, v in extra.items())
            custom = ";".join(parts)
            _ExperimentalConfig.__init__(self, custom_profiler_config=custom)
            self.modes = modes
            self.max_events_per_nc = max_events_per_nc
            self.capture_enabled_for_nc = capture_enabled_for_nc
            self.profile_output_dir = None if profile_output_dir is None else os.fspath(profile_output_dir)
            self.neff_cache_dir = None if neff_cache_dir is None else os.fspath(neff_cache_dir)
            self.precache_node_info = precache_node_info
            self.custom_config = custom
            configs.append(self)
            last_config = self

        def __repr__(self) -> str:
            return f"NeuronConfig({self.custom_config!r})"

    if CORRELATE_VARIANT:

        class NeuronConfig(_NeuronConfigBase):
            """Neuron profiling settings (correlating build: takes ``correlate_device_time``)."""

            def __init__(
                self,
                *,
                modes: Sequence[ProfileMode] | None = None,
                max_events_per_nc: int = 1_000_000,
                capture_enabled_for_nc: str | None = None,
                profile_output_dir: str | os.PathLike[str] | None = None,
                neff_cache_dir: str | os.PathLike[str] | None = None,
                precache_node_info: bool = True,
                correlate_device_time: bool = False,
            ) -> None:
                self._setup(
                    modes=modes,
                    max_events_per_nc=max_events_per_nc,
                    capture_enabled_for_nc=capture_enabled_for_nc,
                    profile_output_dir=profile_output_dir,
                    neff_cache_dir=neff_cache_dir,
                    precache_node_info=precache_node_info,
                    extra={"correlate_device_time": "true" if correlate_device_time else "false"},
                )
                self.correlate_device_time = correlate_device_time

    else:

        class NeuronConfig(_NeuronConfigBase):  # type: ignore[no-redef]
            """Neuron profiling settings, passed as ``experimental_config`` (documented build)."""

            def __init__(
                self,
                *,
                modes: Sequence[ProfileMode] | None = None,
                max_events_per_nc: int = 1_000_000,
                capture_enabled_for_nc: str | None = None,
                profile_output_dir: str | os.PathLike[str] | None = None,
                neff_cache_dir: str | os.PathLike[str] | None = None,
                precache_node_info: bool = True,
            ) -> None:
                self._setup(
                    modes=modes,
                    max_events_per_nc=max_events_per_nc,
                    capture_enabled_for_nc=capture_enabled_for_nc,
                    profile_output_dir=profile_output_dir,
                    neff_cache_dir=neff_cache_dir,
                    precache_node_info=precache_node_info,
                    extra={},
                )

    class NeuronProfiler:
        """Writes a profile's framework trace next to the Neuron runtime's files."""

        def __init__(self, config: NeuronConfig) -> None:
            if not isinstance(config, _NeuronConfigBase):
                raise TypeError(f"NeuronProfiler needs a NeuronConfig, got {type(config).__name__}")
            self.config = config
            self.export_calls = 0
            profilers.append(self)

        def export_trace(self, prof: Any) -> None:
            """``on_trace_ready`` handler: the framework trace, beside the runtime's files."""
            self.export_calls += 1
            directory = _runtime.latest_directory(self.config.profile_output_dir)
            if directory is None:
                raise RuntimeError("no Neuron profile session was recorded for this profile")
            _write_framework_trace(prof, directory, self)

    __all__ = [
        "CORRELATE_VARIANT",
        "ExportRecord",
        "NeuronConfig",
        "NeuronProfiler",
        "ProfileMode",
        "configs",
        "exports",
        "last_config",
        "profilers",
        "reset_records",
    ]

else:

    class NeuronProfiler:  # type: ignore[no-redef]
        """The legacy, self-contained profiler: a context manager around torch.profiler."""

        def __init__(
            self,
            pytorch_activities: Any = None,
            record_shapes: bool = False,
            pytorch_trace_file: str | None = None,
            neuron_output_dir: str = "./output",
            event_filters: Any = None,
        ) -> None:
            from torch.profiler import ProfilerActivity

            self.activities = pytorch_activities or [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
            self.record_shapes = record_shapes
            self.pytorch_trace_file = pytorch_trace_file
            self.neuron_output_dir = neuron_output_dir
            self.event_filters = event_filters
            self._prof: Any = None
            profilers.append(self)

        def __enter__(self) -> NeuronProfiler:
            import torch.profiler

            config = _ExperimentalConfig(custom_profiler_config=f"profile_output_dir:{self.neuron_output_dir}")
            configs.append(config)
            self._prof = torch.profiler.profile(
                activities=self.activities, record_shapes=self.record_shapes, experimental_config=config
            )
            self._prof.__enter__()
            return self

        def __exit__(self, *exc: Any) -> None:
            self._prof.__exit__(*exc)
            if self.pytorch_trace_file:
                self._prof.export_chrome_trace(self.pytorch_trace_file)

    __all__ = ["ExportRecord", "NeuronProfiler", "configs", "exports", "last_config", "profilers", "reset_records"]
