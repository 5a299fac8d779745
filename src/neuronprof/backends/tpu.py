"""TPU backend: Google TPUs through TorchTPU (``torch_tpu``), a PrivateUse1 device.

Facts it follows (TorchTPU 0.2.0):

* ``torch.tpu.profiler.TpuProfilerConfig(*, host_tracer_level=2, device_tracer_level=1,
  python_tracer_level=0, run_dir=None, worker_rank=None, ...)`` is the
  ``experimental_config``; building one warns that it is experimental;
* its kineto plugin registers through torch's PrivateUse1ProfilerRegistry, so it
  needs torch >= 2.12;
* device events reach torch.profiler as kernels linked to no aten op: TPU time sits
  on the kernel rows, not on the ops;
* the profile is written to ``<base>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>[_<worker_rank>].xplane.pb``
  where ``base`` is ``TORCH_TPU_PROFILER_OUTPUT_DIR`` when set (it silently overrides
  ``run_dir``), else ``run_dir``; ranks on one host without ``worker_rank`` write the
  same file;
* ``torch.tpu.synchronize()`` raises on torch >= 2.11: ``torch.accelerator.synchronize()``
  is the way to wait;
* at ``stop()`` the plugin synchronises every addressable TPU device itself, and it keeps
  at most 1,000,000 events per profiling session (start to stop: one cycle), dropping the
  rest with only a log line ("truncating trace parsing to avoid OOM"): a cycle that reaches
  the cap is cut.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from neuronprof.backends.base import (
    DeviceTime,
    SessionContext,
    add_note,
    device_event_counts,
    distributed_rank,
    parameter_names,
)
from neuronprof.backends.privateuse1 import _PackagedPrivateUse1Backend, privateuse1_torch_problem
from neuronprof.errors import warn_user

if TYPE_CHECKING:
    import torch.profiler

    from neuronprof.analysis.trace import EventTable

__all__ = ["MAX_EVENTS_PER_SESSION", "OUTPUT_DIR_ENV", "TPU_INSTALL_HINT", "TpuBackend"]

TPU_INSTALL_HINT = (
    "install Google's TorchTPU (the torch_tpu package) on a Cloud TPU VM as its documentation or your TPU "
    "image provides it (a `torch-tpu` package of another vendor is not it)"
)

OUTPUT_DIR_ENV = "TORCH_TPU_PROFILER_OUTPUT_DIR"
"""TorchTPU's environment override of ``run_dir``."""

MAX_EVENTS_PER_SESSION = 1_000_000
"""TorchTPU 0.2.0 keeps at most this many events per profiling session (start to stop) and drops the rest silently."""

_PROFILE_SUBDIR = "tpu_profile"
_EXPERIMENTAL_MESSAGE = r".*TpuProfilerConfig is experimental.*"
_warned_lock = threading.Lock()
_warned_experimental = False
_session_counter = 0


