"""The small interface every backend implements, and the helpers they share.

A backend answers a few questions for a session: can I run here, which
torch.profiler activities do I need, which experimental config carries my
options, how do I wait for the device, what do I do when a trace is ready, and
what device time should the table expect (and what to tell the user when it
has none). After the block it contributes what only it knows: its notes, the
table rows its own files hold, its own profile and export formats. The session
asks these questions of every backend alike and never names one.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from neuronprof.typing import MODES, Core, DeviceTime, Mode, ToolChoice

if TYPE_CHECKING:
    import torch.profiler

    from neuronprof.analysis.trace import EventTable
    from neuronprof.model import Table

__all__ = [
    "MODES",
    "Backend",
    "DeviceFiles",
    "DeviceTime",
    "Mode",
    "SessionContext",
    "add_note",
    "device_event_counts",
    "core_indices",
    "cores_not_visible",
    "distributed_rank",
    "parameter_names",
    "parse_core",
    "privateuse1_name",
    "release_line",
    "torch_version",
    "PRIVATEUSE1_MIN_TORCH",
]

PRIVATEUSE1_MIN_TORCH = (2, 12)
"""Oldest torch whose profiler receives PrivateUse1 device time through kineto."""

_CORE_RE = re.compile(r"^(all|\d+(-\d+)?(,\d+(-\d+)?)*)$")


def parse_core(core: Core) -> Optional[str]:
    """Check a core selector and return it in canonical string form.

    Accepted: ``"0"``, ``"0,1"``, ``"2-5"``, ``"0,2-3"`` (indices and ranges, the
    grammar of Neuron's ``capture_enabled_for_nc``), ``"all"`` (every core this
    process sees), a non-negative int (``0`` means ``"0"``), or ``None`` (let the
    backend choose). Indices are process-local: under torchrun each process's
    cores start at 0.

    Args:
        core: A [`Core`][neuronprof.typing.Core] selector: None, an int or a string.

    Raises:
        ValueError: The selector does not follow that grammar, or a range runs backwards.
    """
    if core is None:
        return None
    if isinstance(core, bool):
        raise ValueError(f"core must be a string such as '0', '0,1', '2-5' or 'all', not {core!r}")
    if isinstance(core, int):
        if core < 0:
            raise ValueError(f"core must be non-negative, got {core}")
        return str(core)
    if not isinstance(core, str):
        raise ValueError(f"core must be a string such as '0', '0,1', '2-5' or 'all', not {type(core).__name__}")
    # Spaces are allowed around separators only: "0, 1" is "0,1", but "0 1" is refused
    # rather than read as core 1.
    text = re.sub(r"\s*([,-])\s*", r"\1", core.strip().lower())
    if not _CORE_RE.match(text):
        raise ValueError(f"invalid core {core!r}: use '0', a list '0,1', a range '2-5', or 'all'")
    for part in text.split(","):
        if "-" in part:
            lo, hi = (int(p) for p in part.split("-"))
            if lo > hi:
                raise ValueError(f"invalid core {core!r}: range {part!r} runs backwards; write '{hi}-{lo}'")
    return text


def _core_ranges(core: str) -> list[tuple[int, int]]:
    out = []
    for part in core.split(","):
        lo, _, hi = part.partition("-")
        out.append((int(lo), int(hi or lo)))
    return out


def core_indices(core: Optional[str], count: int) -> list[int]:
    """Expand a canonical core selector into the indices of the ``count`` devices this process sees.

    ``None`` and ``"all"`` mean every one of them; explicit indices and ranges keep
    their order, and indices of devices the process does not see (``>= count``) are
    left out (see ``cores_not_visible``).
    A range is never expanded beyond ``count``, so ``"0-99999999"`` costs nothing.
    """
    if core is None or core == "all":
        return list(range(count))
    out: list[int] = []
    for lo, hi in _core_ranges(core):
        out.extend(range(lo, min(hi, count - 1) + 1))
    return out


def cores_not_visible(core: Optional[str], count: int) -> list[str]:
    """Return the parts of a core selector naming devices at or above ``count`` (``["2", "4-7"]``)."""
    if core is None or core == "all":
        return []
    out = []
    for lo, hi in _core_ranges(core):
        if hi >= count:
            first = max(lo, count)
            out.append(str(first) if first == hi else f"{first}-{hi}")
    return out


def torch_version() -> tuple[int, int]:
    """Return torch's (major, minor) version."""
    import torch

    return release_line(torch.__version__)


def release_line(version: Optional[str]) -> tuple[int, int]:
    """Return a version string's (major, minor): ``"2.13.3.0"`` → ``(2, 13)``; ``(0, 0)`` if it has none."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def distributed_rank() -> tuple[Optional[int], Optional[int]]:
    """Return (rank, world size) under an initialised torch.distributed, else (None, None)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None, None


def parameter_names(cls: Any) -> set[str]:
    """Return the names of the parameters ``cls`` (or a function) takes; empty where its signature cannot be read.

    A ``**kwargs`` parameter is one more name, not every name: a binding that
    forwards keywords may still reject the one asked about.
    """
    try:
        return set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return set()


