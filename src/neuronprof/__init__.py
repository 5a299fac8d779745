"""neuronprof: profile PyTorch on Trainium, TPU, GPU and CPU with one ``with`` statement.

```python
import neuronprof

with neuronprof.session(modes=("device", "runtime"), core="0") as s:
    for _ in s.steps():
        model(x)
print(s.table())
s.export()
```

Importing neuronprof does not import torch; the session does, when it starts.
"""

from __future__ import annotations

from neuronprof._session import Session, session
from neuronprof.compare import SessionOptions, compare
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
    "SessionOptions",
    "VariantError",
    "compare",
    "NeuronProfError",
    "NeuronProfWarning",
    "OpRow",
    "Session",
    "SessionStateError",
    "Table",
    "__version__",
    "session",
]