class TpuBackend(_PackagedPrivateUse1Backend):
    """Profile TPUs with TorchTPU's ``TpuProfilerConfig``.

    Activities ``[CPU, PrivateUse1]``; TorchTPU's own profile goes to a folder of the
    session's own, ``<output_dir>/tpu_profile/<YYYYmmdd-HHMMSS>_pid<pid>_<n>/`` (``run_dir``),
    unless ``TORCH_TPU_PROFILER_OUTPUT_DIR`` overrides it (``s.notes`` then says where it
    went, and a ``NeuronProfWarning`` says when a session overwrote an earlier one's file); ``worker_rank`` is the
    ``torch.distributed`` rank when there is one, so ranks on one host keep their own
    files. Each step ends with ``torch.accelerator.synchronize()``: TorchTPU's
    ``torch.tpu.synchronize()`` raises ``RuntimeError`` on torch >= 2.11.
    """

    writes_output = True

    package = "torch_tpu"
    install_hint = TPU_INSTALL_HINT

    def __init__(self) -> None:
        super().__init__("tpu")

    def torch_problem(self) -> Optional[str]:
        return privateuse1_torch_problem("TorchTPU's profiler plugin")

    def profile_dir(self, ctx: SessionContext) -> Path:
        """Return the folder TorchTPU writes its profile under for this session (its ``base``).

        Without the override each session has a folder of its own,
        ``<output_dir>/tpu_profile/<session>/``: TorchTPU names its profile folders to the
        second, so two sessions in one second (``compare()``) would otherwise share a file.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """
        override = os.environ.get(OUTPUT_DIR_ENV)
        return Path(override) if override else self._run_dir(ctx)

    def _run_dir(self, ctx: SessionContext) -> Path:
        run_dir = ctx.extras.get("run_dir")
        if run_dir is None:
            global _session_counter
            with _warned_lock:
                _session_counter += 1
                n = _session_counter
            stamp = time.strftime("%Y%m%d-%H%M%S")
            run_dir = ctx.extras["run_dir"] = ctx.output_dir / _PROFILE_SUBDIR / f"{stamp}_pid{os.getpid()}_{n}"
        return Path(run_dir)

    def device_time(self, ctx: SessionContext) -> DeviceTime:
        # TPU kernels reach torch unlinked to ops; the kernel rows carry the time.
        return "unlinked" if "device" in ctx.modes else "none"

    def experimental_config(self, ctx: SessionContext) -> Any:
        import torch

        config_cls = torch.tpu.profiler.TpuProfilerConfig  # type: ignore[attr-defined]
        params = parameter_names(config_cls)
        run_dir = self._run_dir(ctx)
        kwargs: dict[str, Any] = {"run_dir": str(run_dir)}
        if "device" not in ctx.modes and "device_tracer_level" in params:
            kwargs["device_tracer_level"] = 0
        rank = distributed_rank()[0]
        if rank is not None and "worker_rank" in params:
            kwargs["worker_rank"] = str(rank)
        ctx.extras["worker_rank"] = kwargs.get("worker_rank")
        override = os.environ.get(OUTPUT_DIR_ENV)
        if override:
            add_note(
                ctx,
                f"{OUTPUT_DIR_ENV}={override} overrides run_dir: TorchTPU writes its profile under "
                f"{Path(override) / 'plugins' / 'profile'}, not under {run_dir}",
            )
        ctx.extras["written_before"] = {f: f.stat().st_mtime_ns for f in self._xplane_files(ctx)}
        return _build_quietly(config_cls, kwargs)

    def _xplane_files(self, ctx: SessionContext) -> list[Path]:
        folder = self.profile_dir(ctx) / "plugins" / "profile"
        rank = ctx.extras.get("worker_rank")
        name = f"{socket.gethostname()}{'_' + rank if rank else ''}.xplane.pb"
        return sorted(folder.glob(f"*/{name}")) if folder.is_dir() else []

    def cycle_notes(self, events: EventTable, ctx: SessionContext, cycle: int) -> list[str]:
        if sum(device_event_counts(events).values()) < MAX_EVENTS_PER_SESSION:
            return []
        return [
            f"the capture was cut: profiling cycle {cycle} reached TorchTPU's limit of "
            f"{MAX_EVENTS_PER_SESSION:,} events per profiling session (one start to stop: a cycle here), and "
            "TorchTPU drops every later event with only a "
            "log line ('truncating trace parsing to avoid OOM'), so the TPU time of what ran later is missing. "
            "Shorten the window: fewer active steps per cycle (active=1), or smaller steps; the limit is "
            "TorchTPU's own and no session option raises it"
        ]

    def on_trace_ready(self, prof: torch.profiler.profile, ctx: SessionContext) -> Optional[Path]:
        cycle = ctx.extras.get("cycles_seen", 0)
        ctx.extras["cycles_seen"] = cycle + 1
        # A file written again in the same second keeps its name: compare times too.
        before = ctx.extras.get("written_before", {})
        new = [p for p in self._xplane_files(ctx) if before.get(p) != p.stat().st_mtime_ns]
        if new:
            latest = max(new, key=lambda p: p.stat().st_mtime)
            add_note(ctx, f"TorchTPU wrote its profile (XPlane) to {latest}")
            if latest in before:
                # Only with the env override: TorchTPU names its folders to the second.
                message = (
                    f"TorchTPU overwrote {latest}, the profile of an earlier session started in the same second "
                    f"({OUTPUT_DIR_ENV} makes every session write under one folder); that earlier profile is "
                    f"lost. Unset {OUTPUT_DIR_ENV} so each session gets its own folder, or wait a second "
                    "between sessions"
                )
                add_note(ctx, message)
                warn_user(message)
        return None

    def synchronize(self, ctx: SessionContext) -> None:
        import torch

        torch.accelerator.synchronize()


def _build_quietly(config_cls: Any, kwargs: dict[str, Any]) -> Any:
    """Build the config; TorchTPU's "experimental" warning is shown once per process, not per session."""
    global _warned_experimental
    with _warned_lock:
        first = not _warned_experimental
        _warned_experimental = True
    if first:
        return config_cls(**kwargs)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_EXPERIMENTAL_MESSAGE, category=UserWarning)
        return config_cls(**kwargs)
