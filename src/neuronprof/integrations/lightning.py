"""Profile a Lightning ``Trainer`` with neuronprof: ``Trainer(profiler=NeuronProfProfiler())``.

Needs Lightning (``pip install 'neuronprof[lightning]'``; the ``lightning``
package, or the older ``pytorch_lightning``). The step boundary is the end of
Lightning's ``run_training_batch`` (forward, backward and optimizer step of one
batch); the device is synchronised there by the session.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Optional, Union

from neuronprof.integrations._common import DriverResults, StepDriver, global_rank, missing_extra

try:
    from lightning.pytorch.profilers import Profiler
except ImportError:
    try:
        from pytorch_lightning.profilers import Profiler  # type: ignore[assignment]
    except ImportError:
        raise missing_extra("lightning", "lightning") from None

__all__ = ["NeuronProfProfiler"]

logger = logging.getLogger("neuronprof")

STEP_ACTION = "run_training_batch"
"""The Lightning action whose end is one profiled step."""

_CRASH_ACTIONS = (STEP_ACTION, "run_training_epoch")
"""Actions an exception leaving them ends the session through (Lightning calls no profiler hook on exceptions)."""


class NeuronProfProfiler(DriverResults, Profiler):
    """A Lightning ``Profiler`` that records a few training steps with neuronprof.

    ```python
    from neuronprof.integrations.lightning import NeuronProfProfiler

    trainer = L.Trainer(max_steps=20, profiler=NeuronProfProfiler(wait=1, warmup=1, active=3))
    trainer.fit(model, loader)
    # <log_dir>/neuronprof/rank-0.json.gz, rank-0.table.txt, rank-0.html
    ```

    The session starts with the first training batch and ends after
    ``(wait + warmup + active) * repeat`` batches; the rest of the run is not
    profiled. Each rank writes ``rank-N.*`` (N = the global rank) into
    ``<dirpath>/neuronprof``, where ``dirpath`` defaults to the Trainer's
    ``log_dir``. ``summary()`` (printed by Lightning at the end of ``fit``) is the
    op table.

    If training raises (in ``training_step``, the data loader, a callback...),
    the session ends as the exception leaves the training batch or epoch, and
    what was recorded is written; [`close`][neuronprof.integrations.lightning.NeuronProfProfiler.close]
    does the same by hand.

    Args:
        dirpath: Folder for the files (Lightning's meaning); default: the Trainer's ``log_dir``.
        filename: Also write the summary to ``<dirpath>/<stage>-<filename>.txt`` (Lightning's meaning).
        wait: Training batches skipped first.
        warmup: Batches profiled but discarded (compilation, caches).
        active: Batches recorded.
        repeat: Cycles of wait/warmup/active (at least 1).
        **session_options: Any other ``neuronprof.session`` argument (``modes``,
            ``core``, ``backend``, ``record_shapes``...).

    Attributes:
        outputs: The files written: ``{"trace", "table", "report"}`` → path.

    Raises:
        ValueError: A schedule number or session option is invalid (checked here).
    """

    def __init__(
        self,
        dirpath: Optional[Union[str, os.PathLike[str]]] = None,
        filename: Optional[str] = None,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        **session_options: Any,
    ) -> None:
        super().__init__(dirpath=None if dirpath is None else os.fspath(dirpath), filename=filename)
        self._driver = StepDriver(wait=wait, warmup=warmup, active=active, repeat=repeat, **session_options)

    def start(self, action_name: str) -> None:
        if action_name == STEP_ACTION and self._driver.session is None and self._stage in (None, "fit"):
            folder = Path(self.dirpath or os.getcwd()) / "neuronprof"
            self._driver.begin(folder, rank=global_rank())

    def stop(self, action_name: str) -> None:
        if action_name not in _CRASH_ACTIONS:
            return
        # Lightning's profile() calls stop() in a `finally`: an exception in flight means training raised.
        error = sys.exc_info()[1]
        if error is not None and not isinstance(error, StopIteration) and self._driver.running:
            try:
                self._driver.finish(error)
            except Exception as failure:  # the training error, not this one, is what the user must see
                logger.warning("neuronprof: could not write the outputs after %r: %r", error, failure)
        elif action_name == STEP_ACTION:
            self._driver.step()

    def close(self) -> dict[str, Path]:
        """End the session if it still runs, keeping what it recorded; does nothing once it has ended.

        Returns:
            The files written (``outputs``); empty when nothing was recorded.
        """
        return self._driver.finish()

    def summary(self) -> str:
        self._driver.finish()
        session = self._driver.session
        if not self._driver.outputs or session is None:
            return ""
        return f"neuronprof: {self._driver.outputs['report']}\n{session.table(row_limit=20)}"

    def teardown(self, stage: Optional[str]) -> None:
        # Lightning's __del__ calls teardown() even when __init__ refused its options.
        driver = getattr(self, "_driver", None)
        if driver is not None:
            driver.finish()
        super().teardown(stage=stage)