def privateuse1_name() -> Optional[str]:
    """Return the name PrivateUse1 was renamed to (``"neuron"``, ``"tpu"``...), or None."""
    import torch

    name = torch._C._get_privateuse1_backend_name()
    # Unrenamed, torch reports "privateuseone" (older releases: "privateuse1").
    return None if name in ("privateuse1", "privateuseone") else str(name)


@dataclasses.dataclass(frozen=True)
class SessionContext:
    """What a backend needs to know about the session it serves.

    Attributes:
        modes: The requested capture modes, validated.
        core: Canonical core selector (``"0"``, ``"0,1"``, ``"2-5"``, ``"all"``), or
            None to let the backend choose.
        output_dir: The session's output folder.
        local_rank: ``LOCAL_RANK`` under torchrun, else None.
        max_events_per_nc: Neuron Runtime's cap on events per NeuronCore the user
            asked for, or None for Neuron's default.
        extras: Per-session scratch space for the backend (e.g. the config object
            it built, needed again when the trace is ready). Notes for the user go
            through [`add_note`][neuronprof.backends.add_note].
    """

    modes: tuple[Mode, ...]
    core: Optional[str]
    output_dir: Path
    local_rank: Optional[int] = None
    max_events_per_nc: Optional[int] = None
    extras: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass(frozen=True)
class DeviceFiles:
    """The files a device's own runtime wrote for a session (Neuron Runtime's profile folders).

    Attributes:
        root: The folder they were written into.
        cycle_dirs: Per profiling cycle, in order, the folder under ``root`` that
            cycle wrote (None for a cycle that wrote none): only these are the
            session's, so another session writing into ``root`` stays out.
    """

    root: Path
    cycle_dirs: tuple[Optional[Path], ...] = ()


def device_event_counts(events: EventTable) -> dict[int, int]:
    """Count the device events of one profiling cycle, per device index.

    Counts the events of the device kinds (kernels, memory copies and sets) in the
    cycle's event table, which holds what kineto delivered (its Chrome trace's
    events); CPU-side events (ops, runtime calls) are not counted.

    Args:
        events: The cycle's event table, as ``cycle_notes`` gets it.
    """
    from neuronprof.analysis.trace._rules import _K_DEVICE

    kind = events.keys.kind
    counts: dict[int, int] = {}
    for (pid, _lane), th in events.threads.items():
        n = sum(1 for k in th.kid if kind[k] == _K_DEVICE)
        if n:
            # A session's device lanes are "device <index>"; a trace file's pid is the index.
            last = str(pid).rpartition(" ")[2]
            index = int(last) if last.isdigit() else -1
            counts[index] = counts.get(index, 0) + n
    return counts


def add_note(ctx: SessionContext, message: str) -> None:
    """Record a remark for the user; the session shows it in ``s.notes`` and the table footer.

    Args:
        ctx: The session's context the backend was handed.
        message: One sentence for the user: what happened and what to do.
    """
    notes: list[str] = ctx.extras.setdefault("notes", [])
    if message not in notes:
        notes.append(message)


