"""The one writer of every file neuronprof writes: traces, tables, reports, plots, bundles.

Everything goes through [`atomic_write`][neuronprof._io.atomic_write] (one file)
or [`atomic_folder`][neuronprof._io.atomic_folder] (a folder): the content is
written beside the target under a hidden temporary name, then renamed into
place, so a reader never sees half a file and a failure leaves nothing behind.
Callers hand over a function that writes the content to the path it is given
(``text_writer``, ``figure_writer``, ``copy_trace`` or torch's own exporter).

This module is plumbing, private to neuronprof: stdlib only, no torch, no model.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Writer = Callable[[Path], None]
"""Writes a file's content to the (temporary) path it is given."""

PLOT_FORMATS: tuple[str, ...] = ("png", "svg")
"""Image formats every ``plot()`` writes, chosen by the path's suffix."""

_EXISTS = "export target exists; pass overwrite=True to replace it"

# -- nothing left behind ---------------------------------------------------------------------
# A termination request (SIGTERM from SLURM, Kubernetes or torchrun; SIGHUP when the terminal
# goes) whose action is the default ends the process at once: no ``finally`` runs, so a file
# half-written under a temporary name, or the session's private copy of its cycles, would stay
# on disk for ever. While neuronprof writes, such a signal first removes what this process has
# in progress or keeps privately, then ends the process as it would have. A handler the program
# installed itself is left alone (it raises or returns, and the usual clean-up runs).
_TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
# Paths to remove if the process is terminated, each with the process that made it: a forked
# child inherits the list (and the session's finalizers) but never removes its parent's paths.
_LEFTOVERS: dict[str, int] = {}
_PRIVATE_PREFIX = "neuronprof-"


def remove_on_termination(path: Path) -> None:
    """Remove ``path`` (a file or a folder) if a termination request ends the process."""
    _LEFTOVERS[os.fspath(path)] = os.getpid()


def keep_on_termination(path: Path) -> None:
    """Undo [`remove_on_termination`][neuronprof._io.remove_on_termination] (the path is finished or gone)."""
    _LEFTOVERS.pop(os.fspath(path), None)


def remove_leftovers() -> None:
    """Remove every path registered with ``remove_on_termination``."""
    me = os.getpid()
    for path, owner in list(_LEFTOVERS.items()):
        if owner != me:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with suppress(OSError):
                os.unlink(path)
        _LEFTOVERS.pop(path, None)


def terminate(signum: int, frame: Any = None) -> None:
    """Remove what this process leaves behind, then let ``signum`` end it with its default action."""
    remove_leftovers()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def default_termination(signum: int) -> bool:
    """True when ``signum`` is a termination request whose action is the default (it ends the process)."""
    return signum in _TERMINATING and signal.getsignal(signum) == signal.SIG_DFL


