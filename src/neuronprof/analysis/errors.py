"""The error every trace reader raises for input it cannot use."""

from __future__ import annotations

from neuronprof.errors import NeuronProfError

__all__ = ["TraceError"]


class TraceError(NeuronProfError, ValueError):
    """A trace file or folder cannot be read.

    Raised for a missing path, a truncated or corrupt ``.gz`` file, text that is
    not JSON, JSON that is not a Chrome/Perfetto trace, events with missing or
    invalid fields (e.g. a negative duration) and folders holding no trace. The
    message is one line that names the file and, where it helps, the event.
    """
