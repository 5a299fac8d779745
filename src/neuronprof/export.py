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
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Callable, Literal, Optional, get_args

__all__ = [
    "ExportFormat",
    "EXPORT_FORMATS",
    "atomic_write",
    "copy_trace",
    "default_trace_name",
    "ensure_writable_dir",
    "neuron_bundle",
    "unique_path",
]

ExportFormat = Literal["chrome", "tensorboard", "neuron", "stacks"]
"""Where ``session.export()`` writes.

* ``"chrome"``: one Chrome/Perfetto JSON trace (``.json``, or ``.json.gz`` gzipped);
  open it in https://ui.perfetto.dev or ``chrome://tracing``.
* ``"tensorboard"``: a folder with a ``*.pt.trace.json`` file, as
  ``torch.profiler.tensorboard_trace_handler`` writes; point TensorBoard's
  ``--logdir`` at it.
* ``"neuron"``: a folder ready for Neuron Explorer (Neuron backend only).
* ``"stacks"``: collapsed stacks (``frame;frame;op value`` per line, the value in
  µs of self time) that flame-graph tools (``flamegraph.pl``, speedscope) read;
  needs ``with_stack=True``.
"""

EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)

_NEURON_README = """\
Neuron Explorer bundle written by neuronprof
============================================

system/   The whole TorchNeuron profile output folder. For a *system profile*
          upload this folder as it is.
device/   One folder per compiled graph, each holding a .neff with its .ntff.
          For a *device profile* upload each .neff together with its .ntff.

Device profile pairs:
{pairs}
"""


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


def _neff_pairs(root: Path) -> Iterator[tuple[Path, Optional[Path]]]:
    for neff in sorted(root.rglob("*.neff")):
        ntff = sorted(neff.parent.glob(f"{neff.stem}*.ntff")) or sorted(neff.parent.glob("*.ntff"))
        yield neff, (ntff[0] if ntff else None)


def neuron_bundle(source: Path, target: Path) -> Path:
    """Build a Neuron Explorer bundle from TorchNeuron's profile output folder.

    The bundle has ``system/`` (the whole output folder, for a system profile),
    ``device/<graph>/`` with each ``.neff`` beside its ``.ntff`` (for a device
    profile) and a ``README.txt`` saying what to upload. It is assembled in a
    temporary folder and renamed into place.

    Raises:
        FileExistsError: ``target`` exists.
        OSError: A copy failed; nothing is left behind.
    """
    if target.exists():
        raise FileExistsError(errno.EEXIST, "export target exists; pass overwrite=True to replace it", str(target))
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        shutil.copytree(source, tmp / "system")
        lines = []
        for neff, ntff in _neff_pairs(source):
            folder = tmp / "device" / neff.stem
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(neff, folder / neff.name)
            if ntff is not None:
                shutil.copy2(ntff, folder / ntff.name)
                lines.append(f"  device/{neff.stem}/{neff.name} + {ntff.name}")
            else:
                lines.append(
                    f"  device/{neff.stem}/{neff.name} (no .ntff found: capture with modes including 'device')"
                )
        (tmp / "README.txt").write_text(_NEURON_README.format(pairs="\n".join(lines) or "  (none recorded)"))
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
