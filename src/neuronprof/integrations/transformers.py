"""Profile a Hugging Face ``Trainer`` with one callback: ``Trainer(..., callbacks=[ProfileCallback()])``.

Needs ``transformers`` (``pip install 'neuronprof[transformers]'``). The step
boundary is the Trainer's optimizer step (``on_step_end``), so with gradient
accumulation one step holds every micro-batch of an update; the device is
synchronised at each boundary by the session, on whichever device the Trainer
placed the model (CPU, CUDA, TorchNeuron's ``neuron``, TorchTPU's ``tpu``).
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any, Optional, Union

from neuronprof.backends.base import distributed_rank
from neuronprof.integrations._common import DriverResults, StepDriver, missing_extra

try:
    from transformers import TrainerCallback
except ImportError:
    raise missing_extra("transformers", "transformers") from None

__all__ = ["ProfileCallback"]


def trainer_rank(args: Any) -> int:
    """The rank in the files' names: ``torch.distributed``'s when initialised, else ``args.process_index``.

    A process group set up outside the Trainer's arguments (``process_index`` left at 0)
    would otherwise make two ranks write the same ``rank-0.*`` files.
    """
    rank = distributed_rank()[0]
    return rank if rank is not None else int(getattr(args, "process_index", 0))


class ProfileCallback(DriverResults, TrainerCallback):
    """A ``TrainerCallback`` that profiles a few of the Trainer's steps and writes trace, table and report.

    ```python
    from neuronprof.integrations.transformers import ProfileCallback

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[ProfileCallback(wait=1, warmup=1, active=3)])
    trainer.train()
    # <output_dir>/neuronprof/rank-0.json.gz, rank-0.table.txt, rank-0.html
    ```

    The session starts when training begins and ends after
    ``(wait + warmup + active) * repeat`` optimizer steps; the rest of the run is
    not profiled. Each rank writes its own files (``rank-N.*``, N = the global rank
    of ``torch.distributed`` when initialised, else the Trainer's ``process_index``)
    into ``<TrainingArguments.output_dir>/neuronprof`` or ``output_dir``. A run
    shorter than the schedule keeps what it recorded.

    The Trainer tells callbacks nothing when training raises, so after an
    exception inside ``trainer.train()`` call [`close`][neuronprof.integrations.transformers.ProfileCallback.close]
    (or use the callback as a context manager): it ends the session, which torch
    allows one of per process, and writes what was recorded. The session also
    ends when the callback is garbage-collected.

    Args:
        wait: Optimizer steps skipped first.
        warmup: Steps profiled but discarded (compilation, caches).
        active: Steps recorded.
        repeat: Cycles of wait/warmup/active (at least 1).
        output_dir: Folder for the files; default ``<TrainingArguments.output_dir>/neuronprof``.
        **session_options: Any other ``neuronprof.session`` argument (``modes``,
            ``core``, ``backend``, ``record_shapes``...). Without ``backend``, the
            backend follows the device the Trainer placed the model on.

    Attributes:
        outputs: The files written: ``{"trace", "table", "report"}`` → path; empty
            until the schedule has run.

    Raises:
        ValueError: A schedule number or session option is invalid (checked here,
            before training starts).
    """

    def __init__(
        self,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        output_dir: Optional[Union[str, os.PathLike[str]]] = None,
        **session_options: Any,
    ) -> None:
        self._driver = StepDriver(wait=wait, warmup=warmup, active=active, repeat=repeat, **session_options)
        self._output_dir = output_dir
        # The Trainer has no exception hook: end a session a crash left running once the callback is gone.
        self._finalizer = weakref.finalize(self, self._driver.finish)
        self._finalizer.atexit = False

    def close(self) -> dict[str, Path]:
        """End the session if training left it running (an exception in ``train()``), keeping what it recorded.

        Does nothing once the session has ended. Afterwards another
        ``neuronprof.session`` can start.

        Returns:
            The files written (``outputs``); empty when nothing was recorded.
        """
        return self._driver.finish()

    def __enter__(self) -> ProfileCallback:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._driver.finish(exc)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        folder = self._output_dir if self._output_dir is not None else Path(args.output_dir) / "neuronprof"
        param = next(iter(model.parameters()), None) if model is not None else None
        self._driver.begin(folder, rank=trainer_rank(args), device=args.device if param is None else param.device)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        max_steps = getattr(state, "max_steps", 0) or 0
        self._driver.step(last=max_steps > 0 and getattr(state, "global_step", 0) >= max_steps)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._driver.finish()
