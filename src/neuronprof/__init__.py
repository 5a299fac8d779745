"""neuronprof: profile PyTorch on Trainium, TPU, GPU and CPU with one ``with`` statement.

```python
import neuronprof

with neuronprof.session(modes=("device", "runtime"), core="0") as s:
    for _ in s.steps():
        model(x)
print(s.table())
s.export()
```

``s.recording`` is what the session recorded, read once; ``neuronprof.load_trace(path)``
returns the same type for a saved trace, so every read-out works on both.

Importing neuronprof does not import torch; the session does, when it starts.
"""

from __future__ import annotations

# Modules behind package-level functions are private (_session, _compare), so that
# ``neuronprof.session`` and ``neuronprof.compare`` always mean the functions.
from neuronprof import typing  # noqa: F401  (the option types; not in __all__: it would shadow the stdlib's)
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
