"""Test stand-in for TorchNeuron, the ``torch_neuronx`` package of the AWS Neuron SDK.

The real package cannot be installed here: ``pip install torch-neuronx`` from
PyPI gets a placeholder whose import raises ``ImportError("WRONG PACKAGE ...")``
(mirrored in ``tests/backends/placeholder``), the real wheels live in the
Neuron repository, and they need a Trainium/Inferentia instance anyway.

What this stand-in reproduces:

* importing it registers the PrivateUse1 backend ``neuron`` through
  ``testbackend.register("neuron")``: ``torch.neuron`` exists,
  ``torch.profiler.profile(activities=[CPU, PrivateUse1])`` records fake
  device kernels, and tables read ``Self NEURON`` / ``NEURON total``;
* ``torch.neuron.synchronize()`` and :func:`synchronize` count their calls in
  ``torch.neuron.sync_calls``;
* :mod:`torch_neuronx.profiling` follows the documented profiling API
  (``NeuronConfig``, ``ProfileMode``, ``NeuronProfiler``) from the Neuron
  Explorer guide "Capture PyTorch profiles with Neuron Explorer"
  (awsdocs-neuron.readthedocs-hosted.com, tools/neuron-explorer/how-to-profile-pytorch).

Environment switches, read once at import:

* ``NEURONPROF_STANDIN_EMIT=0``: the plugin emits no device activity, which is
  what the public torch_neuronx kineto plugin does today (its
  ``processTrace`` is a no-op; NRT writes its own files instead), so tables
  get no device columns;
* ``NEURONPROF_STANDIN_CORRELATE=1``: ``NeuronConfig`` also accepts a
  ``correlate_device_time`` keyword (see :mod:`torch_neuronx.profiling`).

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

__version__ = "0.0.0+standin"
STANDIN = True


class NeuronDeviceModule(_testbackend.DeviceModule):
    """``torch.neuron``: counts ``synchronize()`` calls in ``sync_calls``."""


_EMIT = os.environ.get("NEURONPROF_STANDIN_EMIT", "1") != "0"
device_module = NeuronDeviceModule("neuron")
_testbackend.register("neuron", emit=_EMIT, device_module=device_module)


def synchronize(device: Any = None) -> None:
    """Wait for the (fake) device; same as ``torch.neuron.synchronize()``."""
    device_module.synchronize(device)


from torch_neuronx import profiling  # noqa: E402

__all__ = ["STANDIN", "NeuronDeviceModule", "device_module", "profiling", "synchronize"]
