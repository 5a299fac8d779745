"""Neuron backend: AWS Trainium / Inferentia through TorchNeuron (``torch_neuronx``).

TorchNeuron registers the ``neuron`` device through PyTorch's PrivateUse1
extension point and ships its profiler options as ``NeuronConfig``, an
``_ExperimentalConfig`` handed to torch.profiler. This module builds that
config from the session's modes and core, and runs ``NeuronProfiler`` when a
trace is ready so that Neuron's own files (``.neff``/``.ntff``, ``ntrace.pb``...)
land in the session's output folder.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from neuronprof.backends.base import SessionContext
from neuronprof.backends.privateuse1 import PackagedPrivateUse1Backend
from neuronprof.errors import NeuronProfWarning

if TYPE_CHECKING:
    import torch.profiler

__all__ = ["NeuronBackend", "NEURON_INSTALL_HINT"]

NEURON_INSTALL_HINT = (
    "install TorchNeuron from the AWS Neuron package repository, e.g. "
    "`pip install torch-neuronx --extra-index-url https://pip.repos.neuron.amazonaws.com` "
    "(see https://awsdocs-neuron.readthedocs-hosted.com/ for the setup guide); "
    "the `torch-neuronx` package on PyPI is only a placeholder"
)

_MODE_NAMES = {"device": "DEVICE", "runtime": "RUNTIME", "cpu_util": "CPU_UTIL", "host_memory": "HOST_MEMORY"}
_PROFILE_SUBDIR = "neuron_profile"


class NeuronBackend(PackagedPrivateUse1Backend):
    """Profile NeuronCores with TorchNeuron's native torch.profiler integration.

    * modes map to ``ProfileMode``: ``device`` → ``DEVICE``, ``runtime`` → ``RUNTIME``,
      ``cpu_util`` → ``CPU_UTIL``, ``host_memory`` → ``HOST_MEMORY``;
    * ``core`` becomes ``capture_enabled_for_nc``; with no core, the local rank's
      NeuronCore under torchrun, else ``"0"``;
    * Neuron's files go to ``<output_dir>/neuron_profile/``;
    * each step ends with ``torch.neuron.synchronize()``.
    """

    supported_modes = frozenset(_MODE_NAMES)
    writes_output = True

    package = "torch_neuronx"
    extra_modules = ("torch_neuronx.profiling",)
    install_hint = NEURON_INSTALL_HINT
    # The PyPI placeholder raises ImportError("WRONG PACKAGE ...") on import: unavailable.

    def __init__(self) -> None:
        super().__init__("neuron")

    def default_core(self, ctx: SessionContext) -> Optional[str]:
        return str(ctx.local_rank) if ctx.local_rank is not None else "0"

    def profile_dir(self, ctx: SessionContext) -> Path:
        """Return the folder NeuronConfig writes into for this session."""
        return ctx.output_dir / _PROFILE_SUBDIR

    def experimental_config(self, ctx: SessionContext) -> Any:
        from torch_neuronx.profiling import NeuronConfig, ProfileMode

        modes = [getattr(ProfileMode, _MODE_NAMES[m]) for m in ctx.modes if m in _MODE_NAMES]
        kwargs: dict[str, Any] = {
            "modes": modes,
            "capture_enabled_for_nc": ctx.core if ctx.core is not None else "0",
            "profile_output_dir": str(self.profile_dir(ctx)),
        }
        # Newer TorchNeuron releases can align device timestamps with host ones;
        # older ones reject the keyword, so only pass it when it is accepted.
        if _accepts_keyword(NeuronConfig, "correlate_device_time"):
            kwargs["correlate_device_time"] = True
        config = NeuronConfig(**kwargs)
        ctx.extras["neuron_config"] = config
        return config

    def synchronize(self, ctx: SessionContext) -> None:
        import torch

        torch.neuron.synchronize()  # type: ignore[attr-defined]

    def on_trace_ready(self, prof: torch.profiler.profile, ctx: SessionContext) -> Optional[Path]:
        from torch_neuronx.profiling import NeuronProfiler

        config = ctx.extras.get("neuron_config")
        if config is None:
            return None
        root = self.profile_dir(ctx)
        before = set(root.rglob("trace.json")) if root.exists() else set()
        try:
            NeuronProfiler(config).export_trace(prof)
        except Exception as exc:  # Neuron's files are a bonus; the torch data is kept regardless.
            warnings.warn(
                f"NeuronProfiler.export_trace failed ({type(exc).__name__}: {exc}); the torch.profiler "
                "data is kept and s.table()/s.export() still work",
                NeuronProfWarning,
                stacklevel=2,
            )
            return None
        after = set(root.rglob("trace.json")) if root.exists() else set()
        new = sorted(after - before, key=lambda p: p.stat().st_mtime)
        return new[-1] if new else None

    def neuron_bundle_source(self, ctx: SessionContext) -> Optional[Path]:
        root = self.profile_dir(ctx)
        return root if root.is_dir() else None


def _accepts_keyword(cls: Any, name: str) -> bool:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    # **kwargs does not count: a binding that forwards them may still reject the name.
    return name in params
