"""Inputs that can be read only once (``-``, ``/dev/stdin``, a FIFO, ``<(...)``) copied to a private file first.

A trace may be read twice: the fast reader falls back to the stdlib one, which
starts again from the first byte, on a file it cannot read. A pipe gives its
bytes once, so its bytes are
streamed (1 MiB at a time, never held whole) into a file in a private temporary
folder (``_io.private_dir``), which is read instead and removed when the command
ends, also when it is ended by SIGTERM or SIGHUP.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

__all__ = ["is_pipe", "spooled_inputs"]

_BLOCK = 1 << 20


def is_pipe(name: str) -> bool:
    """Whether ``name`` is ``-`` or names something that is neither a file nor a folder (a pipe, a FIFO, a tty)."""
    if name == "-":
        return True
    try:
        mode = os.stat(name).st_mode
    except OSError:
        return False  # missing: the reader says so
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextmanager
def spooled_inputs(args: argparse.Namespace, names: Sequence[str]) -> Iterator[dict[str, str]]:
    """Replace each pipe among ``args``'s attributes ``names`` by a private copy of its bytes.

    Yields:
        Each copy's path and the name the user gave (to name it so in messages).

    Raises:
        ValueError: ``-`` is given for two inputs (standard input can be read once).
    """
    pipes = [n for n in names if isinstance(getattr(args, n, None), str) and is_pipe(getattr(args, n))]
    if not pipes:
        yield {}
        return
    if sum(getattr(args, n) == "-" for n in pipes) > 1:
        raise ValueError("'-' (standard input) can be given for one input only")
    # Imported here: a command given files (most runs) never needs the temporary-file machinery.
    from neuronprof._io import cleaned_up_on_termination, private_dir, remove_private_dir

    folder = private_dir("input")
    shown: dict[str, str] = {}
    try:
        with cleaned_up_on_termination():
            for n in pipes:
                given = getattr(args, n)
                # One folder per input, so that the copy keeps the name notes give it (``stdin``, ``63``...).
                os.mkdir(folder / n)
                copy = str(folder / n / ("stdin" if given == "-" else os.path.basename(given) or "input"))
                _copy(given, copy)
                shown[copy] = "<stdin>" if given == "-" else given
                setattr(args, n, copy)
            args.piped = {n: shown[getattr(args, n)] for n in pipes}  # each piped input as the user named it
            yield shown
    finally:
        remove_private_dir(folder)


def _copy(given: str, copy: str) -> None:
    with open(copy, "xb") as out:
        if given == "-":
            shutil.copyfileobj(sys.stdin.buffer, out, _BLOCK)
            return
        with open(given, "rb") as src:
            shutil.copyfileobj(src, out, _BLOCK)
