"""Re-record the traces in ``tests/recorded/`` (the tests read them; they never run this).

``training_step.pt.trace.json.gz``: two steps of ``examples/training_step.py``'s ``train()``
on the CPU, exported with ``s.export()``. Its data set sleeps 5 ms per sample, so loading a
batch of 32 takes at least 160 ms, many times the model's few milliseconds of work: the data
phase leads the step. ``tests/test_training_step.py`` checks that in the file before it checks
the findings the example prints, so a recording disturbed enough to break it is caught
there, not taken for the example's story. Run from the repository root::

    python tests/recorded/record.py
"""

from __future__ import annotations

import gzip
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAINING_STEP = HERE / "training_step.pt.trace.json.gz"
ACTIVE = 2
"""Recorded steps, as the copied-script tests run it (``--active 2``)."""


def record_training_step(path: Path = TRAINING_STEP) -> Path:
    """Record the example's training loop and export its trace to ``path`` (gzipped, byte-stable header)."""
    sys.path.insert(0, str(HERE.parents[1] / "examples"))
    try:
        import training_step
    finally:
        sys.path.pop(0)
    here = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="neuronprof-recorded-") as scratch:
        # The session writes its own files into the working folder: keep them out of the repository.
        os.chdir(scratch)
        try:
            s = training_step.train(active=ACTIVE)
            s.export(path, overwrite=True)
        finally:
            os.chdir(here)
    _strip_machine(path)
    return path


def _strip_machine(path: Path) -> None:
    """Name the trace after its own file (kineto names the temporary file it first wrote) and drop gzip's mtime."""
    with gzip.open(path, "rb") as f:
        text = f.read()
    text = re.sub(rb'"traceName": "[^"]*"', f'"traceName": "{path.name}"'.encode(), text, count=1)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as f:
        f.write(text)


if __name__ == "__main__":
    print(record_training_step())
