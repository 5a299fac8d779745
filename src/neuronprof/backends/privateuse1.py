"""Generic PrivateUse1 backend: any out-of-tree device renamed with
``torch.utils.rename_privateuse1_backend``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neuronprof.backends.base import (
    PRIVATEUSE1_MIN_TORCH,
    Backend,
    SessionContext,
    privateuse1_name,
    torch_version,
)

if TYPE_CHECKING:
    import torch.profiler

__all__ = ["PrivateUse1Backend", "privateuse1_torch_problem"]


def privateuse1_torch_problem() -> str | None:
    """Return why this torch cannot time PrivateUse1 devices, or None if it can."""
    if torch_version() < PRIVATEUSE1_MIN_TORCH:
        import torch

        need = ".".join(str(v) for v in PRIVATEUSE1_MIN_TORCH)
        return (
            f"PrivateUse1 device time in torch.profiler needs torch >= {need}; "
            f"this is torch {torch.__version__}. Upgrade torch (and the device plugin built for it)"
        )
    return None


class PrivateUse1Backend(Backend):
    """Profile a device that plugs into PyTorch through PrivateUse1.

    Activities ``[CPU, PrivateUse1]``. Each step ends with ``torch.<name>.synchronize()``
    when the device module provides it, else ``torch.accelerator.synchronize()``.

    Args:
        name: The name the backend was renamed to, e.g. ``"mydev"``.
    """

    supported_modes = frozenset({"device", "runtime"})

    def __init__(self, name: str) -> None:
        self.name = name  # type: ignore[misc]  # instance name: one class serves any device
        self.device_label = name.upper()

    def is_available(self) -> bool:
        return privateuse1_name() == self.name and privateuse1_torch_problem() is None

    def unavailable_reason(self) -> str:
        problem = privateuse1_torch_problem()
        if problem:
            return problem
        current = privateuse1_name()
        if current is None:
            return (
                f"no PrivateUse1 backend is registered; import the package that provides "
                f"{self.name!r} (it calls torch.utils.rename_privateuse1_backend) before the session"
            )
        return f"the PrivateUse1 backend in this process is {current!r}, not {self.name!r}"

    def activities(self) -> list[torch.profiler.ProfilerActivity]:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]

    def synchronize(self, ctx: SessionContext) -> None:
        import torch

        module = getattr(torch, self.name, None)
        sync = getattr(module, "synchronize", None)
        if callable(sync):
            sync()
        else:
            torch.accelerator.synchronize()
