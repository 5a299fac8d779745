"""Trace writers: atomic file writes, default names, TensorBoard and Neuron bundles.

All writes go through [`atomic_write`][neuronprof.export.atomic_write]: a
temporary file beside the target, then a rename, so a reader never sees half a
trace and a failure leaves nothing behind. This module never imports torch; the
caller hands it a function that produces the bytes.
"""

from __future__ import annotations

import errno
import gzip
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Callable, Optional

from neuronprof.typing import EXPORT_FORMATS, ExportFormat

__all__ = [
    "ExportFormat",
    "EXPORT_FORMATS",
    "atomic_write",
    "copy_trace",
    "default_trace_name",
    "ensure_writable_dir",
    "neuron_bundle",
    "neuron_device_pairs",
    "unique_path",
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


def unique_path(path: Path) -> Path:
    """Return ``path``, or ``path`` with ``-1``, ``-2``... before its suffixes if it exists."""
    if not path.exists():
        return path
    name = path.name
    stem, dot, rest = name.partition(".")
    for n in range(1, 10_000):
        candidate = path.with_name(f"{stem}-{n}{dot}{rest}")
        if not candidate.exists():
            return candidate
    raise FileExistsError(errno.EEXIST, "no free file name", str(path))  # pragma: no cover


def ensure_writable_dir(path: Path, *, create: bool) -> Path:
    """Check that ``path`` is (or can become) a writable folder.

    Args:
        path: The folder.
        create: Create it (and its parents) now; otherwise only check that its
            nearest existing ancestor is a writable folder.

    Returns:
        The absolute path.

    Raises:
        NotADirectoryError: ``path`` or an ancestor is a file.
        PermissionError: The folder cannot be written.
    """
    path = Path(path).expanduser().absolute()
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "output_dir is not a folder (a file is in the way)", str(existing))
    if create:
        path.mkdir(parents=True, exist_ok=True)
        existing = path
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "output_dir is not writable", str(existing))
    # os.access trusts permission bits (and root passes them all); a read-only
    # mount only shows in the file system's flags.
    statvfs = getattr(os, "statvfs", None)
    if statvfs is not None and existing.exists() and statvfs(existing).f_flag & getattr(os, "ST_RDONLY", 1):
        raise PermissionError(errno.EROFS, "output_dir is on a read-only file system", str(existing))
    return path


def _temp_name(target: Path) -> Path:
    # Keep the final suffix so writers that decide on gzip by name (torch does) still do.
    suffix = target.suffix if target.suffix == ".gz" else ""
    return target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp{suffix}")


def atomic_write(target: Path, write: Callable[[Path], None], *, overwrite: bool = False) -> Path:
    """Write a file through a temporary file beside it, then rename it into place.

    Args:
        target: The final path.
        write: Writes the content to the path it is given.
        overwrite: Replace an existing ``target``; otherwise it is an error.

    Returns:
        ``target``.

    Raises:
        FileExistsError: ``target`` exists and ``overwrite`` is False.
        OSError: The write failed (``ENOSPC``, ``EFBIG``, ``EACCES``...), raised as
            itself; the temporary file is removed first.
    """
    target = Path(target)
    if not overwrite and target.exists():
        raise FileExistsError(errno.EEXIST, "export target exists; pass overwrite=True to replace it", str(target))
    tmp = _temp_name(target)
    try:
        write(tmp)
        if not tmp.exists():
            raise FileNotFoundError(errno.ENOENT, "the trace writer produced no file", str(tmp))
        if overwrite:
            os.replace(tmp, target)
        else:
            _link_no_clobber(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _link_no_clobber(tmp: Path, target: Path) -> None:
    # link() fails atomically when the target exists, closing the race a
    # check-then-rename would leave open.
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise FileExistsError(
            errno.EEXIST, "export target exists; pass overwrite=True to replace it", str(target)
        ) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EMLINK, errno.EOPNOTSUPP):
            raise
        if target.exists():
            raise FileExistsError(errno.EEXIST, "export target exists; pass overwrite=True", str(target)) from None
        os.replace(tmp, target)
        return
    tmp.unlink()


def copy_trace(source: Path, dest: Path) -> None:
    """Copy a JSON trace, gzipping or gunzipping to match ``dest``'s suffix.

    A plain copy is the kernel's (``shutil.copyfile`` uses ``sendfile``), so an
    export costs a fraction of kineto's save. Leading blanks (kineto writes one)
    are dropped from gzipped output, whose readers sniff for the opening brace.
    """
    src_gz = source.suffix == ".gz"
    dst_gz = dest.suffix == ".gz"
    if src_gz == dst_gz:
        shutil.copyfile(source, dest)
        return
    with gzip.open(source, "rb") if src_gz else open(source, "rb") as fin:
        head = fin.read(1 << 20).lstrip() if dst_gz else fin.read(1 << 20)
        # Level 6: gzip's default trade of size for time.
        with gzip.open(dest, "wb", compresslevel=6) if dst_gz else open(dest, "wb") as fout:
            fout.write(head)
            shutil.copyfileobj(fin, fout, 1 << 20)


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

    if target.exists():
        raise FileExistsError(errno.EEXIST, "export target exists; pass overwrite=True to replace it", str(target))
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    problems: list[str] = []
    try:
        if sessions is None:
            shutil.copytree(source, tmp / "system")
            found = {p.parent for p in (tmp / "system").rglob("*") if p.is_file()}
            ordered: list[tuple[int, Path]] = [
                (i, d) for i, d in enumerate(sorted(found, key=lambda d: (d.stat().st_mtime, str(d))))
            ]
        else:
            # Only the given folders: earlier sessions in the same output folder stay out,
            # and each cycle's framework trace goes to that cycle's own folder.
            ordered = []
            for cycle, folder in enumerate(sessions):
                if folder is None:
                    continue
                dest = tmp / "system" / Path(folder).relative_to(source)
                shutil.copytree(folder, dest)
                ordered.append((cycle, dest))
        files: list[str] = []
        system: list[str] = []
        device: list[str] = []
        for index, folder in ordered:
            rel = folder.relative_to(tmp)
            has_trace = any(folder.glob("*trace*.json"))
            if not has_trace and framework_trace is not None and framework_trace(index, folder / "trace.json"):
                has_trace = True
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
        (tmp / "README.txt").write_text(
            _NEURON_README.format(
                files="\n".join(files) or "  (none recorded)",
                system="\n".join(system) or "  (no session folder)",
                device="\n".join(device) or "  (none: capture with the 'device' mode and a NEFF cache folder)",
                warnings=notes,
            )
        )
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for problem in problems:
        warn_user(problem, NeuronProfWarning)
    return target
