"""Test stand-in for TorchNeuron, the ``torch_neuronx`` package of the AWS Neuron SDK.

The real package cannot be installed here: ``pip install torch-neuronx`` from
PyPI gets a placeholder whose import raises ``ImportError("WRONG PACKAGE ...")``
(mirrored in ``tests/backends/placeholder``), the real wheels live in the
Neuron repository, and they need a Trainium/Inferentia instance anyway.

Four builds of TorchNeuron exist in the public record; the environment
variable ``NEURONPROF_STANDIN_NEURON_BUILD`` (read once, at import) picks one:

* ``documented`` (default): the profiling API of the Neuron 2.30-2.32 docs
  ("Capture PyTorch profiles with Neuron Explorer"): ``NeuronConfig``,
  ``ProfileMode``, ``NeuronProfiler(config).export_trace``. ``NeuronConfig`` has
  no ``correlate_device_time``; the kineto plugin emits only
  PRIVATEUSE1_RUNTIME events, which torch files as CPU rows: no NEURON column.
* ``correlating``: the build of the Nov 2026 article: ``NeuronConfig`` also
  accepts ``correlate_device_time``, and only with it set does the plugin emit
  NeuronCore executions as device kernels linked to their ops (the ``Self
  NEURON`` column). ``NEURONPROF_STANDIN_CORRELATE=1`` is an older spelling.
* ``beta``: the public beta (Neuron 2.33): ``torch-neuronx`` 2.13.3.0 with torch
  2.13.0, 2.14.3.0 with torch 2.14.0. Its documented profiling surface is the
  ``documented`` one; ``__version__`` is ``<torch major.minor>.3.0`` (or
  ``NEURONPROF_STANDIN_NEURON_VERSION``, to play a release paired with another torch).
* ``legacy``: the Feb-Apr 2026 source: ``torch_neuronx.profiling`` has no
  ``NeuronConfig`` and no ``ProfileMode``, only the self-contained
  ``NeuronProfiler`` context manager; torch.profiler takes a plain
  ``_ExperimentalConfig(custom_profiler_config=...)``.

In every build the settings reach the plugin through ``custom_profiler_config``
and a fake Neuron Runtime (:mod:`torch_neuronx._runtime`) parses them and
writes its files when the profiler stops.

Also reproduced:

* importing it registers the PrivateUse1 backend ``neuron`` (through
  ``testbackend.register("neuron")``): ``torch.neuron`` exists;
* ``torch.neuron.device_count()`` is the number of NeuronCores the process sees
  (``NEURON_RT_VISIBLE_CORES``, as torchrun sets it per process, else
  ``NEURONPROF_STANDIN_NEURON_CORES``, default 2); indices are process-local;
* ``torch.neuron.synchronize(device=None)`` (also :func:`synchronize`) waits for
  one device, the current one when no device is given; calls are counted in
  ``torch.neuron.sync_calls`` and the devices in ``sync_devices``.

``NEURONPROF_STANDIN_EMIT=0`` makes the plugin emit nothing at all.

Tensors cannot be placed on ``"neuron"``: there is no allocator, only the
profiler, device-module and device-guard plumbing.
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

STANDIN = True

BUILDS = ("documented", "correlating", "legacy", "beta")
BUILD = os.environ.get("NEURONPROF_STANDIN_NEURON_BUILD") or (
    "correlating" if os.environ.get("NEURONPROF_STANDIN_CORRELATE") == "1" else "documented"
)
if BUILD not in BUILDS:
    raise ValueError(f"NEURONPROF_STANDIN_NEURON_BUILD must be one of {', '.join(BUILDS)}, got {BUILD!r}")

# The public beta is numbered after the torch it pairs with (2.13.3.0 with torch 2.13.0,
# 2.14.3.0 with torch 2.14.0); NEURONPROF_STANDIN_NEURON_VERSION plays another release.
# The earlier builds' release numbers are not in the record.
if BUILD == "beta":
    import torch as _torch

    _line = ".".join(_torch.__version__.split("+")[0].split(".")[:2])
    __version__ = os.environ.get("NEURONPROF_STANDIN_NEURON_VERSION") or f"{_line}.3.0"
else:
    __version__ = os.environ.get("NEURONPROF_STANDIN_NEURON_VERSION") or "0.0.0+standin"

from torch_neuronx import _runtime  # noqa: E402


class NeuronDeviceModule(_testbackend.DeviceModule):
    """``torch.neuron``: one device per visible NeuronCore; ``synchronize`` waits for one."""

    def device_count(self) -> int:
        return _runtime.visible_cores()

    def set_device(self, device: Any) -> None:
        index = getattr(device, "index", device)
        if index is not None and not 0 <= int(index) < self.device_count():
            raise RuntimeError(f"neuron:{index} is not visible to this process ({self.device_count()} NeuronCores)")

    def synchronize(self, device: Any = None) -> None:
        index = getattr(device, "index", device)
        if index is not None and not 0 <= int(index) < self.device_count():
            raise RuntimeError(f"neuron:{index} is not visible to this process ({self.device_count()} NeuronCores)")
        # With no argument only the current device is waited for.
        index = self.current_device() if index is None else int(index)
        super().synchronize(index)
        _allocate(index, 1 << 20)  # the step's allocation, settled by this sync
        _committed[index] = _committed.get(index, 0) + _pending.pop(index, 0)


_EMIT = os.environ.get("NEURONPROF_STANDIN_EMIT", "1") != "0"
device_module = NeuronDeviceModule("neuron")
_testbackend.register("neuron", emit=_EMIT, device_module=device_module)
# What reaches torch is decided per profile, from the config: see _runtime.
_testbackend.set_kernel_mode("none")
_testbackend.set_session_hook(_runtime.hook(correlating_build=BUILD == "correlating"))


_committed: dict[int, int] = {}
_pending: dict[int, int] = {}


def _allocate(index: int, nbytes: int) -> None:
    # An asynchronous allocator: what a step allocates is counted only once the device is synchronised.
    _pending[index] = _pending.get(index, 0) + nbytes


def memory_allocated(device: Any = None) -> int:
    """Bytes allocated on one NeuronCore as the (asynchronous) allocator last settled them.

    Only ``NEURONPROF_STANDIN_NEURON_MEMORY=1`` provides it (the real function's name is
    not confirmed in the public record). Each profiled step allocates 1 MiB per core, which
    this statistic shows only after ``synchronize`` of that core.
    """
    index = getattr(device, "index", device)
    return _committed.get(0 if index is None else int(index), 0)


if os.environ.get("NEURONPROF_STANDIN_NEURON_MEMORY") != "1":
    del memory_allocated


def synchronize(device: Any = None) -> None:
    """Wait for one (fake) device, the current one by default; same as ``torch.neuron.synchronize()``."""
    device_module.synchronize(device)


from torch_neuronx import profiling  # noqa: E402

__all__ = [
    "BUILD",
    "BUILDS",
    "STANDIN",
    "NeuronDeviceModule",
    "__version__",
    "device_module",
    "profiling",
    "synchronize",
]
