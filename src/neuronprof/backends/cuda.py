"""CUDA backend: torch.profiler with CUPTI kernel timing on NVIDIA GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from neuronprof.backends.base import Backend, SessionContext, core_indices

if TYPE_CHECKING:
    import torch.profiler

__all__ = ["CudaBackend"]


class CudaBackend(Backend):
    """Profile CUDA kernels and runtime calls; ``core`` selects GPU indices.

    Activities ``[CPU, CUDA]``; each step ends with ``torch.cuda.synchronize()`` on
    every selected GPU.
    """

    name = "cuda"
    device_label = "CUDA"
    supported_modes = frozenset({"device", "runtime"})

    def is_available(self) -> bool:
        import torch

        return bool(torch.cuda.is_available())

    def unavailable_reason(self) -> str:
        import torch

        if torch.version.cuda is None:
            return (
                f"torch {torch.__version__} is a CPU-only build; install a CUDA build of torch "
                "(see https://pytorch.org/get-started/locally/)"
            )
        return "torch has CUDA support but no GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"

    def activities(self) -> list[torch.profiler.ProfilerActivity]:
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]

    def default_core(self, ctx: SessionContext) -> Optional[str]:
        import torch

        return str(torch.cuda.current_device())

    def device_name(self, ctx: SessionContext) -> Optional[str]:
        """The model of the selected GPUs (``torch.cuda.get_device_name``); None when they differ."""
        import torch

        # One roofline for several GPUs holds only when they are one model.
        names = {torch.cuda.get_device_name(i) for i in core_indices(ctx.core, torch.cuda.device_count())}
        return names.pop() if len(names) == 1 else None

    def synchronize(self, ctx: SessionContext) -> None:
        import torch

        for index in core_indices(ctx.core, torch.cuda.device_count()):
            torch.cuda.synchronize(index)
