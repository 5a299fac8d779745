"""Stand-in for ``torch_neuronx.profiling``: NeuronConfig, ProfileMode, NeuronProfiler.

Follows the documented usage (Neuron Explorer guide, "Capture PyTorch profiles
with Neuron Explorer")::

    config = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME],
                          profile_output_dir="./profile_output")
    exporter = NeuronProfiler(config)
    with torch.profiler.profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        experimental_config=config,
        on_trace_ready=exporter.export_trace,
    ):
        ...

Documented facts it reproduces:

* ``NeuronConfig`` is a ``torch._C._profiler._ExperimentalConfig`` (a plain
  object fails inside torch.profiler) with parameters ``modes`` (default
  ``[DEVICE, RUNTIME]``), ``max_events_per_nc``, ``capture_enabled_for_nc``
  (``"0"``, ``"0,1,2-5"``; ``"all"`` is accepted too), ``profile_output_dir``,
  ``neff_cache_dir`` and ``precache_node_info`` (default ``True``);
* the settings reach the kineto plugin as ``custom_profiler_config``, in the
  plugin's format: ``key:value`` pairs joined by ``;`` (for example
  ``max_events_per_nc:100000;capture_enabled_for_nc:0,1;host_memory:true``).
  The keys ``max_events_per_nc``, ``capture_enabled_for_nc``, ``host_memory``
  and ``profile_output_dir`` are the plugin's own; the keys used here for the
  other modes (``device_profile``, ``system_profile``, ``cpu_util``, named
  after the Neuron runtime's activities) and for ``neff_cache_dir`` /
  ``precache_node_info`` are this stand-in's guess;
* ``NeuronProfiler(config).export_trace(prof)`` is an ``on_trace_ready``
  handler: it writes the framework trace with ``prof.export_chrome_trace`` to
  ``<profile_output_dir>/<host>_pid_<pid>/<timestamp>/trace.json`` (kineto's
  save is destructive: exporting the same profile again raises
  ``RuntimeError: Trace is already saved``) next to what each mode produces:
  DEVICE ``neff_<hash>_vnc_0.neff`` + ``profile_nc_<nc>_session_0.ntff`` per
  captured NeuronCore, RUNTIME ``trace_info.pb`` + ``ntrace.pb``, CPU_UTIL
  ``cpu_util.pb``, HOST_MEMORY ``host_mem.pb`` (placeholder bytes here).
  ``profile_output_dir=None`` means ``./output``, the Neuron runtime default.

``NeuronConfig`` accepts ``correlate_device_time`` only when the environment
had ``NEURONPROF_STANDIN_CORRELATE=1`` at import (a newer-release variant), so
tests can cover callers that check the signature before passing it.

Records for tests: :data:`configs` (every NeuronConfig built, in order),
:data:`last_config`, :data:`profilers`, :data:`exports` (one
:class:`ExportRecord` per ``export_trace`` call, failed ones included) and
:func:`reset_records`.
"""

from __future__ import annotations

import datetime as _dt
import enum
import hashlib
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch._C._profiler import _ExperimentalConfig

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

CORRELATE_VARIANT = os.environ.get("NEURONPROF_STANDIN_CORRELATE", "0") == "1"
DEFAULT_OUTPUT_DIR = "./output"


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
_NC_LIST = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")

configs: list[NeuronConfig] = []
last_config: NeuronConfig | None = None
profilers: list[NeuronProfiler] = []
exports: list[ExportRecord] = []


def reset_records() -> None:
    """Forget every recorded config, profiler and export."""
    global last_config
    configs.clear()
    profilers.clear()
    exports.clear()
    last_config = None


def _nc_indices(spec: str | None) -> list[int]:
    if spec is None or spec.strip() == "all":
        return [0]
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


