"""Test stand-in for TorchTPU, Google's ``torch_tpu`` PrivateUse1 backend for TPUs.

The real package cannot be used here: it needs a TPU host and libtpu. This
stand-in follows the TorchTPU sources and docs (``torch.tpu`` device module,
``torch.tpu.profiler.TpuProfilerConfig`` in
``torch_tpu/_internal/profiler/profiler_config.py``, the kineto plugin's
``key:value,...`` custom-config format) and the project's notes that
``torch.tpu.synchronize()`` raises on torch >= 2.11 so callers must use
``torch.accelerator.synchronize()``.

What it reproduces:

* importing it registers the PrivateUse1 backend ``tpu`` through
  ``testbackend.register("tpu")``: ``torch.tpu`` exists, and PrivateUse1
  profiles record fake device kernels as CONCURRENT_KERNEL events **linked to
  no op** (TorchTPU 0.2.0): TPU time sits on the kernel rows (``Self TPU``),
  the aten ops that launched them carry none; ``device_tracer_level:0``
  records no kernels;
* when a profile stops, the profiler writes
  ``<base>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>[_<worker_rank>].xplane.pb``
  where ``base`` is ``TORCH_TPU_PROFILER_OUTPUT_DIR`` if set (silently
  overriding ``run_dir``), else ``run_dir``; ranks on one host without
  ``worker_rank`` write the same name (see :mod:`torch_tpu.profiler`);
* ``torch.tpu.profiler`` (also ``torch_tpu.profiler``, and
  ``sys.modules["torch.tpu.profiler"]``) holds ``TpuProfilerConfig``;
* ``torch.tpu.synchronize()`` raises ``RuntimeError`` and counts the attempt
  in ``torch.tpu.sync_calls_rejected``. The one caller it lets through is
  torch.profiler itself: ``torch.autograd.profiler.profile.__exit__`` calls
  ``torch.<backend>.synchronize()`` at the end of every PrivateUse1 profile,
  and a raise there would break every profile; those calls are counted in
  ``torch.tpu.profiler_exit_sync_calls``;
* ``torch.accelerator.synchronize()`` reaches the test plugin's C++
  DeviceGuard; :func:`accelerator_sync_calls` returns how often.

Environment switches, read once at import:

* ``NEURONPROF_STANDIN_EMIT=0``: no device activity in profiles, which is what
  the public TorchTPU kineto plugin does today (its ``processTrace`` is a TODO;
  it writes XPlane files under ``run_dir`` instead);
* ``NEURONPROF_STANDIN_TPU_SYNC``: ``raise`` (default, as above), ``always``
  (raise even inside torch.profiler's exit, which breaks every profile) or
  ``ok`` (count, never raise);
* ``NEURONPROF_STANDIN_TPU_WARN=0``: ``TpuProfilerConfig()`` does not emit its
  "experimental" ``UserWarning``.

Tensors cannot be placed on ``"tpu"``: there is no allocator.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

_BACKENDS_DIR = str(Path(__file__).resolve().parents[2])
if _BACKENDS_DIR not in sys.path:
    sys.path.insert(0, _BACKENDS_DIR)

import testbackend as _testbackend  # noqa: E402

__version__ = "0.0.0+standin"
STANDIN = True

SYNC_MODE = os.environ.get("NEURONPROF_STANDIN_TPU_SYNC", "raise")
if SYNC_MODE not in ("raise", "always", "ok"):
    raise ValueError(f"NEURONPROF_STANDIN_TPU_SYNC must be raise, always or ok, got {SYNC_MODE!r}")

_PROFILER_FILE = os.path.join("torch", "autograd", "profiler.py")


def _called_by_torch_profiler_exit(frame: Any) -> bool:
    return (
        frame is not None and frame.f_code.co_name == "__exit__" and frame.f_code.co_filename.endswith(_PROFILER_FILE)
    )


class TpuDeviceModule(_testbackend.DeviceModule):
    """``torch.tpu``; ``synchronize()`` refuses direct calls (see the package docstring)."""

    def __init__(self) -> None:
        super().__init__("tpu")
        self.sync_calls_rejected = 0
        self.profiler_exit_sync_calls = 0

    def synchronize(self, device: Any = None) -> None:
        if SYNC_MODE == "ok":
            super().synchronize(device)
            return
        if SYNC_MODE == "raise" and _called_by_torch_profiler_exit(sys._getframe(1)):
            self.profiler_exit_sync_calls += 1
            return
        self.sync_calls_rejected += 1
        raise RuntimeError(
            "torch.tpu.synchronize() is not supported with this torch version; "
            "use torch.accelerator.synchronize() instead"
        )

    def reset_counts(self) -> None:
        super().reset_counts()
        self.sync_calls_rejected = 0
        self.profiler_exit_sync_calls = 0


_EMIT = os.environ.get("NEURONPROF_STANDIN_EMIT", "1") != "0"
device_module = TpuDeviceModule()
_testbackend.register("tpu", emit=_EMIT, device_module=device_module)

from torch_tpu import profiler  # noqa: E402

_testbackend.set_kernel_mode("unlinked")
_testbackend.set_runtime_events(False)
_testbackend.set_session_hook(profiler._session_hook)

device_module.__dict__["profiler"] = profiler
sys.modules["torch.tpu.profiler"] = profiler


def accelerator_sync_calls() -> int:
    """How often ``torch.accelerator.synchronize()`` reached the TPU device guard."""
    return _testbackend.guard_sync_calls()


__all__ = ["STANDIN", "SYNC_MODE", "TpuDeviceModule", "accelerator_sync_calls", "device_module", "profiler"]
