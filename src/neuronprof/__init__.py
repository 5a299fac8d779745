"""neuronprof: profile PyTorch on Trainium, TPU, GPU and CPU with one ``with`` statement.

``with neuronprof.session() as s:`` around the loop, ``for _ in s.steps():`` in it (see
[`session`][neuronprof.session]); then ``print(s.table())``, ``s.insights()``,
``s.report()`` and ``s.export()`` read what it recorded.

``s.recording`` is what the session recorded, read once; ``neuronprof.load_trace(path)``
returns the same type for a saved trace, so every read-out works on both.

Importing neuronprof does not import torch; the session does, when it starts. Each public
name is imported on first use, so that the ``neuronprof`` command starts without loading
the session, the trace reader or the models it does not run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neuronprof._lazy import lazy_names

if TYPE_CHECKING:  # for type checkers and the API reference; at run time, __getattr__ below
    # Modules behind package-level functions are private (_session, _compare), so that
    # ``neuronprof.session`` and ``neuronprof.compare`` always mean the functions.
    from neuronprof import analysis as analysis  # (modules: attributes of the package, see _SUBMODULES)
    from neuronprof import backends as backends
    from neuronprof import errors as errors
    from neuronprof import export as export
    from neuronprof import model as model
    from neuronprof import typing as typing
    from neuronprof._compare import compare
    from neuronprof._config import SessionConfig, SessionOptions
    from neuronprof._session import Session, session
    from neuronprof.analysis.trace import load_trace
    from neuronprof.backends import require_backend
    from neuronprof.errors import (
        BackendUnavailableError,
        NeuronProfError,
        NeuronProfWarning,
        SessionStateError,
        VariantError,
    )
    from neuronprof.model import Comparison, ComparisonRow, OpRow, RankTable, Table

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "Comparison",
    "ComparisonRow",
    "RankTable",
    "SessionConfig",
    "SessionOptions",
    "VariantError",
    "compare",
    "require_backend",
    "NeuronProfError",
    "NeuronProfWarning",
    "OpRow",
    "Session",
    "SessionStateError",
    "Table",
    "__version__",
    "load_trace",
    "session",
]

# The module that defines each public name, imported on first use (PEP 562).
_MODULES = {
    "_compare": ("compare",),
    "_config": ("SessionConfig", "SessionOptions"),
    "_session": ("Session", "session"),
    "analysis.trace": ("load_trace",),
    "backends": ("require_backend",),
    "errors": ("BackendUnavailableError", "NeuronProfError", "NeuronProfWarning", "SessionStateError", "VariantError"),
    "model": ("Comparison", "ComparisonRow", "OpRow", "RankTable", "Table"),
}

_SUBMODULES = ("analysis", "backends", "errors", "export", "model", "typing")
"""Public modules that are attributes of the package without their own import (``neuronprof.typing``
is not in ``__all__``: a star import would shadow the standard library's)."""


__getattr__, __dir__ = lazy_names(__name__, _MODULES, __all__, _SUBMODULES)
