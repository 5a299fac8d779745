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
from neuronprof.errors import (
    BackendUnavailableError,
    NeuronProfError,
    NeuronProfWarning,
    SessionStateError,
)
from neuronprof.model import OpRow, Table

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "NeuronProfError",
    "NeuronProfWarning",
    "OpRow",
    "Session",
    "SessionStateError",
    "Table",
    "__version__",
    "session",
]
