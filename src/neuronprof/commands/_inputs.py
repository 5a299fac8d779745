"""The input side of the commands that read files: piped inputs, bad input, files left out."""

from __future__ import annotations

import argparse
import contextlib
import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from neuronprof.commands import EXIT_PARTIAL, CommandError

__all__ = ["reads_files"]

_PIPED = ("trace", "other", "a", "b", "baseline", "current")
"""The arguments that may name a pipe (``-``, ``/dev/stdin``, a FIFO): copied to a private file first."""

Run = Callable[[argparse.Namespace], int]
_LeftOut = dict[str, str]
"""Each file of a folder left out as unreadable, and why."""


def reads_files(run: Run) -> Run:
    """Wrap a command's ``run`` that reads trace or profile files.

    A piped input is copied to a private file before ``run`` starts, and named in
    messages as the user named it. A folder's files are read side by side as
    ``--jobs``/``--executor`` say (a Dask scheduler is reached before ``run`` starts).
    An expected failure (unreadable or invalid input, a missing optional package, a
    scheduler out of reach, a path that cannot be written, memory running out) becomes
    a ``CommandError`` of one ``error:`` line, exit status 2. Files of a folder left out
    as unreadable are named on stderr, one per line, and a command that otherwise
    succeeded exits with ``EXIT_PARTIAL`` (3).
    """

    @functools.wraps(run)
    def guarded(args: argparse.Namespace) -> int:
        from neuronprof.analysis._pipes import spooled_inputs
        from neuronprof.analysis.errors import TraceError

        shown: dict[str, str] = {}
        left_out: dict[str, str] = {}
        failed = None
        readers, unreadable = _folder_reading(args)
        try:
            # One pool of workers (or one connection to a cluster) for every file the command reads.
            with readers, spooled_inputs(args, _PIPED) as shown, unreadable as left_out:
                _refuse_missing(args)
                try:
                    status = run(args)
                except CommandError as exc:
                    status, failed = exc.exit_code, exc
        except (TraceError, ValueError, ImportError) as exc:
            raise CommandError(f"error: {_shown(str(exc), shown)}") from exc
        except OSError as exc:  # e.g. the plot path cannot be written
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            raise CommandError(f"error: {_shown(where, shown)}{exc.strerror or exc}") from exc
        except MemoryError:
            raise CommandError("error: out of memory") from None
        lines = [f"left out {_shown(path, shown)}: {why}" for path, why in left_out.items()]
        if failed is not None:
            raise CommandError(*failed.lines, *lines, exit_code=failed.exit_code)
        if lines:
            raise CommandError(*lines, exit_code=EXIT_PARTIAL if status == 0 else status)
        return status

    return guarded


def _folder_reading(args: argparse.Namespace) -> tuple[AbstractContextManager[Any], AbstractContextManager[_LeftOut]]:
    """The pool that reads a folder's traces, and the record of the files it leaves out.

    Only the commands that read trace folders take ``--jobs``; ``neuron`` reads Neuron's
    own files, one at a time, and starts without importing the trace reader.
    """
    if not hasattr(args, "jobs"):
        return contextlib.nullcontext(), contextlib.nullcontext({})
    from neuronprof.analysis.trace import collect_unreadable, reading

    return reading(args.jobs, getattr(args, "executor", None)), collect_unreadable()


def _refuse_missing(args: argparse.Namespace) -> None:
    """Refuse an input that does not exist before any is read (``diff A MISSING`` reads no A)."""
    import os

    from neuronprof.analysis._eventstream import missing_reason
    from neuronprof.analysis.errors import TraceError

    for name in _PIPED:
        given = getattr(args, name, None)
        for path in given if isinstance(given, list) else [given]:
            if isinstance(path, str) and not os.path.exists(path):
                raise TraceError(f"{path}: {missing_reason(path)}")


def _shown(text: str, shown: dict[str, str]) -> str:
    """``text`` with the copy of a piped input named as the user named it (``-``, ``/dev/stdin``...)."""
    for copy, name in shown.items():
        text = text.replace(copy, name)
    return text
