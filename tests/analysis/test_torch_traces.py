"""Real torch.profiler traces: the loader agrees with key_averages(), and RMSNorm is memory-bound."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from neuronprof.analysis import load_trace, roofline, summarize

# Trace times are microseconds with nanosecond digits, torch's are from integer
# nanoseconds: a few nanoseconds per call is rounding, anything more is a bug.
_NS = 0.002


def _events(path: Path) -> list[dict]:
    """The op events of a trace, read independently of the loader (json.load)."""
    events = json.loads(path.read_text())["traceEvents"]
    out = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") != "Trace":
            name = "ProfilerStep*" if e["name"].startswith("ProfilerStep#") else e["name"]
            out.append({**e, "name": name})
    return out


def test_summarize_matches_key_averages(torch_traces) -> None:
    # Calls as key_averages() counts them: where torch folds an op's only same-name
    # child into it (aten::sum redispatching to aten::sum), the trace holds two events
    # and both tables one call; the CPU total is the parent's alone.
    rows = {r.name: r for r in load_trace(torch_traces.workload).rows("name")}
    assert torch_traces.averages, "the profile recorded nothing"
    assert set(rows) == {key for key, *_ in torch_traces.averages}
    in_trace = Counter(e["name"] for e in _events(torch_traces.workload))
    folded = 0
    for key, count, self_cpu, cpu_total in torch_traces.averages:
        row = rows[key]
        assert row.calls == count, key
        assert row.self_cpu_us == pytest.approx(self_cpu, abs=_NS * row.calls + 1e-6), key
        assert row.cpu_total_us == pytest.approx(cpu_total, abs=_NS * count + 1e-6), key
        folded += in_trace[key] != count
    assert folded >= 1  # aten::sum re-dispatches in this workload: the fold was exercised


def test_group_by_shape_matches_key_averages_group_by_input_shape(torch_traces) -> None:
    rows = {
        (r.name, str([list(s) for s in (r.input_shapes or ())])): r
        for r in load_trace(torch_traces.workload).rows("shape")
    }
    assert set(rows) == {(key, shapes) for key, shapes, *_ in torch_traces.shape_averages}
    for key, shapes, count, self_cpu in torch_traces.shape_averages:
        row = rows[(key, shapes)]
        assert row.calls == count, (key, shapes)
        assert row.self_cpu_us == pytest.approx(self_cpu, abs=_NS * row.calls + 1e-6), (key, shapes)


def _same_shapes(dims: str, shapes: str) -> bool:
    flat = [d if all(isinstance(x, int) for x in d) else [] for d in json.loads(dims or "[]")]
    return str(flat) == shapes


def test_steps_and_top_level_calls_of_naive_rmsnorm(torch_traces) -> None:
    table = summarize(torch_traces.rmsnorm, sort_by="cpu")
    assert table.steps == 2
    assert table.top_level_calls == 12  # pow, mean, add, rsqrt, mul, mul per step
    assert table.backend == "cpu" and table.device_label is None
    assert {"aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul"} <= set(table.names())


@pytest.mark.parametrize("device", ["trn2", "trn1", "h100"])
def test_roofline_says_naive_rmsnorm_is_memory_bound(torch_traces, device: str) -> None:
    rl = roofline(torch_traces.rmsnorm, device=device)
    assert rl.time_source == "cpu"  # a CPU trace: rates from CPU time, bound from intensity
    names = {r.name for r in rl.rows}
    assert {"aten::pow", "aten::mul", "aten::rsqrt"} <= names
    assert all(r.bound == "memory" for r in rl.rows)
    assert rl.bound == "memory"
    pow_row = rl.row("aten::pow")
    assert pow_row.input_shapes == ((4096, 4096), ())
    assert pow_row.flops == pytest.approx(2 * 4096 * 4096)  # two calls, one FLOP per element
    assert pow_row.bytes == pytest.approx(2 * 2 * 4096 * 4096 * 4)  # read + write float32, twice
    assert pow_row.intensity < rl.device.ridge
