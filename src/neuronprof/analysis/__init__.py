"""Offline trace analysis: summarize, diff and roofline, without torch.

Traces captured on Trainium, TPU and GPU hosts are read here on any machine
with Python, torch or not:

```python
from neuronprof import analysis

print(analysis.summarize("trace.json.gz", row_limit=20))   # the session.table() view
print(analysis.diff("before.json", "after.json"))           # what changed, with verdicts
print(analysis.check("base/", "new/", max_slowdown=0.05))    # a CI gate: exit_code 0, 1 or 2
print(analysis.advise("trace.json"))                        # what to fix first
rl = analysis.roofline("trace.json", device="trn2")         # compute- or memory-bound?
print(rl)
rl.plot("roofline.png")                                     # needs neuronprof[plot]
print(analysis.neuron_profile("neuronprof_output/neuron_profile"))  # Neuron's own profile
```

The same is on the command line: ``neuronprof summarize``, ``neuronprof diff``,
``neuronprof check``, ``neuronprof roofline``, ``neuronprof advise``. Nothing in a trace
is ever executed or unpickled: it is parsed as JSON, streamed in bounded memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neuronprof._lazy import lazy_names

if TYPE_CHECKING:  # for type checkers and the API reference; at run time, __getattr__ below
    from neuronprof.analysis._check import Check, CheckItem, check
    from neuronprof.analysis._diff import DiffRow, TraceDiff, diff
    from neuronprof.analysis._peaks import DEVICE_PEAKS, DevicePeak, device_peak
    from neuronprof.analysis._roofline import Roofline, RooflineRow, roofline
    from neuronprof.analysis._verdict import Shift, shift
    from neuronprof.analysis.errors import TraceError, UnknownDeviceError
    from neuronprof.analysis.flops import DTYPE_SIZES, OpCost, dtype_size, op_cost
    from neuronprof.analysis.insights import Evidence, Finding, FindingKind, Insights, RankInsights, advise
    from neuronprof.analysis.neuron import NeuronProfile, neuron_profile
    from neuronprof.analysis.trace import (
        GroupBy,
        StepSample,
        Trace,
        TraceOp,
        TraceSource,
        find_trace_files,
        load_trace,
        summarize,
        summarize_ranks,
    )
    from neuronprof.typing import Bound, DiffMatch, DiffMetric, TimeSource, Verdict

__all__ = [
    "DEVICE_PEAKS",
    "DTYPE_SIZES",
    "Bound",
    "Check",
    "CheckItem",
    "DevicePeak",
    "DiffMatch",
    "DiffMetric",
    "DiffRow",
    "Evidence",
    "Finding",
    "FindingKind",
    "GroupBy",
    "Insights",
    "NeuronProfile",
    "RankInsights",
    "OpCost",
    "Roofline",
    "RooflineRow",
    "Shift",
    "StepSample",
    "TimeSource",
    "Trace",
    "TraceDiff",
    "TraceError",
    "TraceOp",
    "TraceSource",
    "UnknownDeviceError",
    "Verdict",
    "advise",
    "check",
    "device_peak",
    "diff",
    "dtype_size",
    "find_trace_files",
    "load_trace",
    "neuron_profile",
    "op_cost",
    "roofline",
    "shift",
    "summarize",
    "summarize_ranks",
]

# The module that defines each public name. A name is imported on first use, so that a session
# that reads only its op table never imports the roofline, the findings or the Neuron reader.
_MODULES = {
    "_check": ("Check", "CheckItem", "check"),
    "_diff": ("DiffRow", "TraceDiff", "diff"),
    "_peaks": ("DEVICE_PEAKS", "DevicePeak", "device_peak"),
    "_roofline": ("Roofline", "RooflineRow", "roofline"),
    "_verdict": ("Shift", "shift"),
    # The option types are defined with every other option type.
    "neuronprof.typing": ("Bound", "DiffMatch", "DiffMetric", "TimeSource", "Verdict"),
    "errors": ("TraceError", "UnknownDeviceError"),
    "flops": ("DTYPE_SIZES", "OpCost", "dtype_size", "op_cost"),
    "insights": ("Evidence", "Finding", "FindingKind", "Insights", "RankInsights", "advise"),
    "neuron": ("NeuronProfile", "neuron_profile"),
    "trace": (
        "GroupBy",
        "StepSample",
        "Trace",
        "TraceOp",
        "TraceSource",
        "find_trace_files",
        "load_trace",
        "summarize",
        "summarize_ranks",
    ),
}


__getattr__, __dir__ = lazy_names(__name__, _MODULES, __all__)
