"""Stand-in for ``torch.tpu.profiler``: ``TpuProfilerConfig``.

Mirrors TorchTPU's ``TpuProfilerConfig`` (an ``_ExperimentalConfig``): keyword
arguments ``host_tracer_level=2``, ``device_tracer_level=1``,
``python_tracer_level=0``, ``run_dir=None``, ``worker_rank=None``,
``experimental_options=None``, ``check_experimental_options=True``; the
settings travel to the kineto plugin as ``custom_profiler_config``, a
comma-separated list of ``key:value`` items::

    host_tracer_level:2,device_tracer_level:1,python_tracer_level:0[,run_dir:<dir>]
    [,worker_rank:"<rank>"][,<option>:<value>...,check_experimental_options:true]

Strings among worker_rank and experimental values are double-quoted with
``\\`` and ``"`` escaped; booleans are ``true``/``false``. Building one emits a
``UserWarning`` saying the class is experimental (as the current release does;
``NEURONPROF_STANDIN_TPU_WARN=0`` turns it off).

When a profile stops, the plugin writes the XPlane file
``<base>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>[_<worker_rank>].xplane.pb``;
``base`` is ``TORCH_TPU_PROFILER_OUTPUT_DIR`` when set (it silently overrides
``run_dir``), else ``run_dir``; without either nothing is written. Ranks on one
host without ``worker_rank`` write the same file name.

Records for tests: :data:`configs` (every config built, in order),
:data:`last_config`, :data:`written` (every XPlane file written),
:func:`reset_records`.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union

from torch._C._profiler import _ExperimentalConfig

__all__ = ["TpuProfilerConfig", "configs", "last_config", "parse_custom_config", "reset_records", "written"]

_Value = Union[int, bool, str]
_STABLE_KEYS = frozenset(
    {
        "check_experimental_options",
        "device_tracer_level",
        "host_tracer_level",
        "python_tracer_level",
        "run_dir",
        "worker_rank",
    }
)
_WARN = os.environ.get("NEURONPROF_STANDIN_TPU_WARN", "1") != "0"

configs: list[TpuProfilerConfig] = []
last_config: TpuProfilerConfig | None = None
written: list[Path] = []


MAX_EVENTS = int(os.environ.get("NEURONPROF_STANDIN_TPU_MAX_EVENTS", "1000000"))
"""TorchTPU keeps at most 1,000,000 events per profile; tests lower it to stay quick."""


def reset_records() -> None:
    """Forget every recorded config and written file."""
    global last_config
    configs.clear()
    written.clear()
    last_config = None


def parse_custom_config(custom: str) -> dict[str, str]:
    """Split the plugin's ``key:value,key:"quoted, value"`` string (quotes removed)."""
    out: dict[str, str] = {}
    key, buf, in_quotes, escaped, in_key = "", "", False, False, True
    for ch in custom + ",":
        if in_key:
            if ch == ":":
                key, buf, in_key = buf, "", False
            elif ch == ",":
                buf = ""
            else:
                buf += ch
            continue
        if escaped:
            buf += ch
            escaped = False
        elif ch == "\\" and in_quotes:
            escaped = True
        elif ch == '"':
            in_quotes = not in_quotes
        elif ch == "," and not in_quotes:
            out[key] = buf
            key, buf, in_key = "", "", True
        else:
            buf += ch
    return out


def _session_hook(event: str, custom: str, device_requested: bool) -> Any:
    if not device_requested:
        return None
    config = parse_custom_config(custom)
    if event == "configure":
        # (kernel mode, runtime events, cap): unlinked kernels unless the device tracer is off;
        # at most MAX_EVENTS kernels per profile, the rest dropped silently, as TorchTPU does.
        return (0 if config.get("device_tracer_level") == "0" else 2, False, MAX_EVENTS)
    if event == "stop":
        base = os.environ.get("TORCH_TPU_PROFILER_OUTPUT_DIR") or config.get("run_dir")
        if not base:
            return None
        stamp = _dt.datetime.now().strftime("%Y_%m_%d_%H_%M_%S")
        rank = config.get("worker_rank")
        folder = Path(base) / "plugins" / "profile" / stamp
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{socket.gethostname()}{'_' + rank if rank else ''}.xplane.pb"
        path.write_bytes(b"torch_tpu stand-in placeholder: xplane\n")
        written.append(path)
    return None


def _quote(value: _Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    raise TypeError(f"experimental option values must be int, bool or str, got {type(value).__name__}")


class TpuProfilerConfig(_ExperimentalConfig):
    """TPU profiler options, passed to torch.profiler as ``experimental_config``."""

    def __init__(
        self,
        *,
        host_tracer_level: int = 2,
        device_tracer_level: int = 1,
        python_tracer_level: int = 0,
        run_dir: os.PathLike[str] | str | None = None,
        worker_rank: str | None = None,
        experimental_options: Mapping[str, _Value] | None = None,
        check_experimental_options: bool = True,
    ) -> None:
        global last_config
        if _WARN:
            warnings.warn(
                "torch.tpu.profiler.TpuProfilerConfig is experimental and subject to change.",
                UserWarning,
                stacklevel=2,
            )
        if worker_rank is not None:
            if not isinstance(worker_rank, str):
                raise TypeError(f"worker_rank must be a string, got {type(worker_rank)}")
            if ":" in worker_rank or "," in worker_rank:
                raise ValueError(f"worker_rank string cannot contain ':' or ',': {worker_rank!r}")
        for key in experimental_options or {}:
            if key in _STABLE_KEYS:
                raise ValueError(f"Experimental option key cannot clash with stable option: {key!r}")
            if ":" in key or "," in key:
                raise ValueError(f"Experimental option keys cannot contain ':' or ',': {key!r}")

        parts = [
            f"host_tracer_level:{host_tracer_level}",
            f"device_tracer_level:{device_tracer_level}",
            f"python_tracer_level:{python_tracer_level}",
        ]
        if run_dir is not None:
            parts.append(f"run_dir:{os.fspath(run_dir)}")
        if worker_rank is not None:
            parts.append(f"worker_rank:{_quote(worker_rank)}")
        if experimental_options:
            parts.extend(f"{k}:{_quote(v)}" for k, v in experimental_options.items())
            parts.append(f"check_experimental_options:{_quote(bool(check_experimental_options))}")
        custom = ",".join(parts)
        super().__init__(custom_profiler_config=custom)

        self.host_tracer_level = host_tracer_level
        self.device_tracer_level = device_tracer_level
        self.python_tracer_level = python_tracer_level
        self.run_dir = None if run_dir is None else os.fspath(run_dir)
        self.worker_rank = worker_rank
        self.experimental_options = dict(experimental_options or {})
        self.check_experimental_options = check_experimental_options
        self.custom_config = custom
        configs.append(self)
        last_config = self

    def __repr__(self) -> str:
        return f"TpuProfilerConfig({self.custom_config!r})"
