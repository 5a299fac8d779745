"""Generic PrivateUse1 backend: any out-of-tree device renamed with
``torch.utils.rename_privateuse1_backend``.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from neuronprof.backends.base import (
    PRIVATEUSE1_MIN_TORCH,
    Backend,
    SessionContext,
    privateuse1_name,
    torch_version,
)

if TYPE_CHECKING:
    import torch.profiler

__all__ = ["PrivateUse1Backend"]


def privateuse1_torch_problem(who: str = "a PrivateUse1 device's profiler plugin") -> str | None:
    """Return why this torch cannot time PrivateUse1 devices, or None if it can.

    A kineto plugin that registers through PyTorch's ``PrivateUse1ProfilerRegistry``
    (``REGISTER_PRIVATEUSE1_PROFILER``) needs the torch release that added it, 2.12.
    """
    if torch_version() < PRIVATEUSE1_MIN_TORCH:
        import torch

        need = ".".join(str(v) for v in PRIVATEUSE1_MIN_TORCH)
        return (
            f"{who} needs torch >= {need}: it registers with torch.profiler through PrivateUse1ProfilerRegistry, "
            f"added in torch {need}; this is torch {torch.__version__}. Upgrade torch (and the device plugin "
            "built for it)"
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

    def torch_problem(self) -> Optional[str]:
        """Return why this torch release cannot profile the device, or None."""
        return privateuse1_torch_problem()

    def is_available(self) -> bool:
        return privateuse1_name() == self.name and self.torch_problem() is None

    def unavailable_reason(self) -> str:
        problem = self.torch_problem()
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


class _PackagedPrivateUse1Backend(PrivateUse1Backend):
    """A PrivateUse1 backend whose device comes from a package that registers it on import.

    Subclasses name the ``package`` (``"torch_neuronx"``), any ``extra_modules`` they
    need, and an ``install_hint``. The package is looked up with
    ``importlib.util.find_spec`` first, so an absent one costs nothing.
    """

    package: ClassVar[str] = ""
    extra_modules: ClassVar[tuple[str, ...]] = ()
    install_hint: ClassVar[str] = ""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._import_error: Optional[str] = None

    def _import(self) -> Any:
        """Import the package (which registers the device) or record why not."""
        current = privateuse1_name()
        if current is not None and current != self.name:
            # PrivateUse1 can be renamed once per process; importing the package now would fail.
            self._import_error = f"PrivateUse1 is already taken by {current!r} in this process"
            return None
        if importlib.util.find_spec(self.package) is None:
            self._import_error = f"{self.package} is not installed; {self.install_hint}"
            return None
        try:
            module = importlib.import_module(self.package)
            for extra in self.extra_modules:
                importlib.import_module(extra)
        except Exception as exc:  # a broken install must not break backend='auto'
            self._import_error = f"{self.package} failed to import ({exc}); {self.install_hint}"
            return None
        self._import_error = None
        return module

    def is_available(self) -> bool:
        return self._import() is not None and super().is_available()

    def unavailable_reason(self) -> str:
        if self._import() is None:
            return self._import_error or self.install_hint
        return super().unavailable_reason()