class _NeuronConfigBase(_ExperimentalConfig):
    def _setup(
        self,
        *,
        modes: Sequence[ProfileMode] | None,
        max_events_per_nc: int | None,
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
        if max_events_per_nc is not None and (
            isinstance(max_events_per_nc, bool) or not isinstance(max_events_per_nc, int) or max_events_per_nc <= 0
        ):
            raise ValueError(f"max_events_per_nc must be a positive int, got {max_events_per_nc!r}")
        if capture_enabled_for_nc is not None:
            if not isinstance(capture_enabled_for_nc, str):
                raise TypeError(
                    f"capture_enabled_for_nc must be a string such as '0,1,2-5', got {capture_enabled_for_nc!r}"
                )
            if capture_enabled_for_nc.strip() != "all" and not _NC_LIST.match(capture_enabled_for_nc):
                raise ValueError(
                    f"capture_enabled_for_nc must list NeuronCore indices or ranges such as '0,1,2-5', "
                    f"got {capture_enabled_for_nc!r}"
                )

        parts: list[str] = []
        if profile_output_dir is not None:
            parts.append(f"profile_output_dir:{os.fspath(profile_output_dir)}")
        if max_events_per_nc is not None:
            parts.append(f"max_events_per_nc:{max_events_per_nc}")
        if capture_enabled_for_nc is not None:
            parts.append(f"capture_enabled_for_nc:{capture_enabled_for_nc.replace(' ', '')}")
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
        configs.append(self)  # type: ignore[arg-type]
        last_config = self  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"NeuronConfig({self.custom_config!r})"


if CORRELATE_VARIANT:

    class NeuronConfig(_NeuronConfigBase):
        """Neuron profiling settings, passed as ``experimental_config``.

        This variant also takes ``correlate_device_time`` (sent to the plugin
        as ``correlate_device_time:true|false``).
        """

        def __init__(
            self,
            *,
            modes: Sequence[ProfileMode] | None = None,
            max_events_per_nc: int | None = None,
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
        """Neuron profiling settings, passed as ``experimental_config``."""

        def __init__(
            self,
            *,
            modes: Sequence[ProfileMode] | None = None,
            max_events_per_nc: int | None = None,
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


@dataclass
class ExportRecord:
    """One ``NeuronProfiler.export_trace`` call, as seen by tests."""

    profiler: NeuronProfiler
    prof: Any
    directory: Path
    trace_path: Path
    files: list[Path] = field(default_factory=list)
    error: BaseException | None = None


class NeuronProfiler:
    """Writes a profile's framework trace next to the Neuron runtime output."""

    def __init__(self, config: NeuronConfig) -> None:
        if not isinstance(config, _NeuronConfigBase):
            raise TypeError(f"NeuronProfiler needs a NeuronConfig, got {type(config).__name__}")
        self.config = config
        self.export_calls = 0
        profilers.append(self)

    def export_trace(self, prof: Any) -> None:
        """``on_trace_ready`` handler: save ``prof`` as ``trace.json`` plus mode files.

        Calls ``prof.export_chrome_trace`` (destructive in kineto: a second
        export of the same profile raises ``RuntimeError``).
        """
        self.export_calls += 1
        cfg = self.config
        root = Path(cfg.profile_output_dir or DEFAULT_OUTPUT_DIR)
        instance = f"{socket.gethostname()}_pid_{os.getpid()}"
        stamp = _dt.datetime.now().strftime("%Y%m%d_%H%M%S_%f")
        directory = root / instance / stamp
        directory.mkdir(parents=True, exist_ok=True)
        trace = directory / "trace.json"
        record = ExportRecord(profiler=self, prof=prof, directory=directory, trace_path=trace)
        exports.append(record)
        try:
            prof.export_chrome_trace(str(trace))
        except BaseException as exc:
            record.error = exc
            raise
        record.files.append(trace)
        names: list[str] = []
        if ProfileMode.DEVICE in cfg.modes:
            neff_hash = hashlib.sha1(str(directory).encode()).hexdigest()[:16]
            names.append(f"neff_{neff_hash}_vnc_0.neff")
            names.extend(f"profile_nc_{nc}_session_0.ntff" for nc in _nc_indices(cfg.capture_enabled_for_nc))
        if ProfileMode.RUNTIME in cfg.modes:
            names += ["trace_info.pb", "ntrace.pb"]
        if ProfileMode.CPU_UTIL in cfg.modes:
            names.append("cpu_util.pb")
        if ProfileMode.HOST_MEMORY in cfg.modes:
            names.append("host_mem.pb")
        for name in names:
            path = directory / name
            path.write_bytes(f"torch_neuronx stand-in placeholder: {name}\n".encode())
            record.files.append(path)
