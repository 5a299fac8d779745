"""What neuronprof writes: trace names, TensorBoard and Neuron bundles, saved reports and plots.

Every file goes through the one atomic writer (``neuronprof._io``): a temporary
file beside the target, then a rename, so a reader never sees half a trace and
a failure leaves nothing behind. This module never imports torch; the caller
hands it a function that produces the bytes. The ``save_*`` functions are what
the models' ``report()`` and ``plot()`` methods call: a renderer makes the text
or figure, this module writes it.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from neuronprof._io import atomic_folder, copy_tree, text_writer, write_figure, write_text
from neuronprof.typing import EXPORT_FORMATS, ExportFormat

if TYPE_CHECKING:
    from neuronprof.analysis import Roofline
    from neuronprof.analysis.neuron import NeuronProfile
    from neuronprof.model import Comparison

__all__ = [
    "DEVICE_EXPORTS",
    "ExportFormat",
    "EXPORT_FORMATS",
    "default_trace_name",
    "neuron_bundle",
    "neuron_device_pairs",
    "save_comparison_plot",
    "save_comparison_report",
    "save_engines_plot",
    "save_roofline_plot",
    "tensorboard_file_name",
    "tensorboard_worker",
]

_NEURON_README = """\
Neuron Explorer bundle written by neuronprof
============================================

system/ holds this session's folders of TorchNeuron's profile output, as Neuron
Runtime wrote them: one session folder per profiling cycle,
<instance-id>_pid_<pid>/<timestamp>/. Run the commands below from this folder (the
one holding this README.txt): their paths are relative to it.

Files
-----
{files}

System profile (the whole session folder, with any device profiles in it)
-------------------------------------------------------------------------
Upload the session folder in Neuron Explorer, or run:
{system}

