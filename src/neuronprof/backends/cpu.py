"""CPU backend: torch.profiler on the host only, no device columns."""

from __future__ import annotations

from neuronprof.backends.base import Backend

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    """Profile host-side operators only; available everywhere.

    No mode applies: ``device`` and ``runtime`` requests become session notes so
    that a script written for Trainium still runs on a laptop.
    """

    name = "cpu"

    def is_available(self) -> bool:
        return True
