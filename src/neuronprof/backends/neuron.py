"""Neuron backend: AWS Trainium / Inferentia through TorchNeuron (``torch_neuronx``).

TorchNeuron registers the ``neuron`` device through PyTorch's PrivateUse1
extension point and its kineto plugin directly with kineto (so it does not rely
on torch 2.12's PrivateUse1ProfilerRegistry). Its profiler settings travel to the
plugin as kineto's ``custom_profiler_config`` string (``key:value;key:value``).
Four TorchNeuron builds are in the public record, and this module handles each:

* **correlating** (the build shown in AWS's Nov 2026 article): ``NeuronConfig``
  accepts ``correlate_device_time``; with it set, NeuronCore executions reach
  torch.profiler as device kernels linked to their ops, which fills the
  ``Self NEURON`` column;
* **beta** (the public beta, Neuron 2.33): ``torch-neuronx`` 2.13.3.0 with torch
  2.13.0 and 2.14.3.0 with torch 2.14.0. Its documented profiling surface is the
  documented build's, so it is handled as that one; a ``torch-neuronx`` release
  paired with another torch than the one installed is pointed out;
* **documented** (Neuron 2.30-2.32 docs): ``NeuronConfig`` without that keyword.
  The plugin sends only Neuron runtime events, which torch files as CPU rows:
  NeuronCore time stays in Neuron's own profile files and the NEURON column is
  empty, as expected;
* **legacy** (Feb-Apr 2026 source): no ``NeuronConfig``/``ProfileMode``; the
  settings are passed as a plain ``_ExperimentalConfig(custom_profiler_config=...)``
  with the plugin's own keys (``profile_output_dir``, ``capture_enabled_for_nc``,
  ``host_memory``).

Neuron Runtime writes its files when the profiler stops, into
``<profile_output_dir>/<instance-id>_pid_<pid>/<timestamp>/`` (one such session
folder per profiling cycle); TorchNeuron's ``NeuronProfiler(config).export_trace``
then writes the framework trace (``trace.json``) beside them.
[`NeuronBackend.runtime_session_dirs`][neuronprof.backends.NeuronBackend.runtime_session_dirs]
lists those folders for a session.

Neuron Runtime's own capture through environment variables (``NEURON_RT_INSPECT_*``)
conflicts with torch.profiler (Neuron 2.33.1: "Don't combine it with torch.profiler
... The two mechanisms conflict"), so a session refuses to start while one is set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from neuronprof.backends import _neuron_files
from neuronprof.backends.base import (
    DeviceFiles,
    DeviceTime,
    SessionContext,
    add_note,
    core_indices,
    cores_not_visible,
    device_event_counts,
    parameter_names,
    release_line,
)
from neuronprof.backends.privateuse1 import _PackagedPrivateUse1Backend
from neuronprof.errors import SessionStateError, warn_user
from neuronprof.typing import Mode, NeuronBuild, ToolChoice

if TYPE_CHECKING:
    import torch.profiler

    from neuronprof.analysis import NeuronProfile
    from neuronprof.analysis.trace import EventTable
    from neuronprof.model import Table

__all__ = [
    "BETA_TORCH",
    "DEFAULT_MAX_EVENTS_PER_NC",
    "FRAMEWORK_TRACE_PATTERNS",
    "INSPECT_ENV_PREFIX",
    "NEFF_CACHE_ENV",
    "NEURON_INSTALL_HINT",
    "NeuronBackend",
    "NeuronBuild",
]

NEURON_INSTALL_HINT = (
    "install TorchNeuron from the AWS Neuron package repository, e.g. "
    "`pip install torch-neuronx --extra-index-url https://pip.repos.neuron.amazonaws.com` "
    "(see https://awsdocs-neuron.readthedocs-hosted.com/ for the setup guide); "
    "the `torch-neuronx` package on PyPI is only a placeholder"
)

NEFF_CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
"""Environment variable naming TorchNeuron's NEFF cache folder; with it, NEFFs are copied into the profile."""

INSPECT_ENV_PREFIX = "NEURON_RT_INSPECT_"
"""Prefix of Neuron Runtime's environment-variable capture settings (``NEURON_RT_INSPECT_ENABLE`` ...)."""

DEFAULT_MAX_EVENTS_PER_NC = 1_000_000
"""Neuron Runtime's default cap on the events it captures per NeuronCore (``max_events_per_nc``)."""

BETA_TORCH: dict[str, str] = {"2.13": "2.13.0", "2.14": "2.14.0"}
"""The torch release each ``torch-neuronx`` release line of the public beta pairs with (Neuron 2.33)."""