Device profile (one .neff with one .ntff)
-----------------------------------------
Each .ntff holds one NeuronCore's device trace for the whole session, covering
every NEFF that ran on it; view it with each NEFF in turn:
{device}
{warnings}"""

_NEFF_FIX = (
    "set TORCH_NEURONX_NEFF_CACHE_DIR=<folder> before starting Python, so that Neuron Runtime copies the "
    "NEFFs into the profile"
)


def _describe_neuron_file(name: str) -> str:
    """Say what one file of a Neuron profile folder is (names from Neuron's profiling guide)."""
    if name.endswith(".neff"):
        return "compiled graph (NEFF) that ran on the NeuronCores; needed to decode the .ntff traces"
    if name.endswith(".ntff"):
        core = re.match(r"profile_nc_(\d+)_session_\d+\.ntff$", name) or re.search(r"_vnc_(\d+)\.ntff$", name)
        return f"device trace of NeuronCore {core.group(1)}" if core else "device trace of a NeuronCore"
    described = {
        "ntrace.pb": "Neuron Runtime system trace (runtime API calls, NeuronCore executions)",
        "trace_info.pb": "metadata of the system trace",
        "cpu_util.pb": "host CPU utilisation",
        "host_mem.pb": "host memory usage",
    }
    if name in described:
        return described[name]
    if name.endswith(".json") and ("trace" in name):
        return "framework trace (torch.profiler's ops, Chrome JSON) linked to the system trace"
    return "file written by TorchNeuron or Neuron Runtime"


_OLD_NTFF = re.compile(r"^(?P<hash>.+)_instid_\d+_vnc_\d+\.ntff$")


def neuron_device_pairs(folder: Path) -> list[tuple[Path, Path]]:
    """Return the (``.neff``, ``.ntff``) pairs to view as device profiles in one session folder.

    Current captures write one ``profile_nc_<n>_session_<k>.ntff`` per NeuronCore for
    the whole session, covering every ``neff_<hash>_vnc_<k>.neff``: each NTFF pairs with
    each NEFF. Older captures name the trace after its NEFF
    (``neff_<hash>.neff`` with ``<hash>_instid_0_vnc_<n>.ntff``): those pair by hash.
    """
    neffs = sorted(folder.glob("*.neff"))
    pairs: list[tuple[Path, Path]] = []
    for ntff in sorted(folder.glob("*.ntff")):
        old = _OLD_NTFF.match(ntff.name)
        if old is not None:
            pairs += [(n, ntff) for n in neffs if n.stem in (f"neff_{old['hash']}", old["hash"])]
        else:
            pairs += [(n, ntff) for n in neffs]
    return pairs


def default_trace_name(backend: str, started: float, *, rank: Optional[int] = None, suffix: str = ".json") -> str:
    """Return the default file name of a trace.

    The name carries the session's start time, the process id and, under
    ``torch.distributed``, the rank: ``neuronprof_cpu_20260101-120000_pid42_rank0.json``.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    rank_part = f"_rank{rank}" if rank is not None else ""
    return f"neuronprof_{backend}_{stamp}_pid{os.getpid()}{rank_part}{suffix}"


def tensorboard_worker(rank: Optional[int] = None) -> str:
    """Return this process's worker name as ``tensorboard_trace_handler`` writes it: ``<host>_<pid>``.

    Under ``torch.distributed`` the rank is added (``<host>_<pid>_rank<N>``).
    """
    return f"{socket.gethostname()}_{os.getpid()}" + (f"_rank{rank}" if rank is not None else "")


def tensorboard_file_name(span: int, *, rank: Optional[int] = None) -> str:
    """Return a file name TensorBoard's profiler plugin reads as one span of this process's worker.

    Mirrors ``torch.profiler.tensorboard_trace_handler``: ``<worker>.<span>.pt.trace.json``,
    where the span is a number (the handler uses ``time.time_ns()``). The plugin's
    worker pattern ``^(.*?)(\\.\\d+)?\\.pt\\.trace\\.json$`` reads the worker back
    intact, also for dotted host names, so every cycle and every export of one
    process is one worker.
    """
    return f"{tensorboard_worker(rank)}.{int(span)}.pt.trace.json"


def neuron_bundle(
    source: Path,
    target: Path,
    *,
    sessions: Optional[Sequence[Optional[Path]]] = None,
    framework_trace: Optional[Callable[[int, Path], bool]] = None,
) -> Path:
    """Build a Neuron Explorer bundle from TorchNeuron's profile output folder.

    The bundle has ``system/`` (the output folder's session folders, as Neuron Runtime
    laid them out: they are what Neuron Explorer takes as a system profile) and a ``README.txt`` that lists every
    file with what it is and gives the ``neuron-explorer view`` commands for the
    system profile (``-d <session folder>``) and each device profile
    (``-n <.neff> -s <.ntff>``). It is assembled in a temporary folder and renamed
    into place.

    Args:
        source: TorchNeuron's ``profile_output_dir``.
        target: The bundle folder to create.
        sessions: The session folders (under ``source``) to bundle, one per profiling
            cycle in cycle order (None for a cycle that wrote none); None bundles every
            folder under ``source``.
        framework_trace: ``write(index, dest) -> bool`` writes the framework trace of
            the ``index``-th profiling cycle to ``dest``; used for session folders
            TorchNeuron left without one (the legacy build). Returns False when there is
            no such cycle.

    Warns:
        NeuronProfWarning: A session folder has device traces (``.ntff``) but no
            ``.neff``: Neuron Explorer cannot decode them. The message says how to fix it.

    Raises:
        FileExistsError: ``target`` exists.
        OSError: A copy failed; nothing is left behind.
    """
    from neuronprof.errors import NeuronProfWarning, warn_user

    problems: list[str] = []
    with atomic_folder(target) as tmp:
        if sessions is None:
            copy_tree(source, tmp / "system")
            found = {p.parent for p in (tmp / "system").rglob("*") if p.is_file()}
            ordered = list(enumerate(sorted(found, key=lambda d: (d.stat().st_mtime, str(d)))))
        else:
            # Only the given folders: earlier sessions in the same output folder stay out,
            # and each cycle's framework trace goes to that cycle's own folder.
            ordered = []
            for cycle, folder in enumerate(sessions):
                if folder is None:
                    continue
                dest = tmp / "system" / Path(folder).relative_to(source)
                copy_tree(folder, dest)
                ordered.append((cycle, dest))
        files: list[str] = []
        system: list[str] = []
        device: list[str] = []
        for index, folder in ordered:
            rel = folder.relative_to(tmp)
            if framework_trace is not None and not any(folder.glob("*trace*.json")):
                framework_trace(index, folder / "trace.json")
            for f in sorted(folder.iterdir()):
                if f.is_file():
                    files.append(f"  {rel / f.name}\n      {_describe_neuron_file(f.name)}")
            system.append(f"  neuron-explorer view -d {rel}")
            pairs = neuron_device_pairs(folder)
            device += [f"  neuron-explorer view -n {rel / n.name} -s {rel / t.name}" for n, t in pairs]
            if any(folder.glob("*.ntff")) and not any(folder.glob("*.neff")):
                problems.append(
                    f"{rel} holds device traces (.ntff) but no .neff, so Neuron Explorer cannot decode them: "
                    + _NEFF_FIX
                )
        notes = "".join(f"\nWARNING: {p}\n" for p in problems)
        readme = _NEURON_README.format(
            files="\n".join(files) or "  (none recorded)",
            system="\n".join(system) or "  (no session folder)",
            device="\n".join(device) or "  (none: capture with the 'device' mode and a NEFF cache folder)",
            warnings=notes,
        )
        # The folder is new and private until it is renamed, so its README needs no temporary file.
        text_writer(readme)(tmp / "README.txt")
    for problem in problems:
        warn_user(problem, NeuronProfWarning)
    return target


DeviceExportWriter = Callable[..., Path]
"""Writes a format from a backend's own files: ``write(root, target, *, sessions, framework_trace) -> target``."""

DEVICE_EXPORTS: dict[str, tuple[str, DeviceExportWriter]] = {"neuron": ("neuron_explorer", neuron_bundle)}
"""The export formats made from a backend's own files (its ``device_files``): the
default folder's name prefix and the writer, per format."""


# -- results saved by the models' report() and plot() ---------------------------------------

PathLike = Union[str, "os.PathLike[str]"]


def save_comparison_report(cmp: Comparison, path: PathLike, *, overwrite: bool = False) -> Path:
    """Write [`Comparison.report`][neuronprof.model.Comparison.report]'s HTML page to ``path``.

    Raises:
        FileExistsError: The file exists and ``overwrite`` is False.
        OSError: The disk refused the write; no partial file is left.
    """
    from neuronprof.report import render_comparison_report

    return write_text(Path(path), render_comparison_report(cmp), overwrite=overwrite)


def save_comparison_plot(cmp: Comparison, path: PathLike) -> Path:
    """Draw [`Comparison.plot`][neuronprof.model.Comparison.plot]'s bar chart into ``path`` (replaced if there).

    Raises:
        ValueError: The suffix is neither ``.png`` nor ``.svg`` (checked before drawing).
        ImportError: matplotlib is not installed.
    """
    from neuronprof.render import render_comparison_figure

    return write_figure(Path(path), lambda: render_comparison_figure(cmp), bbox_inches="tight")


def save_roofline_plot(rl: Roofline, path: PathLike, *, label_top: int = 8) -> Path:
    """Draw [`Roofline.plot`][neuronprof.analysis.Roofline.plot]'s chart into ``path`` (replaced if there).

    Raises:
        ValueError: The suffix is neither ``.png`` nor ``.svg`` (checked before drawing).
        ImportError: matplotlib is not installed.
        FileNotFoundError: The folder does not exist.
    """
    from neuronprof.analysis.render import render_roofline_figure

    # Unlike the other plots, Roofline.plot never created folders: a mistyped one stays an error.
    return write_figure(Path(path), lambda: render_roofline_figure(rl, label_top=label_top), parents=False)


def save_engines_plot(profile: NeuronProfile, path: PathLike, *, normalize: bool = False) -> Path:
    """Draw [`NeuronProfile.plot`][neuronprof.analysis.NeuronProfile.plot]'s bars into ``path`` (replaced if there).

    Raises:
        ValueError: Bad suffix (checked before drawing), or no device profile with engine times.
        ImportError: matplotlib is not installed.
    """
    from neuronprof.analysis.neuron._render import render_engines_figure

    return write_figure(Path(path), lambda: render_engines_figure(profile, normalize=normalize))
