"""NeuronCore time and the per-engine breakdown from Neuron's own profile, without torch.

AWS's ``neuron-explorer`` (``aws-neuronx-tools``; older images: ``neuron-profile``)
turns Neuron Runtime's profile files into JSON. This package reads that JSON,
following the formats as AWS documents them (not yet checked against output
captured on Trainium hardware):

```python
from neuronprof.analysis import neuron_profile

p = neuron_profile("neuronprof_output/neuron_profile")   # a bundle, a session folder, ...
print(p)                          # engines per device profile, executions per NEFF, busy time per step
p.plot("engines.png")             # one stacked engine bar per NEFF (needs matplotlib)
print(p.roofline())              # each NEFF: compute- or memory-bound, against the profile's own peaks
```

The same is ``neuronprof neuron PATH`` on the command line, and
``Session.neuron_profile()`` / ``Session.table()`` on a live Neuron session.
"""

from __future__ import annotations

from neuronprof.analysis.neuron._join import FlowJoin, JoinedOp
from neuronprof.analysis.neuron._model import (
    BOTTLENECK_ENGINES,
    ENGINES,
    NEFF_ROW_PREFIX,
    NEURON_PROFILE_SCHEMA,
    DeviceSummary,
    EngineTime,
    NeffExecution,
    NeffStats,
    NeuronProfile,
    StepDevice,
)
from neuronprof.analysis.neuron._read import SUMMARY_JSON, neuron_profile
from neuronprof.analysis.neuron._summary import parse_summary
from neuronprof.analysis.neuron._system import SYSTEM_JSON, read_steps, read_system_profile, step_activity
from neuronprof.analysis.neuron._tool import (
    ENV_VAR,
    INSTALL_HINT,
    NeuronTool,
    NeuronToolError,
    NeuronToolMissing,
    extract_json,
    find_neuron_tool,
)
from neuronprof.typing import ToolChoice

__all__ = [
    "BOTTLENECK_ENGINES",
    "ENGINES",
    "ENV_VAR",
    "INSTALL_HINT",
    "NEFF_ROW_PREFIX",
    "NEURON_PROFILE_SCHEMA",
    "SUMMARY_JSON",
    "SYSTEM_JSON",
    "DeviceSummary",
    "EngineTime",
    "FlowJoin",
    "JoinedOp",
    "NeffExecution",
    "NeffStats",
    "NeuronProfile",
    "NeuronTool",
    "NeuronToolError",
    "NeuronToolMissing",
    "StepDevice",
    "ToolChoice",
    "extract_json",
    "find_neuron_tool",
    "neuron_profile",
    "parse_summary",
    "read_steps",
    "read_system_profile",
    "step_activity",
]
