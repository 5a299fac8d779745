"""TPU backend: Google TPUs through TorchTPU (``torch_tpu``), a PrivateUse1 device."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from typing import Any, Optional

from neuronprof.backends.base import SessionContext, privateuse1_name
from neuronprof.backends.privateuse1 import PrivateUse1Backend, privateuse1_torch_problem

__all__ = ["TpuBackend", "TPU_INSTALL_HINT"]

TPU_INSTALL_HINT = "install TorchTPU (`pip install torch-tpu`) on a Cloud TPU VM"

_PROFILE_SUBDIR = "tpu_profile"


class TpuBackend(PrivateUse1Backend):
    """Profile TPUs with TorchTPU's ``TpuProfilerConfig``.

    Activities ``[CPU, PrivateUse1]``; TorchTPU's own profile goes to
    ``<output_dir>/tpu_profile/`` (``run_dir``). Each step ends with
    ``torch.accelerator.synchronize()``: TorchTPU's ``torch.tpu.synchronize()``
    raises ``RuntimeError`` on torch >= 2.11.
    """

    writes_output = True

    def __init__(self) -> None:
        super().__init__("tpu")
        self._import_error: Optional[str] = None

    def _import(self) -> Any:
        current = privateuse1_name()
        if current is not None and current != self.name:
            # PrivateUse1 can be renamed once per process; importing torch_tpu now would fail.
            self._import_error = f"PrivateUse1 is already taken by {current!r} in this process"
            return None
        if importlib.util.find_spec("torch_tpu") is None:
            self._import_error = f"torch_tpu is not installed; {TPU_INSTALL_HINT}"
            return None
        try:
            module = importlib.import_module("torch_tpu")
        except Exception as exc:  # a broken install must not break backend='auto'
            self._import_error = f"torch_tpu failed to import ({exc}); {TPU_INSTALL_HINT}"
            return None
        self._import_error = None
        return module

    def is_available(self) -> bool:
        if self._import() is None:
            return False
        return super().is_available()

    def unavailable_reason(self) -> str:
        if self._import() is None:
            return self._import_error or TPU_INSTALL_HINT
        return privateuse1_torch_problem() or super().unavailable_reason()

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
