"""Findings that are true for the run: the kinds real users hit, each planted and clean, and words that fit the run.

Hand-built timelines pin each rule's edges; live sessions check what torch really records.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Optional

import pytest
import torch

import neuronprof
from neuronprof.analysis.insights import (
    DeviceEvent,
    Finding,
    HostEvent,
    Insights,
    Timeline,
    advise,
    analyze,
)

CASES = Path(__file__).parent / "analysis" / "cases"


def _step(*events: HostEvent, end: int = 100_000, name: str = "ProfilerStep#1") -> tuple[HostEvent, ...]:
    return (HostEvent(name, 0, end, category="step"), *events)


def _ops(n: int, start: int, length: int, every: int, name: str = "aten::relu") -> list[HostEvent]:
    return [HostEvent(name, start + i * every, start + i * every + length) for i in range(n)]


def only(insights: Insights, kind: str) -> Finding:
    found = insights.of_kind(kind)
    assert len(found) == 1, insights
    return found[0]


# -- host time between ops ---------------------------------------------------------------------


def test_python_between_many_ops_is_host_overhead() -> None:
    # 20 ops of 1 µs, one every 5 µs: 80 % of the step is between them.
    found = only(analyze(Timeline(_step(*_ops(20, 0, 1_000, 5_000)))), "host_overhead")
    assert found.evidence.share_of_step == pytest.approx(0.8)
    assert "aten::relu" in found.evidence.ops and "largest gaps" in found.evidence.detail


@pytest.mark.parametrize(
    ("events", "why"),
    [
        (_ops(20, 0, 4_500, 5_000), "ops back to back"),
        (_ops(5, 0, 1_000, 20_000), "too few ops: the gaps are the loop's own cost"),
        (
            [
                HostEvent(
                    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 80_000, category="annotation"
                ),
                *_ops(20, 80_000, 900, 1_000),
            ],
            "loading data is the input pipeline's finding, not Python between ops",
        ),
    ],
)
def test_host_overhead_is_not_raised_where_the_time_is_elsewhere(events: list[HostEvent], why: str) -> None:
    assert "host_overhead" not in analyze(Timeline(_step(*events))).kinds(), why


@pytest.mark.slow
def test_host_overhead_on_a_live_session_names_the_gaps() -> None:
    def python_between_ops(t: torch.Tensor) -> torch.Tensor:
        for _ in range(12):
            time.sleep(0.0005)  # Python work far longer than the op
            t = t.relu()
        return t

    x = torch.randn(8, 8)
    with neuronprof.session() as s:
        for _ in s.steps():
            python_between_ops(x)
    found = only(s.insights(), "host_overhead")
    assert "aten::relu" in found.evidence.ops and (found.evidence.share_of_step or 0) >= 0.6


# -- waiting in collectives --------------------------------------------------------------------


def _ranked(collective: tuple[int, int]) -> Timeline:
    compute = [HostEvent("aten::mm", i * 3_000, i * 3_000 + 3_000) for i in range(10)]  # 0–30 µs, no gap
    gloo = HostEvent("gloo:all_reduce", *collective, thread="0:77", category="annotation")
    return Timeline((*_step(*compute), gloo))


def test_a_collective_with_no_compute_beside_it_is_communication_wait() -> None:
    ins = analyze(_ranked((20_000, 90_000)))  # 60 µs of it after the compute ends
    found = only(ins, "communication_wait")
    assert found.evidence.us_per_step == pytest.approx(60.0)
    assert found.evidence.ops == ("gloo:all_reduce",) and "70.0 µs per step" in found.evidence.detail
    assert "host_overhead" not in ins.kinds()  # the wait is not Python


def test_a_collective_overlapped_by_compute_is_not_a_wait() -> None:
    assert "communication_wait" not in analyze(_ranked((5_000, 28_000))).kinds()


def test_collective_kernels_on_the_device_count_less_the_compute_beside_them() -> None:
    host = _step(HostEvent("aten::mm", 0, 2_000, ext_id=1), HostEvent("c10d::allreduce_", 2_000, 4_000, ext_id=2))
    device = (
        DeviceEvent("sgemm", 2_000, 30_000, ext_id=1),
        DeviceEvent("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10_000, 60_000, ext_id=2),
    )
    found = only(analyze(Timeline(host, device, "cuda", "CUDA")), "communication_wait")
    assert found.evidence.us_per_step == pytest.approx(30.0)


# -- low precision on a CPU without it ---------------------------------------------------------


def _bf16(native: Optional[tuple[str, ...]]) -> Insights:
    ops = [
        HostEvent("aten::addmm", i * 10_000, i * 10_000 + 8_000, input_dtypes=("c10::BFloat16", "c10::BFloat16"))
        for i in range(5)
    ]
    return analyze(Timeline(_step(*ops), record_shapes=True, native_dtypes=native))


def test_bf16_on_a_cpu_without_it_is_emulated_low_precision() -> None:
    found = only(_bf16(()), "emulated_low_precision")
    assert found.evidence.ops == ("aten::addmm",) and found.evidence.share_of_step == pytest.approx(0.4)
    assert "float32" in found.suggestion


def test_bf16_on_a_cpu_with_it_or_an_unknown_cpu_is_no_finding() -> None:
    assert "emulated_low_precision" not in _bf16(("torch.bfloat16",)).kinds()
    unknown = _bf16(None)
    assert "emulated_low_precision" not in unknown.kinds()
    assert any("bfloat16 ops take 40%" in n and "not in the trace" in n for n in unknown.notes)


@pytest.mark.slow
def test_autocast_bf16_on_this_cpu_is_judged_by_what_the_cpu_has(tmp_path: Path) -> None:
    from neuronprof._kineto import native_dtypes

    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
    x = torch.randn(64, 256)
    with neuronprof.session(record_shapes=True, output_dir=tmp_path) as s:
        for _ in s.steps():
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                model(x)
    live = s.insights()
    expected = "torch.bfloat16" not in native_dtypes()
    assert ("emulated_low_precision" in live.kinds()) == expected
    # The trace carries what the CPU has: the offline reading says the same.
    assert ("emulated_low_precision" in advise(s.export(tmp_path / "t.json")).kinds()) == expected


# -- CPU fallbacks -----------------------------------------------------------------------------


def _fallback(label: Optional[str], to_cpu: bool = True) -> Insights:
    host = _step(
        HostEvent("aten::linalg_eigh", 10_000, 50_000),
        *([HostEvent("aten::_to_cpu", 11_000, 20_000)] if to_cpu else []),
        HostEvent("aten::copy_", 40_000, 49_000),
    )
    return analyze(Timeline(host, (), label.lower() if label else "cpu", label))


def test_an_op_that_moves_its_inputs_to_the_cpu_fell_back() -> None:
    found = only(_fallback("NEURON"), "cpu_fallback")
    assert found.title == "aten::linalg_eigh fell back to the CPU in every step"
    assert "no NEURON kernel" in found.evidence.detail and found.evidence.us_per_step == pytest.approx(40.0)


@pytest.mark.parametrize(("label", "to_cpu"), [("NEURON", False), (None, True)])
def test_no_fallback_without_the_mark_or_without_a_device(label: Optional[str], to_cpu: bool) -> None:
    assert "cpu_fallback" not in _fallback(label, to_cpu).kinds()


# -- copies: the direction in the trace's own words --------------------------------------------


def test_a_device_to_device_copy_is_no_host_device_copy() -> None:
    ins = advise(CASES / "advise_dtod_memcpy_called_host_device.json")
    assert "host_device_copy" not in ins.kinds()
    assert ins.device_label == "HIP"


def test_a_bare_memcpy_call_names_no_direction() -> None:
    ins = advise(CASES / "advise_clone_without_device_events.json")
    assert "host_device_copy" not in ins.kinds()
    assert not any("host↔device" in f.title or "host→device" in f.title for f in ins)
    # The trace names an A100 and a GPU process: not a CPU-only profile, though no kernel was recorded.
    assert ins.device_label == "CUDA" and not any("CPU-only" in n for n in ins.notes)
    assert any("the trace holds no device events" in n for n in ins.notes)


# -- words that fit the run --------------------------------------------------------------------


def _loader(name: str, label: Optional[str]) -> Finding:
    host = _step(HostEvent(f"enumerate(DataLoader)#{name}.__next__", 0, 50_000, category="annotation"))
    return only(analyze(Timeline(host, (), label.lower() if label else "cpu", label)), "input_pipeline")


def test_the_input_pipeline_finding_fits_the_loader_and_the_machine() -> None:
    cpu = _loader("_SingleProcessDataLoaderIter", None)
    assert "device" not in cpu.evidence.detail and "pin_memory" not in cpu.suggestion
    assert "num_workers=4" in cpu.suggestion
    workers = _loader("_MultiProcessingDataLoaderIter", "CUDA")
    assert "num_workers=4" not in workers.suggestion and "above its current value" in workers.suggestion
    assert "already has worker processes" in workers.evidence.detail and "the device waits" in workers.evidence.detail


@pytest.mark.parametrize("shapes", [True, False])
def test_the_dominant_op_advice_fits_what_was_recorded(shapes: bool) -> None:
    dtypes = {"input_shapes": ((64, 64), (64, 64)), "input_dtypes": ("float", "float")} if shapes else {}
    host = _step(HostEvent("aten::mm", 1_000, 90_000, **dtypes), HostEvent("aten::relu", 91_000, 95_000))
    cpu = only(analyze(Timeline(host, native_dtypes=())), "dominant_op")
    assert ("record_shapes=True" in cpu.suggestion) == (not shapes)
    # On a CPU-only run with no native low precision: no roofline of a device, no smaller dtype.
    assert "roofline" not in cpu.suggestion and "smaller dtype" not in cpu.suggestion
    device = (DeviceEvent("gemm", 2_000, 80_000, correlation=None, ext_id=7),)
    host = _step(HostEvent("aten::mm", 1_000, 90_000, ext_id=7, **dtypes), HostEvent("aten::relu", 91_000, 95_000))
    gpu = analyze(Timeline(host, device, "cuda", "CUDA")).of_kind("dominant_op")
    assert gpu and "s.roofline()" in gpu[0].suggestion
    assert ("smaller dtype" in gpu[0].suggestion) == shapes


# -- autocast's casts are its own --------------------------------------------------------------


def _cast(src: str, dst: str, start: int, cause: str = "aten::linear") -> list[HostEvent]:
    return [
        HostEvent(cause, start, start + 9_000),
        HostEvent("aten::_to_copy", start + 1_000, start + 8_000),
        HostEvent("aten::copy_", start + 2_000, start + 7_000, input_shapes=((8, 8), (8, 8)), input_dtypes=(dst, src)),
    ]


def test_autocast_casts_are_named_in_a_note_not_reported() -> None:
    back = "autograd::engine::evaluate_function: MmBackward0"
    host = _step(*_cast("float", "c10::BFloat16", 0), *_cast("c10::BFloat16", "float", 20_000, back))
    ins = analyze(Timeline(host))
    assert "dtype_conversion" not in ins.kinds()
    assert any("come from autocast" in n for n in ins.notes)


def test_a_widening_to_float32_without_autocast_is_still_a_conversion() -> None:
    # bf16 weights meeting float32 activations, no narrowing cast anywhere: a real mixed-dtype op.
    found = only(analyze(Timeline(_step(*_cast("c10::BFloat16", "float", 0, "aten::mul")))), "dtype_conversion")
    assert "torch.bfloat16 → torch.float32" in found.evidence.detail


def test_a_collective_is_never_the_dominant_op() -> None:
    host = _step(HostEvent("c10d::allreduce_", 0, 80_000), HostEvent("aten::mm", 81_000, 90_000))
    assert "dominant_op" not in analyze(Timeline(host)).kinds()


def test_dynamos_own_bytecode_is_never_the_dominant_op() -> None:
    host = _step(HostEvent("Pregraph bytecode", 0, 80_000), HostEvent("aten::mm", 81_000, 90_000))
    assert "dominant_op" not in analyze(Timeline(host)).kinds()


# -- one slow step is not a pattern ------------------------------------------------------------


def _steps(gaps: list[int]) -> Timeline:
    """Steps of 20 back-to-back 1 µs ops, each followed by a gap (µs) of Python."""
    events: list[HostEvent] = []
    t = 0
    for i, gap in enumerate(gaps):
        end = t + 20_000 + gap * 1_000
        events.append(HostEvent(f"ProfilerStep#{i}", t, end, category="step"))
        events += _ops(20, t, 1_000, 1_000)
        t = end
    return Timeline(tuple(events))


def test_one_slow_step_does_not_raise_a_step_share_finding() -> None:
    # One 500 µs pause in the first of four steps: the mean is high, no other step is.
    assert "host_overhead" not in analyze(_steps([500, 0, 0, 0])).kinds()


def test_a_share_held_in_most_steps_says_so() -> None:
    every = only(analyze(_steps([100, 100, 100])), "host_overhead")
    assert every.title.endswith("of each step")
    most = only(analyze(_steps([100, 100, 0])), "host_overhead")
    assert "on average (2 of 3 steps at 60% or more)" in most.title
    assert "the step's start" not in most.evidence.ops and "the step's end" not in most.evidence.ops


# -- conversions told apart, and autocast's kept to its own ------------------------------------


def test_two_conversions_of_one_op_are_two_findings() -> None:
    host = _step(*_cast("bool", "long int", 0, "aten::to"), *_cast("long int", "float", 20_000, "aten::to"))
    titles = sorted(f.title for f in analyze(Timeline(host)).of_kind("dtype_conversion"))
    assert titles == [
        "aten::to converts torch.bool to torch.int64 in every step",
        "aten::to converts torch.int64 to torch.float32 in every step",
    ]


def test_a_float64_weight_under_autocast_is_still_reported() -> None:
    host = _step(*_cast("float", "c10::BFloat16", 0), *_cast("c10::BFloat16", "double", 20_000, "aten::mul"))
    ins = analyze(Timeline(host))
    (found,) = ins.of_kind("dtype_conversion")
    assert found.title.startswith("aten::mul converts torch.bfloat16 to torch.float64")
    assert "torch.tensor(eps" not in found.suggestion  # a weight, not a Python scalar
    assert any("come from autocast" in n for n in ins.notes)


# -- the dominant op is where to start only when it matters ------------------------------------


def test_an_op_dominating_a_sliver_of_the_step_is_not_where_to_start() -> None:
    # aten::mm holds 80 % of the time in ops, but the ops are 5 % of the step.
    host = _step(HostEvent("aten::mm", 0, 4_000), HostEvent("aten::relu", 4_000, 5_000))
    assert "dominant_op" not in analyze(Timeline(host)).kinds()


def test_a_dominant_compiled_region_is_not_told_to_fuse() -> None:
    host = _step(HostEvent("Torch-Compiled Region: 0/0", 0, 80_000), HostEvent("aten::relu", 81_000, 90_000))
    found = only(analyze(Timeline(host)), "dominant_op")
    assert "input shapes" not in found.suggestion and "compiled code already" in found.suggestion
    assert "(80% of the step)" in found.title


# -- attention as Hugging Face writes it eagerly -----------------------------------------------


def test_eager_attention_with_dropout_is_attention() -> None:
    shapes = [((2, 2, 32, 8), (2, 2, 8, 32)), ((2, 2, 32, 32), ()), ((2, 2, 32, 32),), ((2, 2, 32, 32),)]
    shapes += [((2, 2, 32, 32), (2, 2, 32, 8))]
    names = ["aten::matmul", "aten::mul", "aten::softmax", "aten::dropout", "aten::matmul"]
    host = _step(
        *(HostEvent(n, i * 10_000, i * 10_000 + 9_000, input_shapes=sh) for i, (n, sh) in enumerate(zip(names, shapes)))
    )
    (attention,) = analyze(Timeline(host)).of_kind("unfused_chain")
    assert "scaled_dot_product_attention" in attention.suggestion


# -- a hint where low precision cannot be checked ----------------------------------------------


def test_without_dtypes_a_cpu_without_bf16_says_what_is_not_checked() -> None:
    ins = analyze(Timeline(_step(*_ops(3, 0, 1_000, 2_000)), native_dtypes=()))
    assert any("low-precision work is not checked" in n and "record_shapes=True" in n for n in ins.notes)
    shapes = analyze(Timeline(_step(*_ops(3, 0, 1_000, 2_000)), record_shapes=True, native_dtypes=()))
    assert not any("low-precision work is not checked" in n for n in shapes.notes)


def test_a_minor_share_never_reads_as_the_minor_threshold() -> None:
    from neuronprof.analysis.insights import Evidence

    minor = Finding("dtype_conversion", "t", Evidence(("aten::to",), 1.0, 0.9, 0.0096), 0.9, "s")
    text = str(Insights((minor,), steps=1, step_us=100.0))
    assert "<1% of the step" in text and ", 1% of the step" not in text


def test_attention_time_counts_its_matmuls() -> None:
    names = ["aten::matmul", "aten::softmax", "aten::matmul"]
    shapes = [((2, 32, 8), (2, 8, 32)), ((2, 32, 32),), ((2, 32, 32), (2, 32, 8))]
    host = _step(
        *(HostEvent(n, i * 10_000, i * 10_000 + 9_000, input_shapes=sh) for i, (n, sh) in enumerate(zip(names, shapes)))
    )
    (attention,) = analyze(Timeline(host)).of_kind("unfused_chain")
    assert attention.evidence.us_per_step == pytest.approx(27.0)  # both matmuls and the softmax
    # A lone softmax between two matmuls is attention, never "an unfused bias add".
    assert (
        attention.title.startswith("Attention written as") and "bias" not in attention.title + attention.evidence.detail
    )
    assert attention.evidence.ops == tuple(names)


def test_a_bias_add_before_an_activation_is_found() -> None:
    host = _step(
        HostEvent("aten::linear", 0, 9_000, input_shapes=((32, 16), (64, 16), ())),
        HostEvent("aten::add", 10_000, 12_000, input_shapes=((32, 64), (64,))),
        HostEvent("aten::gelu", 13_000, 15_000, input_shapes=((32, 64),)),
    )
    (bias,) = analyze(Timeline(host)).of_kind("unfused_chain")
    assert bias.title == "aten::linear then aten::add: an unfused bias add"
    assert "torch.nn.functional.linear" in bias.suggestion


def test_under_autocast_a_residual_add_promoting_to_float32_is_autocasts() -> None:
    host = _step(*_cast("float", "c10::BFloat16", 0), *_cast("c10::BFloat16", "float", 20_000, "aten::add"))
    assert "dtype_conversion" not in analyze(Timeline(host)).kinds()


def test_the_stragglers_collective_time_is_not_called_waiting() -> None:
    from neuronprof.analysis.insights import analyze_ranks

    def rank(compute_us: int, gloo: tuple[int, int]) -> Timeline:
        ops = [HostEvent("aten::mm", i * compute_us * 100, (i + 1) * compute_us * 100) for i in range(10)]
        step = HostEvent("ProfilerStep#1", 0, 100_000, category="step")
        return Timeline((step, *ops, HostEvent("gloo:all_reduce", *gloo, thread="0:9", category="annotation")))

    slow, fast = rank(90, (90_000, 100_000)), rank(10, (10_000, 100_000))
    ranks = analyze_ranks(Timeline((), ranks=(dataclasses.replace(fast, rank=0), dataclasses.replace(slow, rank=1))))
    assert ranks.straggler == 1
    waited = only(ranks.rank(0), "communication_wait")
    assert waited.title.startswith("Waiting in collectives") and "find the rank" in waited.suggestion
    own = only(ranks.rank(1), "communication_wait")
    assert own.title.startswith("Collectives take") and "this rank is the straggler" in own.evidence.detail
    assert "find the rank" not in own.suggestion


def test_one_launch_heavy_step_does_not_make_the_loop_cpu_bound() -> None:
    # The first step is long and all launches (390 of 400 µs); the other three are 5 of 100 µs. The mean
    # host share is 58 % (over the 50 % threshold) but one step carries it.
    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    t = 0
    for i, (length, launching) in enumerate([(400_000, 390_000), (100_000, 5_000), (100_000, 5_000), (100_000, 5_000)]):
        host.append(HostEvent(f"ProfilerStep#{i}", t, t + length, category="step"))
        host.append(HostEvent("aten::mm", t, t + launching, ext_id=i + 1))
        device.append(DeviceEvent("gemm", t + launching, t + launching + 1_000, ext_id=i + 1))
        t += length
    timeline = Timeline(tuple(host), tuple(device), "cuda", "CUDA")
    ins = analyze(timeline)
    assert (ins.host_op_us or 0) >= 0.5 * (ins.step_us or 0)
    assert "cpu_bound" not in ins.kinds() and ins.bound != "cpu"