FRAMEWORK_TRACE_PATTERNS = ("trace.json", "neuron_framework_trace_rank_*.json", "pytorch_trace.json")
"""Names under which TorchNeuron's exporter has been seen to write the framework trace."""

_MODE_NAMES: dict[Mode, str] = {
    "device": "DEVICE",
    "runtime": "RUNTIME",
    "cpu_util": "CPU_UTIL",
    "host_memory": "HOST_MEMORY",
}
_PROFILE_SUBDIR = "neuron_profile"
# The Neuron 2.33 memory guide names torch_neuronx.memory_* statistics without listing
# them here; memory_allocated(device) is torch.cuda's name, looked up and used only if present.
_MEMORY_STAT = "memory_allocated"
_CORRELATE = "correlate_device_time"


class NeuronBackend(_PackagedPrivateUse1Backend):
    """Profile NeuronCores with TorchNeuron's native torch.profiler integration.

    * modes map to ``ProfileMode``: ``device`` → ``DEVICE``, ``runtime`` → ``RUNTIME``,
      ``cpu_util`` → ``CPU_UTIL``, ``host_memory`` → ``HOST_MEMORY``;
    * ``core`` becomes ``capture_enabled_for_nc`` (process-local indices and ranges);
      no core, or ``"all"``, leaves it out: every NeuronCore this process sees;
    * ``correlate_device_time=True`` is passed exactly when ``NeuronConfig`` accepts it;
    * ``neff_cache_dir`` comes from ``TORCH_NEURONX_NEFF_CACHE_DIR`` when it is set, so
      the NEFFs land in the profile;
    * Neuron's files go to ``<output_dir>/neuron_profile/``;
    * each step ends with ``torch.neuron.synchronize(i)`` for every captured device
      ``i`` that this process sees (``synchronize()`` alone waits for the current device
      only); when ``core`` names none of them (a ``NeuronProfWarning`` says so at start),
      every NeuronCore of the process is synchronised instead.
    """

    supported_modes = frozenset(_MODE_NAMES)
    writes_output = True

    package = "torch_neuronx"
    extra_modules = ("torch_neuronx.profiling",)
    install_hint = NEURON_INSTALL_HINT
    # The PyPI placeholder raises ImportError("WRONG PACKAGE ...") on import: unavailable.

    def __init__(self) -> None:
        super().__init__("neuron")

    def torch_problem(self) -> Optional[str]:
        # TorchNeuron's plugin registers with kineto itself, not through torch 2.12's
        # PrivateUse1ProfilerRegistry, so no torch release is refused here.
        return None

    def profile_dir(self, ctx: SessionContext) -> Path:
        """Return the folder given to TorchNeuron as ``profile_output_dir`` for this session.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """
        return ctx.output_dir / _PROFILE_SUBDIR

    def runtime_session_dirs(self, ctx: SessionContext) -> list[Path]:
        """Return the Neuron Runtime session folders this session wrote, oldest first.

        Neuron Runtime writes one folder per profile (cycle) when the profiler stops:
        ``<profile_dir>/<instance-id>_pid_<pid>/<timestamp>/``, holding the device
        traces (``*.ntff``), the NEFFs (``*.neff``, with a NEFF cache folder), the
        system trace (``ntrace.pb``, ``trace_info.pb``), ``cpu_util.pb``,
        ``host_mem.pb`` and TorchNeuron's framework trace. Folders that were there
        before the session started (earlier sessions of this process writing to the
        same ``output_dir``: a notebook, ``compare()``) are not this session's.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """
        before = ctx.extras.get("dirs_before", frozenset())
        return [d for d in _neuron_files.pid_dirs(self.profile_dir(ctx)) if d not in before]

    # -- what this TorchNeuron build offers -----------------------------------
    def build(self) -> NeuronBuild:
        """Return which TorchNeuron profiling API is installed."""
        from torch_neuronx import profiling

        config_cls = getattr(profiling, "NeuronConfig", None)
        if config_cls is None:
            return "legacy"
        if _CORRELATE in parameter_names(config_cls):
            return "correlating"
        # The beta's releases are numbered after the torch they pair with (2.13.3.0, 2.14.3.0);
        # the builds before it pinned torch 2.10 or older.
        return "beta" if release_line(self.version()) >= (2, 13) else "documented"

    def version(self) -> Optional[str]:
        """Return the installed ``torch_neuronx.__version__``, or None where it has none."""
        import torch_neuronx

        version = getattr(torch_neuronx, "__version__", None)
        return str(version) if version else None

    def torch_pairing_problem(self) -> Optional[str]:
        """Say how the installed torch differs from the one this ``torch-neuronx`` release pairs with, or None.

        The public beta pairs ``torch-neuronx`` 2.13.3.0 with torch 2.13.0 and 2.14.3.0 with
        torch 2.14.0 (Neuron 2.33); its first two numbers name the torch release line.
        Releases outside the beta (no pairing in the public record) give None.
        """
        import torch

        version = self.version()
        line = release_line(version)
        paired = BETA_TORCH.get(f"{line[0]}.{line[1]}")
        if paired is None or release_line(torch.__version__) == line:
            return None
        return (
            f"torch-neuronx {version} pairs with torch {paired}, but torch {torch.__version__} is installed: "
            f"install torch=={paired}, or the torch-neuronx release of your torch (the public beta has "
            f"{' and '.join(f'{v}.3.0 for torch {t}' for v, t in BETA_TORCH.items())})"
        )

    def refusal(self) -> Optional[str]:
        inspect_vars = sorted(k for k in os.environ if k.startswith(INSPECT_ENV_PREFIX))
        if not inspect_vars:
            return None
        return (
            f"{', '.join(inspect_vars)} {'is' if len(inspect_vars) == 1 else 'are'} set: Neuron Runtime's "
            "environment-variable capture conflicts with torch.profiler (Neuron 2.33.1: \"Don't combine it with "
            'torch.profiler or jax.profiler.trace. The two mechanisms conflict."), so this session does not start. '
            f"Unset {' and '.join(inspect_vars)} before starting Python (e.g. `env -u {inspect_vars[0]} python "
            "train.py`) and choose what to capture with the session's modes and core instead"
        )

    def device_time(self, ctx: SessionContext) -> DeviceTime:
        return "linked" if ctx.extras.get("correlated") else "none"

    def empty_device_warning(self, ctx: SessionContext) -> Optional[str]:
        if self.device_time(ctx) == "none":
            return None
        return (
            "no NEURON device time was recorded (every row is zero), although this TorchNeuron build was asked "
            "to correlate NeuronCore time (correlate_device_time=True). Likely causes: the model or its inputs "
            "are still on the CPU (move them with .to('neuron')); or the device was not synchronised before "
            "each step (loop over s.steps() or call s.step()). Run `neuronprof doctor --probe --backend neuron` "
            "to see what the plugin delivers; NeuronCore time is also in s.export(format='neuron')."
        )

    # -- the session ------------------------------------------------------------
    def _visible_cores(self) -> Optional[int]:
        import torch

        count = getattr(getattr(torch, "neuron", None), "device_count", None)
        try:
            return int(count()) if callable(count) else None
        except Exception:  # a device module without a working count: stay defensive
            return None

    def _check_cores(self, ctx: SessionContext) -> None:
        count = self._visible_cores()
        if ctx.core is None or ctx.core == "all" or count is None:
            return
        missing = cores_not_visible(ctx.core, count)
        visible = (
            f"this process sees {count} NeuronCore(s) (indices 0-{count - 1})"
            if count
            else ("this process sees no NeuronCore")
        )
        local = (
            "Core indices are process-local: under torchrun each process's NeuronCores start at 0, "
            "so core=None captures a process's own"
        )
        if not core_indices(ctx.core, count):
            # Nothing would be captured: Neuron Runtime skips cores the process does not have.
            message = (
                f"core={ctx.core!r} names no NeuronCore visible to this process: {visible}, so Neuron Runtime "
                f"captures no device profile; each step still synchronises the process's own NeuronCores. {local}"
            )
            add_note(ctx, message)
            warn_user(message)
        elif missing:
            # AWS's own multi-rank example passes "0,1" on every rank, so an absent core is
            # not an error for the runtime: it is simply not captured. Say so.
            add_note(
                ctx,
                f"core={ctx.core!r} names NeuronCore(s) {', '.join(missing)} but {visible}; those are not "
                f"captured. {local}",
            )

    def experimental_config(self, ctx: SessionContext) -> Any:
        self._check_cores(ctx)
        build = self.build()
        ctx.extras["build"] = build
        # Only folders written from now on belong to this session.
        ctx.extras["dirs_before"] = frozenset(_neuron_files.pid_dirs(self.profile_dir(ctx)))
        # Neuron Runtime also reads the variable itself, so it counts on every build. (TorchNeuron's
        # default NEFF cache folder is not documented; only the variable is.)
        ctx.extras["neff_cache_dir"] = os.environ.get(NEFF_CACHE_ENV) or None
        config = self._legacy_config(ctx) if build == "legacy" else self._neuron_config(ctx, build)
        ctx.extras["neuron_config"] = config
        pairing = self.torch_pairing_problem()
        if pairing:
            add_note(ctx, pairing)
        if "device" in ctx.modes and not ctx.extras.get("correlated"):
            what = "has no NeuronConfig" if build == "legacy" else f"has a NeuronConfig without {_CORRELATE}"
            if build == "beta":
                what = f"(the public beta, torch-neuronx {self.version()}) {what}"
            add_note(
                ctx,
                f"this TorchNeuron build {what}, so NeuronCore time stays in Neuron's own profile and the NEURON "
                f"column is empty by design (only a build whose NeuronConfig accepts {_CORRELATE}=True fills it). "
                "See the device time with s.export(format='neuron') in Neuron Explorer",
            )
        if "device" in ctx.modes and ctx.extras.get("neff_cache_dir") is None:
            add_note(
                ctx,
                f"{NEFF_CACHE_ENV} is not set, so the Neuron profile may hold no .neff files and Neuron "
                f"Explorer cannot decode its device traces; set {NEFF_CACHE_ENV}=<folder> before starting Python",
            )
        return config

    def _neuron_config(self, ctx: SessionContext, build: NeuronBuild) -> Any:
        from torch_neuronx import profiling

        NeuronConfig = profiling.NeuronConfig  # noqa: N806 - TorchNeuron's class name
        mode_enum = getattr(profiling, "ProfileMode", None)
        modes = []
        for m in ctx.modes:
            value = getattr(mode_enum, _MODE_NAMES[m], None) if m in _MODE_NAMES else None
            if value is None:
                add_note(ctx, f"mode {m!r} has no ProfileMode in this TorchNeuron build; ignored")
            else:
                modes.append(value)
        kwargs: dict[str, Any] = {"modes": modes, "profile_output_dir": str(self.profile_dir(ctx))}
        # capture_enabled_for_nc takes indices and ranges only: "all" is rejected by the
        # runtime, and leaving the key out already captures every core of the process.
        if ctx.core is not None and ctx.core != "all":
            kwargs["capture_enabled_for_nc"] = ctx.core
        neff_cache = ctx.extras.get("neff_cache_dir")
        if neff_cache is not None and "neff_cache_dir" in parameter_names(NeuronConfig):
            kwargs["neff_cache_dir"] = neff_cache
        if ctx.max_events_per_nc is not None:
            kwargs["max_events_per_nc"] = ctx.max_events_per_nc
        if build == "correlating":
            kwargs[_CORRELATE] = True
        config = NeuronConfig(**kwargs)
        ctx.extras["correlated"] = build == "correlating"
        return config

    def _legacy_config(self, ctx: SessionContext) -> Any:
        from torch._C._profiler import _ExperimentalConfig

        parts = [f"profile_output_dir:{self.profile_dir(ctx)}"]
        if ctx.max_events_per_nc is not None:
            parts.append(f"max_events_per_nc:{ctx.max_events_per_nc}")
        if ctx.core is not None and ctx.core != "all":
            parts.append(f"capture_enabled_for_nc:{ctx.core}")
        if "host_memory" in ctx.modes:
            parts.append("host_memory:true")
        others = [m for m in ctx.modes if m != "host_memory"]
        if others:
            add_note(
                ctx,
                "this TorchNeuron build (no NeuronConfig; Neuron 2.30 adds it) takes only profile_output_dir, "
                "max_events_per_nc, capture_enabled_for_nc and host_memory through torch.profiler, so "
                f"modes {', '.join(map(repr, others))} cannot be chosen: Neuron Runtime captures its defaults",
            )
        ctx.extras["correlated"] = False
        return _ExperimentalConfig(custom_profiler_config=";".join(parts))

    def synchronize(self, ctx: SessionContext) -> None:
        import torch

        module = torch.neuron  # type: ignore[attr-defined]
        count = self._visible_cores()
        if count is None:
            module.synchronize()
            return
        # synchronize() with no argument waits for the current device only. A selector
        # naming none of this process's cores still leaves its own work to wait for.
        indices = list(dict.fromkeys(core_indices(ctx.core, count) or range(count)))
        for index in indices:
            module.synchronize(index)
        self._read_memory(ctx, indices)

    def _read_memory(self, ctx: SessionContext, indices: list[int]) -> None:
        # TorchNeuron's allocator is asynchronous: its statistics are right only after a sync
        # (Neuron 2.33 memory guide), which is why they are read here and nowhere else.
        import torch_neuronx

        allocated = getattr(torch_neuronx, _MEMORY_STAT, None)
        if not callable(allocated):
            return
        try:
            total = sum(int(allocated(i)) for i in indices)
        except Exception:  # a statistic this build does not back: stay silent, as without it
            return
        ctx.extras.setdefault("memory_bytes", []).append(total)

    def _memory_note(self, ctx: SessionContext, cycle: int) -> None:
        readings: list[int] = ctx.extras.pop("memory_bytes", [])
        if readings:
            mib = ", ".join(f"{b / 2**20:.1f}" for b in readings)
            add_note(
                ctx,
                f"device memory in profiling cycle {cycle}, read after each step's sync (torch_neuronx."
                f"{_MEMORY_STAT}, summed over the synchronised NeuronCores; wait and warmup steps included): "
                f"{mib} MiB; peak {max(readings) / 2**20:.1f} MiB",
            )

    def on_trace_ready(self, prof: torch.profiler.profile, ctx: SessionContext) -> Optional[Path]:
        folder = _neuron_files.claim_cycle_dir(ctx, self.runtime_session_dirs(ctx))
        cycle = ctx.extras.get("cycles_seen", 0)
        ctx.extras["cycles_seen"] = cycle + 1
        self._memory_note(ctx, cycle)
        if ctx.extras.get("build") == "legacy":
            return None  # the legacy NeuronProfiler is a context manager of its own: nothing to run here
        from torch_neuronx.profiling import NeuronProfiler

        config = ctx.extras.get("neuron_config")
        if config is None:
            return None
        before = set(_neuron_files.framework_traces(folder, FRAMEWORK_TRACE_PATTERNS))
        try:
            NeuronProfiler(config).export_trace(prof)
        except Exception as exc:  # Neuron's files are a bonus; the torch data is kept regardless.
            warn_user(
                f"NeuronProfiler.export_trace failed ({type(exc).__name__}: {exc}); the torch.profiler "
                "data is kept and s.table()/s.export() still work"
            )
            return None
        new = [p for p in _neuron_files.framework_traces(folder, FRAMEWORK_TRACE_PATTERNS) if p not in before]
        return max(new, key=lambda p: p.stat().st_mtime) if new else None

    def cycle_notes(self, events: EventTable, ctx: SessionContext, cycle: int) -> list[str]:
        # Neuron Runtime stops capturing a NeuronCore's events at max_events_per_nc and says
        # nothing; only where NeuronCore executions reach torch (correlated) can they be counted.
        # The runtime's cap counts its own per-core events, likely several per execution: the
        # executions are a lower bound of that count, so a cut is certain when they reach the
        # cap, and a cut below it goes unseen. Unverified on hardware.
        if not ctx.extras.get("correlated"):
            return []
        cap = ctx.max_events_per_nc or DEFAULT_MAX_EVENTS_PER_NC
        full = sorted(i for i, n in device_event_counts(events).items() if n >= cap)
        if not full:
            return []
        return [
            f"the capture was cut: NeuronCore {', '.join(map(str, full))} reached max_events_per_nc={cap} in "
            f"profiling cycle {cycle} (its executions that reached torch.profiler alone number {cap} or more; "
            "Neuron Runtime counts its own events, at least as many), and Neuron Runtime keeps no event past "
            "it, so the NEURON time of what ran later is missing. Shorten the window (fewer active steps) or "
            "raise the cap "
            f"(neuronprof.session(..., max_events_per_nc={cap * 4}))"
        ]

    # -- after the block: Neuron's own files ------------------------------------
    def session_notes(self, ctx: SessionContext) -> list[str]:
        # max_events_per_nc is this backend's own option: no note that it is ignored.
        return list(ctx.extras.get("notes", ()))

    def _profile_root(self, ctx: SessionContext) -> Optional[Path]:
        root = self.profile_dir(ctx)
        return root if root.is_dir() and self.runtime_session_dirs(ctx) else None

    def complete_table(self, table: Table, ctx: SessionContext, *, heuristic: bool = False) -> Table:
        # No NeuronCore time from torch: take it from Neuron's own profile (see analysis.neuron).
        return _neuron_files.reader(ctx, self._profile_root(ctx)).table(table, heuristic=heuristic)

    def device_profile(self, ctx: SessionContext, *, tool: ToolChoice = "auto") -> NeuronProfile:
        return _neuron_files.read_profile(ctx, self._profile_root(ctx), tool)

    export_formats = ("neuron",)

    def device_files(self, ctx: SessionContext) -> DeviceFiles:
        root = self._profile_root(ctx)
        if root is None:
            raise SessionStateError("TorchNeuron wrote no profile files in this session (see s.notes)")
        return DeviceFiles(root, tuple(ctx.extras.get("cycle_dirs", ())))

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        if facts["available"]:
            facts["build"] = self.build()
        return facts
