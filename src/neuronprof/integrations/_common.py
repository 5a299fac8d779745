"""What the training-tool integrations share: one session driven step by step, and its outputs per rank."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from neuronprof.backends.base import distributed_rank
from neuronprof.errors import SessionStateError

if TYPE_CHECKING:
    from neuronprof._session import Session

__all__ = ["DriverResults", "StepDriver", "missing_extra", "write_outputs"]

logger = logging.getLogger("neuronprof")

_DEVICE_BACKENDS = ("cpu", "cuda", "neuron", "tpu")


def missing_extra(library: str, extra: str) -> ImportError:
    """The error raised when an integration's training library is not installed."""
    return ImportError(
        f"neuronprof.integrations.{extra} needs {library}: pip install 'neuronprof[{extra}]' (or pip install {library})"
    )


def global_rank() -> int:
    """The process's rank: ``torch.distributed``'s when initialised, else ``$RANK``, else 0."""
    rank = distributed_rank()[0]
    if rank is not None:
        return rank
    value = os.environ.get("RANK", "")
    return int(value) if value.isdigit() else 0


def backend_for(device: Any) -> str:
    """The neuronprof backend for the device a training tool placed the model on (``"auto"`` if unknown)."""
    import torch

    kind = getattr(device, "type", None) or str(device or "")
    if kind in _DEVICE_BACKENDS or (kind and kind == torch._C._get_privateuse1_backend_name()):
        return kind
    return "auto"


def write_outputs(session: Session, folder: Union[str, os.PathLike[str]], rank: int) -> dict[str, Path]:
    """Write a finished session's trace, table and HTML report for one rank, replacing earlier ones.

    Files (``N`` is the rank): ``rank-N.json.gz`` (Chrome/Perfetto trace; read it with
    ``neuronprof summarize``, ``advise`` or ``report``, or open it in Perfetto),
    ``rank-N.table.txt`` (the op table, sorted by device time) and ``rank-N.html``
    (the self-contained report). ``neuronprof summarize FOLDER`` shows every rank's
    table side by side.

    Args:
        session: A session whose with-block has ended.
        folder: The folder to write into (created if missing).
        rank: The rank that names the files (``rank-N``).

    Returns:
        The paths written, keyed ``"trace"``, ``"table"`` and ``"report"``.

    Raises:
        SessionStateError: The session has not ended, or recorded nothing.
        OSError: The folder cannot be written.
    """
    from neuronprof._io import atomic_write, text_writer

    target = Path(folder)
    # export() checks that something was recorded before it creates the folder.
    trace = session.export(target / f"rank-{rank}.json.gz", overwrite=True)
    text = session.table(row_limit=None).to_text() + "\n"
    table = atomic_write(target / f"rank-{rank}.table.txt", text_writer(text), overwrite=True)
    report = session.report(target / f"rank-{rank}.html", overwrite=True)
    return {"trace": trace, "table": table, "report": report}


class DriverResults:
    """What an integration gives once it has profiled: its session and the files it wrote."""

    _driver: StepDriver

    @property
    def outputs(self) -> dict[str, Path]:
        """The files written once the schedule has run, by kind (empty before)."""
        return dict(self._driver.outputs)

    @property
    def session(self) -> Any:
        """The [`Session`][neuronprof.Session] once training has begun (for ``insights()``, ``roofline()``...)."""
        return self._driver.session


class StepDriver:
    """Run one neuronprof session across a training tool's steps, then write its outputs.

    The training tool calls [`begin`][neuronprof.integrations.StepDriver.begin] before
    its first step and [`step`][neuronprof.integrations.StepDriver.step] after each
    one; once the schedule has run, the session ends and the outputs are written, so
    the rest of the training runs unprofiled. [`finish`][neuronprof.integrations.StepDriver.finish]
    ends a session that training left unfinished (fewer steps than the schedule).

    Args:
        options: ``neuronprof.session`` arguments (``wait``, ``warmup``, ``active``,
            ``repeat``, ``modes``, ``core``, ``backend``, ``record_shapes``...),
            checked here.

    Raises:
        ValueError: An option is invalid (what ``neuronprof.session`` raises).
        TypeError: An option ``neuronprof.session`` does not take.
    """

    def __init__(self, **options: Any) -> None:
        import neuronprof

        if "output_dir" in options:
            raise TypeError("pass the folder as the integration's own output_dir, not as a session option")
        if options.get("repeat", 1) == 0:
            raise ValueError("repeat=0 would profile the whole training run; give a number of cycles")
        # Built once now, so that a bad option fails before training starts.
        neuronprof.session(**options)
        self.options = options
        self.session: Optional[Session] = None
        self.outputs: dict[str, Path] = {}
        self._done = False

    @property
    def running(self) -> bool:
        """True between ``begin`` and the end of the schedule."""
        return self.session is not None and not self._done

    def begin(self, folder: Union[str, os.PathLike[str]], *, rank: int, device: Any = None) -> None:
        """Start profiling; outputs go to ``folder``. Does nothing once a session has run.

        Args:
            folder: Where the outputs go.
            rank: This process's rank (names the output files).
            device: The device the training tool placed the model on; picks the backend unless the options name one.
        """
        import neuronprof

        if self.session is not None:
            return
        options = dict(self.options)
        if "backend" not in options and device is not None:
            options["backend"] = backend_for(device)
        self.folder, self.rank = Path(folder), rank
        self.session = neuronprof.session(**options)
        self.session.start()

    def step(self, *, last: bool = False) -> None:
        """End one training step (the device is synchronised); at the schedule's end, write the outputs.

        Args:
            last: The training tool knows this was its last step: end the session at
                once, so that its wind-down is not recorded as one more step.
        """
        if not self.running:
            return
        assert self.session is not None
        self.session.step()
        total = self.session.total_steps
        if last or (total is not None and self.session.steps_taken >= total):
            self.finish()

    def finish(self, exc: Optional[BaseException] = None) -> dict[str, Path]:
        """End the session if it runs, and write its outputs (when anything was recorded).

        Args:
            exc: The exception that ended training, if any; the session ends as its with-block would.

        Returns:
            The files written (see [`write_outputs`][neuronprof.integrations.write_outputs]);
            empty when nothing was recorded (the run was shorter than wait + warmup + active).
        """
        if not self.running:
            return self.outputs
        assert self.session is not None
        self._done = True
        self.session.stop(exc=exc)
        if exc is None and self.session.recorded_steps == 0 and self.session.steps_taken > 0:
            # What torch saved is the step the last step() opened: the training tool's
            # wind-down, not a training step. The session's warning said nothing was recorded.
            logger.warning("neuronprof: no files written: training ended before the first recorded step")
            return self.outputs
        try:
            self.outputs = write_outputs(self.session, self.folder, self.rank)
        except SessionStateError as err:
            logger.warning("neuronprof: nothing written: %s", err)
            return self.outputs
        logger.info("neuronprof: wrote %s", ", ".join(str(p) for p in self.outputs.values()))
        return self.outputs