@contextmanager
def cleaned_up_on_termination() -> Iterator[None]:
    """While the block runs, a default-action SIGTERM or SIGHUP removes leftovers before it ends the process.

    Python runs signal handlers in the main thread, between bytecodes: a request
    that arrives during a long C call (kineto's save) acts once the call returns.
    Elsewhere (another thread), the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    installed = [sig for sig in _TERMINATING if default_termination(sig)]
    for sig in installed:
        signal.signal(sig, terminate)
    try:
        yield
    finally:
        for sig in installed:
            if signal.getsignal(sig) is terminate:
                signal.signal(sig, signal.SIG_DFL)


def _host_tag() -> str:
    # Process ids are only unique on one host and in one pid namespace: a private folder names
    # both, so that a folder is judged stale only by a process that can see its owner.
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{zlib.crc32((socket.gethostname() + namespace).encode()):08x}"


def private_dir(purpose: str, *, parent: Optional[Path] = None) -> Path:
    """Make a private temporary folder, removed if the process is terminated.

    Its name carries the process id, so that a later process can remove it
    (``remove_stale_private_dirs``) when this one died without cleaning up (SIGKILL).

    Args:
        purpose: A word in the folder's name (``"cycles"``, ``"neuron-explorer"``).
        parent: Where to make it; default the system's temporary folder (``$TMPDIR``).
            Elsewhere the folder is hidden (its name starts with a dot).

    Returns:
        The new folder.

    Raises:
        OSError: The folder cannot be made (no room, not writable).
    """
    dot = "" if parent is None else "."
    prefix = f"{dot}{_PRIVATE_PREFIX}{purpose}-{os.getpid()}-{_host_tag()}-"
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=None if parent is None else os.fspath(parent)))
    remove_on_termination(path)
    return path


def remove_private_dir(path: Path) -> None:
    """Remove a folder made by ``private_dir`` (for ``weakref.finalize`` and ``finally`` blocks).

    Only in the process that made it: a child forked from it inherits its finalizers,
    and must not remove what its parent still uses.
    """
    if _LEFTOVERS.get(os.fspath(path), os.getpid()) != os.getpid():
        return
    shutil.rmtree(path, ignore_errors=True)
    keep_on_termination(path)


def remove_stale_private_dirs(parent: Optional[Path] = None) -> list[Path]:
    """Remove private folders left by processes of this host that no longer exist.

    Only folders this user owns, named by ``private_dir`` on this host and pid
    namespace, whose process is gone; anything else is left alone.

    Args:
        parent: The folder to look in; default the system's temporary folder.

    Returns:
        The folders removed.
    """
    removed: list[Path] = []
    tag = _host_tag()
    uid = getattr(os, "getuid", lambda: None)()
    try:
        entries = list(os.scandir(tempfile.gettempdir() if parent is None else parent))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name if parent is None else entry.name[1:]
        if not name.startswith(_PRIVATE_PREFIX):
            continue
        parts = name[len(_PRIVATE_PREFIX) :].rsplit("-", 3)
        if len(parts) != 4 or parts[2] != tag or not parts[1].isdigit():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or (uid is not None and st.st_uid != uid):
            continue
        if _process_exists(int(parts[1])):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _process_exists(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process (EPERM): it exists
    return True


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


def into_folder(path: Union[str, os.PathLike[str]]) -> Optional[Path]:
    """The folder ``path`` names as a place to write into, or None when it names a file.

    A path that ends in a separator (``"traces/"``) or is an existing folder means
    "write into this folder" under the default file name, as ``cp`` and ``mv`` read it.
    """
    text = os.fspath(path)
    separators = (os.sep, os.altsep) if os.altsep else (os.sep,)
    if text.endswith(separators) or Path(text).expanduser().is_dir():
        return Path(text).expanduser()
    return None


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


def _temp_name(target: Path) -> Path:
    # Keep the final suffix so writers that decide on gzip by name (torch does) still do.
    suffix = target.suffix if target.suffix == ".gz" else ""
    return target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp{suffix}")


def atomic_write(target: Path, write: Writer, *, overwrite: bool = False) -> Path:
    """Write a file through a temporary file beside it, then rename it into place.

    Args:
        target: The final path.
        write: Writes the content to the path it is given.
        overwrite: Replace an existing ``target``; otherwise it is an error.

    Returns:
        ``target``.

    Raises:
        FileExistsError: ``target`` exists and ``overwrite`` is False.
        IsADirectoryError: ``target`` is a folder.
        OSError: The write failed (``ENOSPC``, ``EFBIG``, ``EACCES``...), raised as
            itself; the temporary file is removed first.
    """
    target = Path(target)
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, "the target is a folder, not a file: name a file inside it", str(target))
    if not overwrite and target.exists():
        raise FileExistsError(errno.EEXIST, _EXISTS, str(target))
    tmp = _temp_name(target)
    remove_on_termination(tmp)
    try:
        with cleaned_up_on_termination():
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
    finally:
        keep_on_termination(tmp)
    return target


def _link_no_clobber(tmp: Path, target: Path) -> None:
    # link() fails atomically when the target exists, closing the race a
    # check-then-rename would leave open.
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, _EXISTS, str(target)) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EMLINK, errno.EOPNOTSUPP):
            raise
        if target.exists():
            raise FileExistsError(errno.EEXIST, "export target exists; pass overwrite=True", str(target)) from None
        os.replace(tmp, target)
        return
    tmp.unlink()


@contextmanager
def atomic_folder(target: Path) -> Iterator[Path]:
    """Build a folder under a temporary name beside ``target``, then rename it into place.

    Yields:
        The temporary folder to fill (not yet created).

    Raises:
        FileExistsError: ``target`` exists.
        OSError: Filling or renaming failed; the temporary folder is removed.
    """
    target = Path(target)
    if target.exists():
        raise FileExistsError(errno.EEXIST, _EXISTS, str(target))
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    remove_on_termination(tmp)
    try:
        with cleaned_up_on_termination():
            yield tmp
            os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        keep_on_termination(tmp)


def copy_tree(source: Path, dest: Path) -> None:
    """Copy a folder into ``dest`` (inside an [`atomic_folder`][neuronprof._io.atomic_folder])."""
    shutil.copytree(source, dest)


def copy_file(source: Path, dest: Path) -> None:
    """Copy one file as it is: a writer for [`atomic_write`][neuronprof._io.atomic_write]."""
    shutil.copyfile(source, dest)


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


# Linux's FICLONE ioctl (_IOW(0x94, 9, int)): a copy-on-write clone on btrfs, XFS and others.
_FICLONE = 0x40049409


def clone_or_copy(source: Path, dest: Path) -> None:
    """Write ``source``'s bytes into ``dest`` as a new file: a reflink where the file system has them.

    Never a hard link: an export must not share its inode with the cache, or an
    edit of the export would change every later one.
    """
    if source.suffix != dest.suffix or sys.platform != "linux":
        copy_trace(source, dest)
        return
    import fcntl

    with open(source, "rb") as fin, open(dest, "wb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), _FICLONE, fin.fileno())
            return
        except OSError:
            pass  # no reflinks here (ext4, tmpfs, another file system): an in-kernel copy instead
    copy_trace(source, dest)


def text_writer(text: str) -> Writer:
    """A writer that writes ``text`` as UTF-8."""

    def write(dest: Path) -> None:
        dest.write_text(text, encoding="utf-8")

    return write


def figure_format(target: Path) -> str:
    """Return the image format (``"png"`` or ``"svg"``) that ``target``'s suffix names.

    Raises:
        ValueError: The suffix names neither.
    """
    fmt = target.suffix.lower().lstrip(".")
    if fmt not in PLOT_FORMATS:
        raise ValueError(
            f"cannot tell the image format from {target.name!r}: end the path in "
            + " or ".join(f".{f}" for f in PLOT_FORMATS)
        )
    return fmt


def figure_writer(figure: Figure, fmt: str, **savefig: Any) -> Writer:
    """A writer that saves a matplotlib ``Figure`` in ``fmt`` (``"png"`` or ``"svg"``)."""

    def write(dest: Path) -> None:
        figure.savefig(dest, format=fmt, **savefig)

    return write


def write_text(target: Path, text: str, *, overwrite: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``target`` atomically, creating missing parent folders.

    Raises:
        FileExistsError: ``target`` exists and ``overwrite`` is False.
        OSError: The disk refused the write; no partial file is left.
    """
    target = Path(target)
    ensure_writable_dir(target.parent, create=True)
    return atomic_write(target, text_writer(text), overwrite=overwrite)


def write_figure(
    target: Path, draw: Callable[[], Figure], *, overwrite: bool = True, parents: bool = True, **savefig: Any
) -> Path:
    """Draw a matplotlib ``Figure`` and save it to ``target`` atomically, in the format its suffix names.

    Args:
        target: The image file.
        draw: Returns the figure; called once the suffix is known to be good.
        overwrite: Replace an existing file.
        parents: Create missing parent folders; otherwise a missing folder is an error.
        **savefig: Passed on to ``Figure.savefig``.

    Raises:
        ValueError: The suffix is neither ``.png`` nor ``.svg``.
        OSError: The disk refused the write (or, without ``parents``, the folder is
            missing); no partial file is left.
    """
    target = Path(target)
    fmt = figure_format(target)
    figure = draw()
    if parents:
        ensure_writable_dir(target.parent, create=True)
    return atomic_write(target, figure_writer(figure, fmt, **savefig), overwrite=overwrite)
