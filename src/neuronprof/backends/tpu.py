"""TPU backend: Google TPUs through TorchTPU (``torch_tpu``), a PrivateUse1 device."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from neuronprof.backends.base import SessionContext
from neuronprof.backends.privateuse1 import PackagedPrivateUse1Backend

__all__ = ["TpuBackend", "TPU_INSTALL_HINT"]

TPU_INSTALL_HINT = "install TorchTPU (`pip install torch-tpu`) on a Cloud TPU VM"

_PROFILE_SUBDIR = "tpu_profile"


class TpuBackend(PackagedPrivateUse1Backend):
    """Profile TPUs with TorchTPU's ``TpuProfilerConfig``.

    Activities ``[CPU, PrivateUse1]``; TorchTPU's own profile goes to
    ``<output_dir>/tpu_profile/`` (``run_dir``). Each step ends with
    ``torch.accelerator.synchronize()``: TorchTPU's ``torch.tpu.synchronize()``
    raises ``RuntimeError`` on torch >= 2.11.
    """

    writes_output = True

    package = "torch_tpu"
    install_hint = TPU_INSTALL_HINT

    def __init__(self) -> None:
        super().__init__("tpu")

    def profile_dir(self, ctx: SessionContext) -> Path:
        """Return the folder TorchTPU writes its profile into for this session."""
        return ctx.output_dir / _PROFILE_SUBDIR

    def experimental_config(self, ctx: SessionContext) -> Any:
        import torch

        config_cls = torch.tpu.profiler.TpuProfilerConfig  # type: ignore[attr-defined]
        kwargs: dict[str, Any] = {"run_dir": str(self.profile_dir(ctx))}
        if "device" not in ctx.modes and "device_tracer_level" in _parameters(config_cls):
            kwargs["device_tracer_level"] = 0
        return config_cls(**kwargs)

    def synchronize(self, ctx: SessionContext) -> None:
        import torch

        torch.accelerator.synchronize()


def _parameters(cls: Any) -> set[str]:
    try:
        return set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return set()
