"""A session reads each of kineto's events for what it can hold, and its trace holds what its export holds.

The live reader calls kineto's getters only where they can answer: recorded inputs
(shapes, dtypes, concrete inputs) only where the profile records shapes, torch's FLOP
counts only where the profile was asked for them (``with_flops``), links only for
runtime calls and device work; and it reads the events a chunk at a time, freeing each
chunk once read. Whatever the options, the session's trace has the same ops, with the
same recorded inputs and calls, as ``load_trace`` of its export.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

import neuronprof
from neuronprof.analysis import Trace, load_trace


def _ops(trace: Trace, concrete: bool = True) -> Counter[tuple[Any, ...]]:
    """Calls per (name, on device, input dims, input dtypes, concrete inputs or whether there are any)."""
    out: Counter[tuple[Any, ...]] = Counter()
    for op in trace.ops:
        values = op.concrete_inputs if concrete else op.concrete_inputs is not None
        out[(op.name, op.on_device, op.input_dims, op.input_dtypes, values)] += op.calls
    return out


def _body() -> None:
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    for i in range(400):  # some 4,000 events: several of the reader's chunks
        with torch.profiler.record_function("block"):
            torch.add(x, x, alpha=(2, 1.5, 1, 1.0)[i % 4])  # scalars that tell rows apart (1 is not 1.0)
            torch.mm(x, w)  # FLOPs, with_flops=True
            torch.clamp(x, min=float("nan") if i % 5 == 0 else 0.0)


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
@pytest.mark.parametrize(
    ("record_shapes", "with_flops"),
    [(False, False), (True, False), (True, True)],
    ids=["no-shapes", "shapes", "shapes-and-flops"],
)
def test_the_live_trace_holds_the_ops_inputs_and_calls_of_its_export(
    tmp_path: Path, record_shapes: bool, with_flops: bool
) -> None:
    with neuronprof.session(
        backend="cpu",
        output_dir=tmp_path,
        wait=0,
        warmup=0,
        active=1,
        record_shapes=record_shapes,
        with_flops=with_flops,
    ) as s:
        for _ in s.steps():
            _body()
    live = s.trace()
    assert live.events > 3 * 1024
    live_ops = _ops(live)
    # Concrete inputs are compared by presence: a whole float is "1.0" live (Python's text of
    # kineto's value) where kineto's trace writes "1.".
    assert _ops(live, concrete=False) == _ops(load_trace(s.export()), concrete=False)
    recorded = [key for key in live_ops if key[2] is not None]
    if not record_shapes:
        assert recorded == [], "nothing is recorded without record_shapes"
        assert all(key[3] is None and key[4] is None for key in live_ops)
    else:
        alphas = {key[4][-1] for key in live_ops if key[0] == "aten::add"}
        assert alphas == {"2", "1.5", "1", "1.0"}, "each alpha is a row of its own"
        clamps = {key[4] for key in live_ops if key[0] == "aten::clamp"}
        assert any("nan" in values for values in clamps if values), clamps
    mm = [op for op in live.ops if op.name == "aten::mm"]
    if with_flops:
        theirs = {e.key: e.flops for e in s.profiler.key_averages()}
        assert sum(op.flops or 0 for op in mm) == theirs["aten::mm"] > 0
    else:
        assert all(op.flops is None for op in live.ops), "torch counts no FLOPs without with_flops"


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
@pytest.mark.parametrize("enabled", [True, False], ids=["collector-on", "collector-off"])
def test_reading_the_events_leaves_the_garbage_collector_as_the_user_set_it(enabled: bool) -> None:
    # The read pauses the cyclic collector (kineto's getters make lists by the million); the
    # user's own setting is restored after it, whichever it was.
    import gc

    was = gc.isenabled()
    with neuronprof.session(backend="cpu", wait=0, warmup=0, active=1) as s:
        for _ in s.steps():
            _body()
    try:
        (gc.enable if enabled else gc.disable)()
        assert s.table().rows
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
