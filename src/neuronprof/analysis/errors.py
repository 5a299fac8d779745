"""The errors of offline analysis: input a trace reader cannot use, a run whose device has no known peaks."""

from __future__ import annotations

from neuronprof.errors import NeuronProfError

__all__ = ["TraceError", "UnknownDeviceError"]


class TraceError(NeuronProfError, ValueError):
    """A trace file or folder cannot be read.

    Raised for a missing path, a truncated or corrupt ``.gz`` file, text that is
    not JSON, JSON that is not a Chrome/Perfetto trace, events with missing or
    invalid fields (e.g. a negative duration) and folders holding no trace. The
    message is one line that names the file and, where it helps, the event.
    """


class UnknownDeviceError(NeuronProfError, ValueError):
    """A roofline was asked of the run's own device, and that device has no known peaks.

    Raised by [`roofline`][neuronprof.analysis.roofline], ``Session.roofline()`` and
    ``NeuronProfile.roofline()`` when no ``device=`` is given and the run was on the
    CPU only, on a device whose model has no preset in
    [`DEVICE_PEAKS`][neuronprof.analysis.DEVICE_PEAKS], or on a device whose model is
    not recorded (a Neuron trace does not say which Trainium generation it ran on).
    It is raised before any op is placed. The message names what the run was on and
    how to name a preset (``device=``, ``--device``) or peaks of your own.
    """