class Backend:
    """Base class of neuronprof backends.

    Subclass it to teach neuronprof a new device; register an instance with
    [`register_backend`][neuronprof.backends.register_backend]. Every method has a
    safe default, so a minimal backend only sets ``name`` and ``is_available``.

    Attributes:
        name: Name users pass as ``backend=``.
        device_label: Label of the device columns (``"NEURON"``); None without a device.
        supported_modes: Modes this backend can capture; others become session notes.
        writes_output: True when the backend writes files of its own during a
            session (so the output folder must exist before profiling starts).
        export_formats: Formats of ``s.export(format=...)`` made from this backend's
            own files (``("neuron",)``: the Neuron Explorer bundle), beyond the
            session's own; see ``device_files``.
    """

    name: ClassVar[str] = "base"
    device_label: Optional[str] = None
    supported_modes: frozenset[Mode] = frozenset()
    writes_output: bool = False
    export_formats: tuple[str, ...] = ()

    def is_available(self) -> bool:
        """Return True when this backend can profile in this process."""
        return False

    def unavailable_reason(self) -> str:
        """Explain why the backend is unavailable and how to fix it."""
        return f"backend {self.name!r} is not available"

    def activities(self) -> list[torch.profiler.ProfilerActivity]:
        """Return the torch.profiler activities to record."""
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU]

    def refusal(self) -> Optional[str]:
        """Return why no session may start with this backend in this process now, with the fix, or None.

        Checked when a session is made and again when it starts, before anything is
        profiled (TorchNeuron: a ``NEURON_RT_INSPECT_*`` variable is set).
        """
        return None

    def default_core(self, ctx: SessionContext) -> Optional[str]:
        """Return the core to capture when the user gave none.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """
        return None

    def experimental_config(self, ctx: SessionContext) -> Any:
        """Return the ``experimental_config`` for torch.profiler, or None.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """
        return None

    def synchronize(self, ctx: SessionContext) -> None:
        """Wait until the device has finished the work queued so far.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """

    def on_trace_ready(self, prof: torch.profiler.profile, ctx: SessionContext) -> Optional[Path]:
        """Run backend work at the end of a profiling cycle.

        Args:
            prof: The ``torch.profiler.profile`` whose cycle just ended.
            ctx: The session's request: modes, cores, output folder and local rank.

        Returns:
            The path of a Chrome trace the backend wrote itself, if it did.
        """
        return None

    def cycle_notes(self, events: EventTable, ctx: SessionContext, cycle: int) -> list[str]:
        """Return the remarks that follow from one profiling cycle's events; the default has none.

        Called once per cycle, when its kineto events have been converted into its
        event table (at the first read-out, or when ``keep_cycles`` drops it), so a
        check reads the table instead of kineto's events again (TorchNeuron and
        TorchTPU: whether a capture limit cut the cycle, see ``device_event_counts``).
        The remarks appear in ``s.notes``, under the table and in the report.

        Args:
            events: The cycle's event table.
            ctx: The session's request: modes, cores, output folder and local rank.
            cycle: The cycle's index, from 0.
        """
        return []

    def device_name(self, ctx: SessionContext) -> Optional[str]:
        """Return the model of the device the session runs on, as its runtime names it, or None.

        A roofline without ``device=`` takes its peaks from the preset of this name
        (``"NVIDIA H200"`` is ``"h200"``); None, the default, makes it ask for a preset.
        Called once, as the session starts.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """
        return None

    def device_time(self, ctx: SessionContext) -> DeviceTime:
        """Return what device time this session delivers to torch.profiler.

        See [`DeviceTime`][neuronprof.typing.DeviceTime].

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """
        return "linked" if self.device_label is not None else "none"

    def empty_device_warning(self, ctx: SessionContext) -> Optional[str]:
        """Return the warning for a table whose device column came out empty, or None.

        Called only when device time was requested and no row has any. Backends
        that deliver none (``device_time`` is ``"none"``) explain that in a note
        instead, so the default returns None for them.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """
        if self.device_time(ctx) == "none":
            return None
        label = self.device_label or "device"
        return (
            f"no {label} device time was recorded (every row is zero). Likely causes: the model or its "
            f"inputs are still on the CPU (move them with .to('{self.name}')); or the device was not "
            "synchronised before each step (loop over s.steps() or call s.step()). "
            f"Run `neuronprof doctor --probe --backend {self.name}` to see what this device's profiler "
            "plugin delivers to torch.profiler."
        )

    def session_notes(self, ctx: SessionContext) -> list[str]:
        """Return the remarks for the user about this session so far.

        The default returns the notes recorded with [`add_note`][neuronprof.backends.add_note],
        after one for each backend-specific session option this backend does not read
        (``max_events_per_nc``, read by the neuron backend only, which overrides this).

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
        """
        ignored = []
        if ctx.max_events_per_nc is not None:
            ignored.append(f"max_events_per_nc is a Neuron Runtime setting; the {self.name} backend ignores it")
        return [*ignored, *ctx.extras.get("notes", ())]

    def complete_table(self, table: Table, ctx: SessionContext, *, heuristic: bool = False) -> Table:
        """Return the session's op table with what only this backend's own files say; the default adds nothing.

        Called by ``s.table()`` after the block, before sorting and cutting
        (TorchNeuron: NeuronCore time from Neuron's own profile where torch got none).

        Args:
            table: The table built from torch.profiler's events, every row.
            ctx: The session's request: modes, cores, output folder and local rank.
            heuristic: ``s.table(neuron_heuristic=...)``: whether a guess by name may
                put device time on ops; backends without such a guess ignore it.
        """
        return table

    def device_profile(self, ctx: SessionContext, *, tool: ToolChoice = "auto") -> Any:
        """Return the device's own profile of the session (``s.neuron_profile()``), or None where it has none.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.
            tool: Which converter of the device's files to run: ``"auto"`` (find it),
                ``"never"`` (read converted files only) or its path.

        Raises:
            SessionStateError: The backend has a profile of its own, but this session
                wrote none (the message says why).
        """
        return None

    def device_files(self, ctx: SessionContext) -> Optional[DeviceFiles]:
        """Return the files the device's own runtime wrote for the session, for its ``export_formats``.

        The default, None, means the backend has no files of its own.

        Args:
            ctx: The session's request: modes, cores, output folder and local rank.

        Raises:
            SessionStateError: The backend has files of its own, but this session wrote
                none (the message says why).
        """
        return None

    def describe(self) -> dict[str, Any]:
        """Return facts about this backend for ``neuronprof doctor``."""
        return {"name": self.name, "available": self.is_available(), "device_label": self.device_label}

    def __repr__(self) -> str:
        return f"<neuronprof backend {self.name!r}>"
