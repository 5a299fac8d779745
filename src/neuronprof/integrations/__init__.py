"""neuronprof inside the training tools people already run.

* [`neuronprof.integrations.transformers.ProfileCallback`][]: a Hugging Face
  ``Trainer`` callback (``pip install 'neuronprof[transformers]'``).
* [`neuronprof.integrations.lightning.NeuronProfProfiler`][]: a Lightning
  ``Trainer(profiler=...)`` (``pip install 'neuronprof[lightning]'``).
* Accelerate needs no helper: profile an ``accelerator``-driven loop with
  ``neuronprof.session`` (see the guide's Accelerate page).

Each module imports its training library when it is imported, and only then; a
missing library raises an ``ImportError`` that names the extra to install. Both
integrations write, per rank, a trace, a table and an HTML report with
[`write_outputs`][neuronprof.integrations.write_outputs].
"""

from __future__ import annotations

from neuronprof.integrations._common import StepDriver, write_outputs

__all__ = ["StepDriver", "write_outputs"]
