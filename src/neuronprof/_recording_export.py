"""Writing what a session recorded: Chrome traces, TensorBoard files and collapsed stacks.

Pure functions of a ``Recording`` (a fresh file
per call); the Neuron bundle, which needs the backend's folders, stays with the
[`Session`][neuronprof.Session].
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from neuronprof import _cycle_files, _kineto
from neuronprof import _vocabulary as vocab
from neuronprof._config import PathLike
from neuronprof._io import atomic_write, ensure_writable_dir
from neuronprof._recording import Recording, require_recorded, target_path
from neuronprof.errors import warn_user
from neuronprof.export import ExportFormat, tensorboard_file_name

__all__ = ["FORMATS", "choose_cycle", "default_cycle", "export", "trace_writer"]

logger = logging.getLogger("neuronprof")


def export(
    rec: Recording, path: Optional[PathLike], *, format: ExportFormat, overwrite: bool, cycle: Optional[int]
) -> Path:
    """Write one cycle in a format of ``FORMATS`` (chrome, tensorboard, stacks); see ``Session.export``."""
    require_recorded(rec, "there is no trace to export")
    chosen = default_cycle(rec) if cycle is None else choose_cycle(rec, cycle)
    logger.info("exporting cycle %d of %d (%s)", chosen.index, rec.cycle_count, format)
    return FORMATS[format](rec, chosen, path, overwrite)


def _write_chrome(rec: Recording, chosen: _kineto.Cycle, path: Optional[PathLike], overwrite: bool) -> Path:
    return atomic_write(target_path(rec, path, suffix=".json"), trace_writer(rec, chosen), overwrite=overwrite)


def _write_tensorboard(rec: Recording, chosen: _kineto.Cycle, path: Optional[PathLike], overwrite: bool) -> Path:
    folder = Path(path) if path is not None else rec.output_dir / "tensorboard"
    ensure_writable_dir(folder, create=True)
    # One worker per process, one span per file, as tensorboard_trace_handler names them:
    # the span number varies, the worker part never does.
    span = time.time_ns()
    while (folder / tensorboard_file_name(span, rank=rec.rank)).exists():
        span += 1
    atomic_write(folder / tensorboard_file_name(span, rank=rec.rank), trace_writer(rec, chosen), overwrite=overwrite)
    return folder


def _write_stacks(rec: Recording, chosen: _kineto.Cycle, path: Optional[PathLike], overwrite: bool) -> Path:
    return atomic_write(target_path(rec, path, suffix=".stacks.txt"), _stacks_writer(rec, chosen), overwrite=overwrite)


FormatWriter = Callable[[Recording, _kineto.Cycle, Optional[PathLike], bool], Path]
"""Writes one cycle of a recording to a path (``None``: a default name in ``output_dir``), returns what it wrote."""

FORMATS: dict[str, FormatWriter] = {"chrome": _write_chrome, "tensorboard": _write_tensorboard, "stacks": _write_stacks}
"""The export formats made from the recording, by name: ``Session.export`` hands every other name of
``ExportFormat`` to the backend (``export.DEVICE_EXPORTS``). A new format is a writer added here."""


def default_cycle(rec: Recording) -> _kineto.Cycle:
    """The last cycle that recorded something: not one the exit cut short before its active steps ran."""
    last = rec.cycles[-1]
    if not last.closed_at_exit or len(rec.cycles) == 1:
        return last
    from neuronprof.analysis.trace import sum_events

    rec.trace  # noqa: B018 - the record, read once: every kept cycle's events converted (and kept)
    if last.events is None or sum_events(last.events).steps:
        return last
    previous = rec.cycles[-2]
    warn_user(
        f"exported cycle {previous.index} of cycles 0 to {last.index}: the last cycle ({last.index}) was cut "
        f"short by the block's end before any of its active steps ran, so it recorded nothing "
        f"(pass cycle={last.index} to export it anyway)"
    )
    return previous


def choose_cycle(rec: Recording, cycle: int) -> _kineto.Cycle:
    """The kept cycle ``cycle`` (negative counts from the end), or ``ValueError`` saying why not."""
    if isinstance(cycle, bool) or not isinstance(cycle, int):
        raise ValueError(f"cycle must be an int (0 for the first, -1 for the last), got {cycle!r}")
    index = cycle + rec.cycle_count if cycle < 0 else cycle
    if not 0 <= index < rec.cycle_count:
        raise ValueError(f"cycle {cycle!r} does not exist; this session recorded {rec.cycle_count}")
    for kept in rec.cycles:
        if kept.index == index:
            return kept
    first = rec.cycles[0].index
    keep = rec.config.keep_cycles
    raise ValueError(
        f"cycle {cycle!r}'s events were dropped: keep_cycles={keep} keeps the last "
        f"{keep} of the {rec.cycle_count} cycles (cycles {first} to {rec.cycle_count - 1}); "
        "table() still counts every cycle. Raise keep_cycles to export older ones"
    )


def _stacks_writer(rec: Recording, chosen: _kineto.Cycle) -> Callable[[Path], None]:
    if not rec.config.with_stack:
        raise ValueError(
            "format='stacks' needs Python stacks, which this session did not record: pass with_stack=True to "
            "session(); if you did, the session turned them off, and s.notes says why"
        )
    metric = "self_device_time_total" if rec.device_label is not None else "self_cpu_time_total"
    return functools.partial(_cycle_files.write_stacks, chosen, metric=metric)


def trace_writer(rec: Recording, chosen: _kineto.Cycle) -> Callable[[Path], None]:
    """A writer of ``chosen``'s Chrome trace, with neuronprof's metadata (how the cycle ended included)."""
    metadata: dict[str, Any] = copy.deepcopy(rec.metadata)
    metadata["neuronprof"][vocab.STOPPED_IN_LAST_STEP] = chosen.closed_at_exit
    return functools.partial(_cycle_files.write_chrome_trace, chosen, metadata=metadata)
