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
    # Every event counts once: where torch folds an op's only same-name child into
    # it (aten::sum redispatching to aten::sum), key_averages() counts one call and
    # the trace two. Self time is the same either way; calls follow the trace.
    rows = {r.name: r for r in load_trace(torch_traces.workload).rows("name")}
    assert torch_traces.averages, "the profile recorded nothing"
    assert set(rows) == {key for key, *_ in torch_traces.averages}
    in_trace = Counter(e["name"] for e in _events(torch_traces.workload))
    folded = 0
    for key, count, self_cpu, cpu_total in torch_traces.averages:
        row = rows[key]
        assert row.calls == in_trace[key], key
        assert row.self_cpu_us == pytest.approx(self_cpu, abs=_NS * row.calls + 1e-6), key
        if row.calls == count:
            assert row.cpu_total_us == pytest.approx(cpu_total, abs=_NS * count + 1e-6), key
        else:
            folded += 1
            assert row.calls > count and row.cpu_total_us > cpu_total, key
    assert folded <= 2  # aten::sum only, in this workload


def test_group_by_shape_matches_key_averages_group_by_input_shape(torch_traces) -> None:
    rows = {
        (r.name, str([list(s) for s in (r.input_shapes or ())])): r
        for r in load_trace(torch_traces.workload).rows("shape")
    }
    # Rows torch folded away (a same-name only child with its own shapes) are extra rows here.
    assert {(key, shapes) for key, shapes, *_ in torch_traces.shape_averages} <= set(rows)
    assert {name for name, _ in rows} == {key for key, *_ in torch_traces.shape_averages}
    assert len(rows) - len(torch_traces.shape_averages) <= 2
    in_trace = Counter(
        (e["name"], str(e.get("args", {}).get("Input Dims", []))) for e in _events(torch_traces.workload)
    )
    per_name = Counter(e["name"] for e in _events(torch_traces.workload))
    folded = {key for key, count, *_ in torch_traces.averages if per_name[key] != count}
    for key, shapes, count, self_cpu in torch_traces.shape_averages:
        row = rows[(key, shapes)]
        expected = sum(n for (name, dims), n in in_trace.items() if name == key and _same_shapes(dims, shapes))
        assert row.calls == expected, (key, shapes)
        if key not in folded:  # torch moves a folded child's self time to its parent's shapes
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
