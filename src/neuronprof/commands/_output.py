"""The output side of the commands: stdout that survives a closed pipe, CSV notes on stderr."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

__all__ = ["emit", "notes_to_stderr"]


def emit(text: str) -> None:
    """Write ``text`` to stdout, ending it with one newline."""
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def notes_to_stderr(notes: Iterable[str]) -> None:
    """CSV on stdout holds rows only; its notes go to stderr as the ``# note:`` lines ``to_csv(notes=True)`` writes."""
    from neuronprof.render import csv_notes

    text = csv_notes(notes)
    if text:
        sys.stderr.write(text)
