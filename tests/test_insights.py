"""Insights: every finding fires on its planted workload and on none of the clean ones, live and offline.

Each planted workload is profiled by a real session; its findings come from
``s.insights()`` (live) and from ``neuronprof advise`` on the trace the session
exported (offline), and both must agree. Device workloads run on the PrivateUse1
test backend (the ``torch_neuronx`` stand-in) in a subprocess; its kernel times
are the test plugin's, set per workload with ``testbackend.set_kernel_ns``, not a
Trainium's.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any, Optional

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import neuronprof
from neuronprof.analysis.insights import (
    FINDING_KINDS,
    DeviceEvent,
    Evidence,
    Finding,
    HostEvent,
    Insights,
    Timeline,
    analyze,
)
from neuronprof.analysis.insights._findings import GUIDE_URL
from neuronprof.cli import main as analysis_main
from neuronprof.errors import SessionStateError

sys.path.insert(0, str(Path(__file__).resolve().parent / "backends"))

from run_in_subprocess import check, result, run_script  # noqa: E402

# Findings about how the step uses the device and its memory: the clean workloads
# (a fused RMSNorm, a compiled MLP) must trigger none of them.
DEVICE_SIDE = frozenset(
    {"host_device_copy", "hidden_sync", "idle_device", "cpu_bound", "unfused_chain", "dtype_conversion"}
)
NAIVE_CHAIN = ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul")
EPS = 1e-6


def rmsnorm_naive(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rmsnorm_fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.rms_norm(x, (x.shape[-1],), w, EPS)


def advise_cli(path: str | Path) -> Insights:
    """``neuronprof advise PATH --format json``, read back."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = analysis_main(["advise", str(path), "--format", "json"])
    assert code == 0
    return Insights.from_json(buf.getvalue())


def live_and_offline(tmp_path: Path, body: Any, **session: Any) -> tuple[Insights, Insights]:
    """Profile ``body()`` per step; return (s.insights(), advise on the exported trace)."""
    kwargs: dict[str, Any] = {"record_shapes": True, "active": 2, "output_dir": tmp_path}
    kwargs.update(session)
    with neuronprof.session(**kwargs) as s:
        for _ in s.steps():
            body()
    live = s.insights()
    offline = advise_cli(s.export(tmp_path / "trace.json"))
    assert sorted(live.kinds()) == sorted(offline.kinds()), (live, offline)
    return live, offline


def only(insights: Insights, kind: str) -> Finding:
    found = insights.of_kind(kind)
    assert len(found) == 1, insights
    return found[0]


# -- on the CPU, in this process -----------------------------------------------------------


@pytest.fixture
def xw() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(16, 64), torch.randn(64)


def test_naive_rmsnorm_on_cpu_unfused_chain_and_no_scalar_conversion(tmp_path: Path, xw: Any) -> None:
    x, w = xw
    for ins in live_and_offline(tmp_path, lambda: rmsnorm_naive(x, w)):
        chain = only(ins, "unfused_chain")
        assert chain.evidence.ops == NAIVE_CHAIN
        assert chain.evidence.calls_per_step == 1
        assert "torch.rms_norm" in chain.suggestion
        assert chain.estimated_us is not None and 0 < chain.estimated_us < chain.evidence.us_per_step
        # The Python float eps promoted to the tensor's dtype is torch's type promotion of a
        # number, not the caller's conversion (changed by the review of issue 15: it was reported).
        assert "dtype_conversion" not in ins.kinds()
        # A CPU has no device: the device findings are skipped, with a note saying so.
        assert not {"host_device_copy", "idle_device", "cpu_bound", "hidden_sync"} & set(ins.kinds())
        assert any("CPU-only" in n for n in ins.notes)
        assert ins.steps == 2 and ins.device_busy_us is None and ins.bound == "unknown"
        assert [f.estimated_us for f in ins if f.estimated_us is not None] == sorted(
            (f.estimated_us for f in ins if f.estimated_us is not None), reverse=True
        )


def test_fused_rmsnorm_on_cpu_is_clean(tmp_path: Path, xw: Any) -> None:
    # On the CPU aten::rms_norm decomposes into pow, mean, add... underneath: those are
    # the library's, not the caller's, and must not be flagged.
    x, w = xw
    for ins in live_and_offline(tmp_path, lambda: rmsnorm_fused(x, w)):
        assert not DEVICE_SIDE & set(ins.kinds()), ins


def test_explicit_conversion_in_the_step(tmp_path: Path, xw: Any) -> None:
    x, _ = xw
    for ins in live_and_offline(tmp_path, lambda: x.double().sum()):
        conv = only(ins, "dtype_conversion")
        assert conv.evidence.ops[0] == "aten::to" and "torch.float32 → torch.float64" in conv.evidence.detail


def test_hidden_sync_is_not_flagged_on_a_cpu(tmp_path: Path, xw: Any) -> None:
    x, _ = xw
    for ins in live_and_offline(tmp_path, lambda: x.sum().item()):
        assert "hidden_sync" not in ins.kinds()


def test_dominant_op(tmp_path: Path) -> None:
    a = torch.randn(192, 192)
    b = torch.randn(4)
    for ins in live_and_offline(tmp_path, lambda: (torch.mm(a, a), b + 1)):
        top = only(ins, "dominant_op")
        assert top.evidence.ops == ("aten::mm",) and "start there" in top.title
        assert top.estimated_us is None and ins.findings[-1] is top  # a pointer, listed after the problems


def test_input_pipeline(tmp_path: Path) -> None:
    class Slow(torch.utils.data.Dataset[torch.Tensor]):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> torch.Tensor:
            time.sleep(0.002)  # a slow decode
            return torch.ones(4)

    batches = iter(torch.utils.data.DataLoader(Slow(), batch_size=2))
    for ins in live_and_offline(tmp_path, lambda: next(batches).sum()):
        found = only(ins, "input_pipeline")
        assert "DataLoader" in found.evidence.ops[0] and found.evidence.calls_per_step == 1
        assert found.evidence.share_of_step is not None and found.evidence.share_of_step >= 0.1


@pytest.mark.slow
def test_graph_break_and_recompilation(tmp_path: Path) -> None:
    # backend="eager": dynamo's graphs without Inductor's compile cost.
    def split(x: torch.Tensor) -> torch.Tensor:
        y = x.relu()
        torch._dynamo.graph_break()
        return y * 2

    split_c = torch.compile(split, backend="eager")
    x = torch.randn(8, 8)
    for ins in live_and_offline(tmp_path / "break", lambda: split_c(x)):
        brk = only(ins, "graph_break")
        assert brk.evidence.calls_per_step == 2 and "recompilation" not in ins.kinds()

    grow = torch.compile(lambda t: t.sin() + 1, backend="eager", dynamic=False)
    sizes = iter(range(3, 100))
    for ins in live_and_offline(tmp_path / "recompile", lambda: grow(torch.randn(next(sizes)))):
        rec = only(ins, "recompilation")
        assert rec.evidence.ops and all(op.startswith("Torch-Compiled Region: ") for op in rec.evidence.ops)
        assert not rec.evidence.ops[0].endswith("/0")


def test_insights_needs_the_block_to_end(tmp_path: Path) -> None:
    with neuronprof.session(output_dir=tmp_path) as s:
        with pytest.raises(SessionStateError, match="insights"):
            s.insights()
        for _ in s.steps():
            torch.ones(2) + 1


@pytest.mark.slow
def test_compare_shows_the_findings_that_differ_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    x, w = torch.randn(8, 32), torch.randn(32)
    cmp = neuronprof.compare({"naive": rmsnorm_naive, "torch.rms_norm": rmsnorm_fused}, x, w, repeats=1, quiet=True)
    differ = cmp.finding_differences()
    assert {"unfused_chain"} <= set(differ["naive"])
    assert "unfused_chain" not in differ["torch.rms_norm"]
    # The kinds that differ are those the other variant lacks. (Which op dominates the fused
    # variant's step is a matter of live timings: a dominant_op may differ too.)
    kinds = {r.name: set(r.insights.kinds()) for r in cmp.rows}
    for name, other in (("naive", "torch.rms_norm"), ("torch.rms_norm", "naive")):
        assert set(differ[name]) == kinds[name] - kinds[other]
    assert "Findings that differ" in str(cmp) and "naive: " in str(cmp)
    again = type(cmp).from_json(cmp.to_json())
    assert again.row("naive").insights == cmp.row("naive").insights


# -- on a device backend (the PrivateUse1 test plugin), live and offline ------------------

_DEVICE_SCRIPT = """
import os, time
import torch, neuronprof, testbackend

out = os.environ["INSIGHTS_OUT"]
EPS = 1e-6
def naive(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w
def fused(x, w):
    return torch.rms_norm(x, (x.shape[-1],), w, EPS)

x, w = torch.randn(16, 64), torch.randn(64)
mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
compiled_mlp = torch.compile(mlp, fullgraph=True)

def run(name, body, kernel_ns, shapes=True):
    testbackend.set_kernel_ns(kernel_ns)
    with neuronprof.session(backend="neuron", record_shapes=shapes, active=2, output_dir=out) as s:
        for _ in s.steps():
            body()
    return {"live": s.insights().to_dict(), "trace": str(s.export(os.path.join(out, name + ".json")))}

# ns per fake kernel: launch-bound vs device-bound. The fake device costs no real
# time, so LONG is far above any host noise of this shared machine.
SHORT, LONG = 5_000, 50_000_000
runs = {}
with torch.no_grad():
    compiled_mlp(x)
    runs["naive_rmsnorm"] = run("naive_rmsnorm", lambda: naive(x, w), SHORT)
    runs["syncs"] = run("syncs", lambda: (x.sum().item(), torch.nonzero(x > 0)), LONG)
    runs["python_between_steps"] = run("python_between_steps", lambda: (time.sleep(0.003), x.sum()), SHORT)
    # The plugin's kernels take 0.5 µs; the host really computes each relu (hundreds of µs: the
    # Python between two ops, and what a loaded machine adds to it, stays a small part of the step).
    big = torch.randn(512, 512)
    runs["many_tiny_ops"] = run("many_tiny_ops", lambda: [big.relu() for _ in range(30)], 500)
    runs["to_double"] = run("to_double", lambda: x.double().sum(), LONG)
    # The clean workloads run with the session's defaults: recording shapes inside
    # compiled code costs this CPU milliseconds per step, which a profile rightly reads
    # as a CPU-bound loop.
    runs["fused_rmsnorm"] = run("fused_rmsnorm", lambda: fused(x, w), LONG, shapes=False)
    runs["compiled_mlp"] = run("compiled_mlp", lambda: compiled_mlp(x), LONG, shapes=False)
    testbackend.set_kernel_ns(SHORT)
    cmp = neuronprof.compare({"naive": naive, "torch.rms_norm": fused}, x, w, repeats=1, quiet=True,
                             backend="neuron", output_dir=out)
report({"runs": runs, "differ": cmp.finding_differences(), "text": str(cmp),
        "naive": str(cmp.row("naive").insights)})
"""


@pytest.fixture(scope="module")
def device_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("insights-neuron")
    # The correlating TorchNeuron build: the only one that puts NeuronCore time into torch.profiler.
    env = {"INSIGHTS_OUT": str(out), "NEURONPROF_STANDIN_NEURON_BUILD": "correlating"}
    proc = run_script(_DEVICE_SCRIPT, backend="neuron", env=env, cwd=out)
    data: dict[str, Any] = result(check(proc))
    return data


def _device(device_runs: dict[str, Any], name: str) -> list[Insights]:
    run = device_runs["runs"][name]
    live = Insights.from_dict(run["live"])
    offline = advise_cli(run["trace"])
    assert sorted(live.kinds()) == sorted(offline.kinds()), (name, live, offline)
    assert live.device_label == offline.device_label == "NEURON"
    return [live, offline]


@pytest.mark.slow
def test_device_naive_rmsnorm_copies_eps_and_chains_six_ops(device_runs: dict[str, Any]) -> None:
    for ins in _device(device_runs, "naive_rmsnorm"):
        copy = only(ins, "host_device_copy")
        assert copy.evidence.ops == ("aten::add", "aten::copy_") and copy.evidence.calls_per_step == 1
        assert "host→device" in copy.title and "0-dim" in copy.evidence.detail
        assert copy.evidence.us_per_step == pytest.approx(5.0)  # one 5 µs fake copy per step
        assert only(ins, "unfused_chain").evidence.ops == NAIVE_CHAIN
        # The eps copy is reported once, as a copy, not again as a conversion.
        assert "dtype_conversion" not in ins.kinds()
        assert all(f.docs == f"{GUIDE_URL}#{f.kind}" and f.docs.startswith("docs/insights.md#") for f in ins)


@pytest.mark.slow
def test_device_hidden_syncs(device_runs: dict[str, Any]) -> None:
    for ins in _device(device_runs, "syncs"):
        syncs = {f.evidence.ops[0] for f in ins.of_kind("hidden_sync")}
        assert syncs == {"aten::item", "aten::nonzero"}  # _local_scalar_dense is item's own, not counted twice


@pytest.mark.slow
def test_device_idle_without_cpu_bound(device_runs: dict[str, Any]) -> None:
    for ins in _device(device_runs, "python_between_steps"):
        idle = only(ins, "idle_device")
        assert idle.evidence.share_of_step is not None and idle.evidence.share_of_step >= 0.5
        assert "largest gaps" in idle.evidence.detail
        assert "cpu_bound" not in ins.kinds()  # the host is idle too: it sleeps, it does not launch


@pytest.mark.slow
def test_device_cpu_bound(device_runs: dict[str, Any]) -> None:
    for ins in _device(device_runs, "many_tiny_ops"):
        bound = only(ins, "cpu_bound")
        assert bound.evidence.calls_per_step == 30 and ins.bound == "cpu"
        assert ins.host_op_us is not None and ins.device_busy_us is not None
        assert ins.host_op_us > ins.device_busy_us
        assert "idle_device" in ins.kinds() and "unfused_chain" in ins.kinds()


@pytest.mark.slow
def test_device_explicit_conversion_is_not_a_copy(device_runs: dict[str, Any]) -> None:
    for ins in _device(device_runs, "to_double"):
        assert only(ins, "dtype_conversion").evidence.ops[0] == "aten::to"
        assert "host_device_copy" not in ins.kinds() and ins.bound == "device"


@pytest.mark.slow
@pytest.mark.parametrize("clean", ["fused_rmsnorm", "compiled_mlp"])
def test_device_clean_workloads_trigger_no_device_finding(device_runs: dict[str, Any], clean: str) -> None:
    for ins in _device(device_runs, clean):
        assert not DEVICE_SIDE & set(ins.kinds()), ins
        assert ins.bound == "device"


@pytest.mark.slow
def test_device_compare_naive_copies_and_chain_disappear_when_fused(device_runs: dict[str, Any]) -> None:
    differ = device_runs["differ"]
    assert {"host_device_copy", "unfused_chain"} <= set(differ["naive"])
    assert not {"host_device_copy", "unfused_chain"} & set(differ["torch.rms_norm"])
    assert "Findings that differ between variants" in device_runs["text"]
    naive = device_runs["naive"]
    assert "[host_device_copy] aten::add copies data host→device" in naive
    assert "[unfused_chain] 6 elementwise ops" in naive


# -- the engine on hand-built timelines: producer spellings a CPU cannot record --------------


def _step(*events: HostEvent, start: int = 0, end: int = 100_000) -> tuple[HostEvent, ...]:
    return (HostEvent("ProfilerStep#1", start, end, category="step"), *events)


def test_cuda_memcpy_names_direction_and_cause() -> None:
    host = _step(
        HostEvent("aten::to", 10_000, 40_000, ext_id=1),
        HostEvent("aten::_to_copy", 11_000, 39_000, ext_id=2),
        HostEvent("aten::copy_", 12_000, 38_000, ext_id=3),
        HostEvent("cudaMemcpyAsync", 13_000, 30_000, category="runtime", ext_id=3, correlation=90),
        HostEvent("aten::mm", 50_000, 60_000, ext_id=4),
    )
    device = (
        DeviceEvent("Memcpy HtoD (Pageable -> Device)", 20_000, 45_000, "memcpy", ext_id=3, correlation=90),
        DeviceEvent("gemm_kernel", 61_000, 99_000, ext_id=4),
    )
    ins = analyze(Timeline(host, device, "cuda", "CUDA"))
    copy = only(ins, "host_device_copy")
    assert copy.title.startswith("aten::to copies data host→device")
    assert copy.evidence.us_per_step == pytest.approx(25.0)
    assert "dtype_conversion" not in ins.kinds()


@pytest.mark.parametrize("shapes", [True, False])
def test_autocast_cast_on_the_device_is_autocasts_not_a_copy(shapes: bool) -> None:
    recorded = {"input_shapes": ((4096, 4096), (4096, 4096)), "input_dtypes": ("c10::Half", "float")}
    host = _step(
        HostEvent("aten::linear", 1_000, 90_000, ext_id=1),
        HostEvent("aten::to", 2_000, 40_000, ext_id=2),
        HostEvent("aten::_to_copy", 3_000, 39_000, ext_id=3),
        HostEvent("aten::copy_", 4_000, 38_000, ext_id=4, **(recorded if shapes else {})),
        HostEvent("aten::mm", 41_000, 80_000, ext_id=5),
    )
    device = (DeviceEvent("cast_kernel", 10_000, 30_000, ext_id=4), DeviceEvent("gemm", 81_000, 99_000, ext_id=5))
    ins = analyze(Timeline(host, device, "cuda", "CUDA"))
    assert "host_device_copy" not in ins.kinds()
    if not shapes:
        # Without dtypes a cast, a move and a number's promotion look alike: no claim, and a note says what tells.
        assert "dtype_conversion" not in ins.kinds()
        assert any("aten::linear" in n and "record_shapes=True would tell" in n for n in ins.notes)
        return
    # float32 → float16 inside a matmul: autocast's own cast, named in a note, not a finding.
    assert "dtype_conversion" not in ins.kinds()
    assert any("come from autocast" in n for n in ins.notes)


def test_copy_to_the_host_is_a_copy_and_a_sync() -> None:
    host = _step(
        HostEvent("aten::mm", 1_000, 5_000, ext_id=1),
        HostEvent("aten::to", 6_000, 60_000, ext_id=2),
        HostEvent("aten::_to_copy", 7_000, 59_000, ext_id=3),
        HostEvent("aten::copy_", 8_000, 58_000, ext_id=4),
        HostEvent("cudaMemcpyAsync", 9_000, 57_000, category="runtime", ext_id=4, correlation=50),
    )
    device = (
        DeviceEvent("gemm", 5_000, 50_000, ext_id=1),
        DeviceEvent("Memcpy DtoH (Device -> Pageable)", 50_000, 56_000, "memcpy", correlation=50),
    )
    ins = analyze(Timeline(host, device, "cuda", "CUDA"))
    assert only(ins, "host_device_copy").title == "aten::to copies data device→host in every step"
    sync = only(ins, "hidden_sync")
    assert sync.evidence.ops == ("aten::to", "aten::copy_") and "device→host copy" in sync.evidence.detail


def test_runtime_synchronize_inside_the_step_but_not_the_loops_own() -> None:
    host = _step(
        HostEvent("aten::add", 1_000, 5_000),
        HostEvent("cudaStreamSynchronize", 6_000, 30_000, category="runtime"),
        HostEvent("aten::mul", 31_000, 35_000),
        HostEvent("cudaDeviceSynchronize", 90_000, 99_000, category="runtime"),  # the step's own sync
    )
    ins = analyze(Timeline(host, (DeviceEvent("k", 2_000, 80_000),), "cuda", "CUDA"))
    sync = only(ins, "hidden_sync")
    assert sync.evidence.ops == ("cudaStreamSynchronize",) and sync.evidence.us_per_step == pytest.approx(24.0)


def test_device_backend_without_device_time_skips_device_findings_with_a_note() -> None:
    host = _step(*(HostEvent("aten::relu", 1_000 + i * 3_000, 3_000 + i * 3_000) for i in range(20)))
    ins = analyze(Timeline(host, (), "neuron", "NEURON"))
    assert not {"idle_device", "cpu_bound"} & set(ins.kinds())
    assert any("no NEURON time" in n and "not guessed" in n for n in ins.notes)
    assert ins.bound == "unknown" and ins.device_busy_us is None
    assert "unfused_chain" in ins.kinds()  # read from host ops: still found


def test_attention_and_bias_add_chains_name_their_fused_op() -> None:
    names = ["aten::bmm", "aten::div", "aten::softmax", "aten::bmm", "aten::mm", "aten::add"]
    shapes = [((8, 4, 16), (8, 16, 4)), ((8, 4, 4), ()), ((8, 4, 4), ()), ((8, 4, 4), (8, 4, 16))]
    shapes += [((32, 16), (16, 64)), ((32, 64), (64,))]  # mm (32, 64), then a bias vector of its last dim
    host = _step(
        *(
            HostEvent(n, 1_000 + i * 10_000, 9_000 + i * 10_000, input_shapes=shape)
            for i, (n, shape) in enumerate(zip(names, shapes))
        )
    )
    chains = analyze(Timeline(host)).of_kind("unfused_chain")
    suggestions = {f.evidence.ops: f.suggestion for f in chains}
    assert len(chains) == 2
    assert "addmm" in suggestions[("aten::mm", "aten::add")]
    assert "scaled_dot_product_attention" in suggestions[("aten::bmm", "aten::div", "aten::softmax", "aten::bmm")]
    host = _step(
        *(
            HostEvent(n, 1_000 + i * 10_000, 9_000 + i * 10_000)
            for i, n in enumerate(["aten::bmm", "aten::div", "aten::masked_fill", "aten::softmax", "aten::bmm"])
        )
    )
    (attn,) = analyze(Timeline(host)).of_kind("unfused_chain")
    assert "scaled_dot_product_attention" in attn.suggestion


@pytest.mark.parametrize(
    ("matmul", "add", "why"),
    [
        (HostEvent("aten::mm", 1_000, 9_000, input_shapes=((32, 16), (16, 64))), ((32, 64), (32, 64)), "residual"),
        (HostEvent("aten::mm", 1_000, 9_000), None, "no shapes: a bias and a residual look alike"),
        (
            HostEvent("aten::linear", 1_000, 9_000, input_shapes=((32, 16), (64, 16), (64,))),
            ((32, 64), (64,)),
            "the linear has a bias of its own",
        ),
    ],
)
def test_an_add_after_a_matmul_is_a_bias_add_only_when_the_shapes_say_so(
    matmul: HostEvent, add: Optional[tuple[tuple[int, ...], ...]], why: str
) -> None:
    # Llama's `hidden_states = residual + hidden_states` after a bias-less o_proj was called a bias add.
    host = _step(matmul, HostEvent("aten::add", 11_000, 19_000, input_shapes=add))
    chains = analyze(Timeline(host)).of_kind("unfused_chain")
    assert not chains, why


def test_a_matmul_adds_a_bias_of_its_own_only_when_an_op_under_it_does() -> None:
    add = HostEvent("aten::add", 11_000, 19_000, input_shapes=((32, 64), (64,)))
    # nn.Linear(bias=True) recorded without its bias's shape: the addmm under it adds the bias.
    linear = HostEvent("aten::linear", 1_000, 9_000, input_shapes=((32, 16), (64, 16)))
    host = _step(linear, HostEvent("aten::addmm", 2_000, 8_000), add)
    assert not analyze(Timeline(host)).of_kind("unfused_chain")
    # Nothing under the matmul adds one (the matmul is not its own child).
    host = _step(HostEvent("aten::baddbmm", 1_000, 9_000, input_shapes=((32, 16), (16, 64))), add)
    (bias,) = analyze(Timeline(host)).of_kind("unfused_chain")
    assert bias.evidence.ops == ("aten::baddbmm", "aten::add")


def test_a_trace_without_steps_is_read_as_one_step() -> None:
    ins = analyze(Timeline(tuple(HostEvent(n, i * 1_000, i * 1_000 + 900) for i, n in enumerate(NAIVE_CHAIN))))
    assert ins.steps == 1 and "unfused_chain" in ins.kinds()
    assert any("no ProfilerStep" in n for n in ins.notes)


def test_empty_and_wrong_inputs() -> None:
    ins = analyze(Timeline(()))
    assert len(ins) == 0 and "nothing to flag" in str(ins)
    with pytest.raises(TypeError, match="Timeline"):
        analyze([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown finding kind"):
        Finding("slow", "t", Evidence(()), None, "s")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not neuronprof insights"):
        Insights.from_json('{"schema": "neuronprof.table/1"}')
    with pytest.raises(ValueError, match="not JSON"):
        Insights.from_json("{")


def test_advise_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert analysis_main(["advise", str(tmp_path / "missing.json")]) == 2
    assert "neuronprof advise: error:" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a"}]}')
    assert analysis_main(["advise", str(bad)]) == 2
    assert "advise" in capsys.readouterr().err
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 5, "dur": -1}]}')
    assert analysis_main(["advise", str(bad)]) == 2
    assert "negative duration" in capsys.readouterr().err


def test_advise_renders_text_and_markdown(tmp_path: Path, xw: Any, capsys: pytest.CaptureFixture[str]) -> None:
    x, w = xw
    with neuronprof.session(output_dir=tmp_path) as s:
        for _ in s.steps():
            rmsnorm_naive(x, w)
    trace = s.export(tmp_path / "t.json.gz")
    assert analysis_main(["advise", str(trace)]) == 0
    text = capsys.readouterr().out
    # Which finding comes first depends on the measured times; the chain is among them.
    assert re.search(r"^\d+\. \[unfused_chain\]", text, re.MULTILINE) and f"see: {GUIDE_URL}#unfused_chain" in text
    assert "'Reading the findings' → Unfused elementwise chains" in text
    assert analysis_main(["advise", str(trace), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert f"({GUIDE_URL}#unfused_chain)" in md and md.startswith("**")


@pytest.mark.slow
def test_advise_never_imports_torch(tmp_path: Path, xw: Any) -> None:
    x, w = xw
    with neuronprof.session(output_dir=tmp_path) as s:
        for _ in s.steps():
            rmsnorm_naive(x, w)
    trace = s.export(tmp_path / "t.json")
    code = f"""
        import sys
        class _Block:
            def find_spec(self, name, *a):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked")
        sys.meta_path.insert(0, _Block())
        from neuronprof.cli import main
        assert main(["advise", {str(trace)!r}]) == 0
        assert "torch" not in sys.modules
    """
    src = str(Path(__file__).resolve().parents[1] / "src")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": src, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[unfused_chain]" in proc.stdout


# -- the model ------------------------------------------------------------------------------

_text = st.text(max_size=20)
_num = st.one_of(st.none(), st.floats(min_value=0, max_value=1e9, allow_nan=False))
_findings = st.builds(
    Finding,
    kind=st.sampled_from(FINDING_KINDS),
    title=_text,
    evidence=st.builds(
        Evidence,
        ops=st.lists(_text, max_size=4).map(tuple),
        calls_per_step=_num,
        us_per_step=_num,
        share_of_step=st.one_of(st.none(), st.floats(0, 1)),
        detail=_text,
    ),
    estimated_us=_num,
    suggestion=_text,
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(findings=st.lists(_findings, max_size=6), notes=st.lists(_text, max_size=3))
def test_insights_json_round_trip_and_order(findings: list[Finding], notes: list[str]) -> None:
    ins = Insights(tuple(findings), backend="neuron", device_label="NEURON", steps=3, notes=tuple(notes))
    assert Insights.from_json(ins.to_json()) == ins
    stakes = [f.estimated_us for f in ins]
    known = [v for v in stakes if v is not None]
    assert known == sorted(known, reverse=True)
    assert stakes[len(known) :] == [None] * (len(stakes) - len(known))  # no estimate: listed last
    assert str(ins).count(f"see: {GUIDE_URL}#") == len(findings)
    json.loads(ins.to_json())


def test_every_kind_has_its_section_in_the_guide() -> None:
    guide = (Path(__file__).resolve().parents[1] / "docs" / "insights.md").read_text(encoding="utf-8")
    for kind in FINDING_KINDS:
        assert f"{{#{kind}}}" in guide, f"docs/insights.md has no section for {kind}"


# -- the offline feeder reads exactly what the engine was given -------------------------------

_OPS = ["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::relu", "aten::mm", "aten::item"]
_CATS = {
    "op": "cpu_op",
    "runtime": "cuda_runtime",
    "step": "user_annotation",
    "annotation": "user_annotation",
    "python": "python_function",
    "other": "other",
}


@st.composite
def _timelines(draw: Any) -> Timeline:
    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    t = 1_000
    dev_t = 0
    ext = 1
    for step in range(draw(st.integers(1, 3))):
        start = t
        for _ in range(draw(st.integers(0, 8))):
            name = draw(st.sampled_from([*_OPS, "copy"]))
            dur = draw(st.integers(2_000, 40_000))
            op_ext = ext
            ext += 1
            if name == "copy":
                host.append(HostEvent("aten::to", t, t + dur, ext_id=op_ext))
                host.append(HostEvent("aten::_to_copy", t + 100, t + dur - 100, ext_id=ext))
                inner = ext + 1
                ext += 2
                host.append(
                    HostEvent(
                        "aten::copy_",
                        t + 200,
                        t + dur - 200,
                        ext_id=inner,
                        input_shapes=((4,), draw(st.sampled_from([(), (4,)]))),
                        input_dtypes=("float", draw(st.sampled_from(["float", "double"]))),
                    )
                )
                op_ext, launch_at = inner, t + 300
            else:
                host.append(HostEvent(name, t, t + dur, ext_id=op_ext))
                launch_at = t + 100
            if draw(st.booleans()):
                corr = 100_000 + op_ext
                host.append(
                    HostEvent(
                        "cudaLaunchKernel",
                        launch_at,
                        launch_at + 50,
                        category="runtime",
                        ext_id=op_ext,
                        correlation=corr,
                    )
                )
                dev_t = max(dev_t, launch_at + 1_000) + draw(st.integers(0, 20_000))
                kdur = draw(st.integers(500, 60_000))
                cat = "memcpy" if name == "copy" and draw(st.booleans()) else "kernel"
                kname = "Memcpy HtoD (Pageable -> Device)" if cat == "memcpy" else f"k_{name}"
                device.append(DeviceEvent(kname, dev_t, dev_t + kdur, cat, ext_id=op_ext, correlation=corr))
                dev_t += kdur
            t += dur + draw(st.integers(0, 10_000))
        host.append(HostEvent(f"ProfilerStep#{step}", start, t + 500, category="step"))
        t += 1_000
    label = draw(st.sampled_from([None, "CUDA"])) if not device else "CUDA"
    return Timeline(tuple(host), tuple(device), "cuda" if label else "cpu", label)


def _write_chrome(tl: Timeline, path: Path) -> None:
    events: list[dict[str, Any]] = []
    for h in tl.host:
        args: dict[str, Any] = {}
        if h.ext_id is not None:
            args["External id"] = h.ext_id
        if h.correlation is not None:
            args["correlation"] = h.correlation
        if h.input_shapes is not None:
            args["Input Dims"] = [list(s) for s in h.input_shapes]
        if h.input_dtypes is not None:
            args["Input type"] = list(h.input_dtypes)
        events.append(
            {
                "ph": "X",
                "cat": _CATS[h.category],
                "name": h.name,
                "pid": 1,
                "tid": 1,
                "ts": h.start_ns / 1000,
                "dur": (h.end_ns - h.start_ns) / 1000,
                "args": args,
            }
        )
    for d in tl.device:
        events.append(
            {
                "ph": "X",
                "cat": "gpu_memcpy" if d.category == "memcpy" else "kernel",
                "name": d.name,
                "pid": 0,
                "tid": 7,
                "ts": d.start_ns / 1000,
                "dur": (d.end_ns - d.start_ns) / 1000,
                "args": {"External id": d.ext_id, "correlation": d.correlation},
            }
        )
    meta = {"backend": tl.backend, "device_label": tl.device_label}
    path.write_text(json.dumps({"traceEvents": events, "neuronprof": meta}), encoding="utf-8")


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(tl=_timelines())
def test_offline_feeder_gives_the_engine_the_same_profile(
    tl: Timeline, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("prop") / "trace.json"
    _write_chrome(tl, path)
    live = analyze(tl)
    offline = advise_cli(path)
    assert offline.findings == live.findings
    assert (offline.steps, offline.bound, offline.step_us, offline.device_busy_us) == (
        live.steps,
        live.bound,
        live.step_us,
        live.device_busy_us,
    )
    for f in live:
        assert f.estimated_us is None or f.estimated_us >= 0
        share = f.evidence.share_of_step
        assert share is None or 0 <= share <= 1
        assert f.estimated_us is None or live.step_us is not None and f.estimated_us <= live.step_us


def test_every_cycle_and_every_option(tmp_path: Path, xw: Any) -> None:
    # Python frames (with_stack) are transparent; memory events are not ops; every cycle counts.
    x, w = xw
    with neuronprof.session(
        output_dir=tmp_path, wait=0, warmup=1, active=1, repeat=2, with_stack=True, profile_memory=True
    ) as s:
        for _ in s.steps():
            rmsnorm_naive(x, w)
    ins = s.insights()
    assert ins.steps == 2
    assert only(ins, "unfused_chain").evidence.ops == NAIVE_CHAIN
    assert only(ins, "unfused_chain").evidence.calls_per_step == 1


# -- review of the first version: each rule's false positives and overcounts ---------------------


def _both(tl: Timeline, tmp_path: Path) -> list[Insights]:
    """The engine on a hand-built timeline, and ``neuronprof advise`` on it written as a Chrome trace."""
    path = tmp_path / "trace.json"
    _write_chrome(tl, path)
    return [analyze(tl), advise_cli(path)]


@st.composite
def _compiling_steps(draw: Any) -> Timeline:
    """Steps that recompile, with torch.compile's nested ``(dynamo_timed)`` ranges inside them."""
    host: list[HostEvent] = []
    t = 0
    for step in range(draw(st.integers(1, 3))):
        start = t
        t += draw(st.integers(0, 5_000))
        for _ in range(draw(st.integers(1, 3))):
            outer = draw(st.integers(1_000, 50_000))
            host.append(HostEvent("compile_attempt_0", t, t + outer, category="annotation"))
            # The same work once more, nested: dynamo's timer around it.
            host.append(HostEvent("compile_attempt_0 (dynamo_timed)", t + 1, t + outer - 1, category="annotation"))
            inner = draw(st.integers(0, outer - 2))
            host.append(HostEvent("build_guards", t + 1, t + 1 + inner, category="annotation"))
            host.append(HostEvent("build_guards (dynamo_timed)", t + 1, t + 1 + inner, category="annotation"))
            t += outer + draw(st.integers(0, 3_000))
        host.append(HostEvent(f"Torch-Compiled Region: 0/{step + 1}", t, t + 2_000, category="op"))
        t += 2_000
        host.append(HostEvent(f"ProfilerStep#{step}", start, t, category="step"))
        t += 100
    return Timeline(tuple(host))


@settings(max_examples=40, deadline=None)
@given(tl=_compiling_steps())
def test_no_finding_stakes_more_than_the_step(tl: Timeline) -> None:
    ins = analyze(tl)
    rec = only(ins, "recompilation")
    assert rec.estimated_us is not None and ins.step_us is not None
    for f in ins:
        assert f.estimated_us is None or f.estimated_us <= ins.step_us, f
        assert f.evidence.share_of_step is None or f.evidence.share_of_step <= 1


def test_recompilation_is_the_union_of_the_compile_ranges(tmp_path: Path) -> None:
    host = (
        HostEvent("ProfilerStep#0", 0, 100_000, category="step"),
        HostEvent("compile_attempt_0", 0, 60_000, category="annotation"),
        HostEvent("compile_attempt_0 (dynamo_timed)", 0, 60_000, category="annotation"),
        HostEvent("build_guards", 10_000, 20_000, category="annotation"),
        HostEvent("build_guards (dynamo_timed)", 10_000, 20_000, category="annotation"),
        HostEvent("Torch-Compiled Region: 0/1", 60_000, 90_000, category="op"),
        HostEvent("aten::sin", 61_000, 89_000, category="op"),
    )
    for ins in _both(Timeline(host), tmp_path):
        assert only(ins, "recompilation").estimated_us == pytest.approx(60.0)  # not 140 µs: nested ranges


def test_a_recompilation_before_the_steps_is_not_estimated(tmp_path: Path) -> None:
    host = (
        HostEvent("ProfilerStep#0", 0, 100_000, category="step"),
        HostEvent("Torch-Compiled Region: 0/1", 1_000, 90_000, category="op"),
        HostEvent("TorchDynamo Cache Lookup", 1_000, 5_000, category="op"),  # the guard check of every call
        HostEvent("aten::sin", 6_000, 89_000, category="op"),
    )
    for ins in _both(Timeline(host), tmp_path):
        rec = only(ins, "recompilation")
        assert rec.estimated_us is None
        assert "time at stake not estimated" in str(ins) and "~0.0 µs" not in str(ins)


@pytest.mark.slow
def test_optimizer_internals_are_not_the_callers_chains_or_conversions(tmp_path: Path) -> None:
    m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16))  # 4 parameters
    x = torch.randn(8, 16)
    for opt in (torch.optim.SGD(m.parameters(), lr=0.01), torch.optim.Adam(m.parameters(), foreach=False)):

        def train(opt: torch.optim.Optimizer = opt) -> None:
            opt.zero_grad()
            m(x).sum().backward()
            opt.step()

        for ins in live_and_offline(tmp_path / type(opt).__name__, train):
            assert not {"unfused_chain", "dtype_conversion"} & set(ins.kinds()), ins
            assert "torch.rms_norm" not in str(ins)


@pytest.mark.slow
def test_independent_ops_on_other_tensors_are_not_a_chain(tmp_path: Path) -> None:
    a, b, c = torch.randn(64, 64), torch.randn(32, 16), torch.randn(8)
    for ins in live_and_offline(tmp_path, lambda: (a.relu(), b.sigmoid(), c.tanh())):
        assert "unfused_chain" not in ins.kinds(), ins
    # The same ops, each on the previous one's output: a chain.
    for ins in live_and_offline(tmp_path / "dep", lambda: a.relu().sigmoid().tanh()):
        assert only(ins, "unfused_chain").evidence.ops == ("aten::relu", "aten::sigmoid", "aten::tanh")


@pytest.mark.slow
def test_python_scalars_are_not_conversions(tmp_path: Path) -> None:
    x = torch.randn(64, 64)
    w = torch.randn(64, dtype=torch.float64)
    for ins in live_and_offline(tmp_path, lambda: (x * 3, x.clone().add_(1.0), x * 0.5)):
        assert "dtype_conversion" not in ins.kinds(), ins
    # A float64 tensor (not a number) meeting float32 data is still reported.
    for ins in live_and_offline(tmp_path / "f64", lambda: (x * w).sum()):
        conv = only(ins, "dtype_conversion")
        assert "torch.float32 → torch.float64" in conv.evidence.detail
        assert "converts one of its inputs to another dtype" in conv.evidence.detail


def test_minor_findings_come_after_the_dominant_op(tmp_path: Path) -> None:
    host = [HostEvent("ProfilerStep#0", 0, 1_000_000, category="step"), HostEvent("aten::mm", 0, 900_000)]
    # A tiny unfused chain: 3 µs at stake in a 1 ms step, under MIN_SHARE.
    for i, name in enumerate(("aten::exp", "aten::mul", "aten::relu")):
        host.append(HostEvent(name, 900_000 + i * 3_000, 902_000 + i * 3_000))
    for ins in _both(Timeline(tuple(host)), tmp_path):
        assert ins.kinds() == ["dominant_op", "unfused_chain"]
        assert [f.kind for f in ins.minor()] == ["unfused_chain"]
        text = str(ins)
        assert (
            text.index("[dominant_op]")
            < text.index("minor (under 1% of the step each):")
            < text.index("[unfused_chain]")
        )
        assert "Minor (under 1%" in ins.to_markdown()


def test_dominant_op_names_the_compiled_region_not_its_machinery(tmp_path: Path) -> None:
    host = (
        HostEvent("ProfilerStep#0", 0, 100_000, category="step"),
        HostEvent("Torch-Compiled Region: 0/0", 1_000, 95_000, category="op"),
        HostEvent("PythonDispatchMode", 2_000, 90_000, category="op"),
        HostEvent("## Call CompiledFxGraph fabc123 ##", 3_000, 89_000, category="annotation"),
        HostEvent("aten::addmm", 10_000, 20_000, category="op"),
    )
    for ins in _both(Timeline(host), tmp_path):
        top = only(ins, "dominant_op")
        assert top.evidence.ops == ("Torch-Compiled Region: 0/0",), top
        assert "PythonDispatchMode" not in str(ins) and "CompiledFxGraph" not in str(ins)


def test_long_chains_are_compressed_in_print_and_kept_in_json(tmp_path: Path) -> None:
    x = torch.randn(8)

    def adds() -> None:
        y = x
        for _ in range(40):
            y = y + 1

    for ins in live_and_offline(tmp_path, adds):
        chain = only(ins, "unfused_chain")
        assert chain.evidence.ops == ("aten::add",) * 40  # full detail in JSON
        assert "aten::add ×40" in str(ins) and "aten::add → aten::add" not in str(ins)
        assert "aten::add ×40" in ins.to_markdown().replace("\\", "")


def test_titles_say_in_how_many_steps(tmp_path: Path) -> None:
    host = (
        HostEvent("ProfilerStep#0", 0, 100_000, category="step"),
        HostEvent("aten::to", 1_000, 40_000, ext_id=1),
        HostEvent("aten::_to_copy", 1_100, 39_000, ext_id=2),
        HostEvent("aten::copy_", 1_200, 38_000, ext_id=3),
        HostEvent("ProfilerStep#1", 100_000, 200_000, category="step"),
        HostEvent("aten::relu", 101_000, 140_000, ext_id=4),
    )
    device = (
        DeviceEvent("Memcpy HtoD (Pageable -> Device)", 2_000, 30_000, "memcpy", ext_id=3),
        DeviceEvent("relu_kernel", 110_000, 150_000, ext_id=4),
    )
    for ins in _both(Timeline(host, device, "cuda", "CUDA"), tmp_path):
        copy = only(ins, "host_device_copy")
        assert copy.title.endswith("in 1 of 2 steps") and "every step" not in copy.title
        assert copy.evidence.calls_per_step == 0.5


def _evidence(f: Finding) -> str:
    from neuronprof.analysis.insights._findings import _evidence_text

    return _evidence_text(f.evidence, f.kind)


def test_idle_gaps_are_listed_once_per_pair_with_their_step(tmp_path: Path) -> None:
    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    for step in range(3):
        t0 = step * 1_000_000
        host.append(HostEvent(f"ProfilerStep#{step}", t0, t0 + 1_000_000, category="step"))
        for i, name in enumerate(("aten::relu", "aten::exp")):
            ext = step * 10 + i
            host.append(HostEvent(name, t0 + i * 500_000, t0 + i * 500_000 + 1_000, ext_id=ext))
            device.append(DeviceEvent(f"k_{name}", t0 + i * 500_000 + 10, t0 + i * 500_000 + 1_010, ext_id=ext))
    for ins in _both(Timeline(tuple(host), tuple(device), "cuda", "CUDA"), tmp_path):
        idle = only(ins, "idle_device")
        assert idle.evidence.detail.count("between aten::relu and aten::exp") == 1
        assert "(in ProfilerStep#" in idle.evidence.detail
        assert idle.evidence.ops == ("aten::relu", "aten::exp") and "aten::relu, aten::exp" in _evidence(idle)


def test_correlation_and_external_id_0_are_ids(tmp_path: Path) -> None:
    host = (
        HostEvent("ProfilerStep#0", 0, 100_000, category="step"),
        HostEvent("aten::to", 1_000, 40_000, ext_id=0),
        HostEvent("aten::_to_copy", 1_100, 39_000, ext_id=1),
        HostEvent("aten::copy_", 1_200, 38_000, ext_id=2),
        HostEvent("cudaMemcpyAsync", 1_300, 2_000, category="runtime", ext_id=2, correlation=0),
    )
    device = (DeviceEvent("Memcpy HtoD (Pageable -> Device)", 3_000, 30_000, "memcpy", ext_id=2, correlation=0),)
    tl = Timeline(host, device, "cuda", "CUDA")
    for ins in _both(tl, tmp_path):
        assert not any("carry no link" in n for n in ins.notes), ins
        assert only(ins, "host_device_copy").evidence.us_per_step == pytest.approx(27.0)
    # The table reader links by correlation 0 too: the memcpy's time is the copy op's.
    from neuronprof.analysis import load_trace

    trace = load_trace(tmp_path / "trace.json")
    copy = next(op for op in trace.ops if op.name == "aten::copy_")
    assert copy.device_total_us == pytest.approx(27.0)


def test_advise_leaves_out_what_the_table_reader_leaves_out(tmp_path: Path) -> None:
    """torch_npu's "Overlap Analysis" spans and the XLA viewer's "Steps"/"XLA Modules" lanes are not events."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 5, "args": {"name": "Overlap Analysis"}},
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/device:TPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "Steps"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 2, "args": {"name": "XLA Modules"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 3, "args": {"name": "XLA Ops"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 120, "dur": 100},
        # Derived spans covering the whole step: they would hide the idle device.
        {"ph": "X", "name": "Computing", "pid": 5, "tid": 0, "ts": 0, "dur": 1000},
        {"ph": "X", "name": "train_step", "pid": 7, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "name": "jit_step", "pid": 7, "tid": 2, "ts": 0, "dur": 1000},
        {"ph": "X", "name": "fusion.1", "pid": 7, "tid": 3, "ts": 300, "dur": 50},
    ]
    path = tmp_path / "xla.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    ins = advise_cli(path)
    assert ins.device_busy_us == pytest.approx(50.0)  # the op lane only
    assert "idle_device" in ins.kinds()
    assert "Computing" not in str(ins)


@pytest.mark.slow
def test_adding_a_number_to_a_matmul_is_not_a_bias_add(tmp_path: Path) -> None:
    a = torch.randn(64, 64)
    bias = torch.randn(64)
    for ins in live_and_offline(tmp_path, lambda: (a @ a).add_(1.0)):
        assert "unfused_chain" not in ins.kinds(), ins
    for ins in live_and_offline(tmp_path / "bias", lambda: torch.mm(a, a) + bias):
        assert "addmm" in only(ins, "unfused_chain").suggestion


def test_a_graph_break_with_nothing_between_is_not_estimated(tmp_path: Path) -> None:
    host = (
        HostEvent("ProfilerStep#0", 0, 100_000, category="step"),
        HostEvent("Torch-Compiled Region: 0/0", 1_000, 40_000, category="op"),
        HostEvent("aten::relu", 2_000, 39_000, category="op"),
        HostEvent("Torch-Compiled Region: 1/0", 50_000, 90_000, category="op"),
        HostEvent("aten::mul", 51_000, 89_000, category="op"),
    )
    for ins in _both(Timeline(host), tmp_path):
        assert only(ins, "graph_break").estimated_us is None
        assert "~0.0 µs" not in str(ins) and "time at stake not estimated" in str(ins)


@pytest.mark.parametrize("origin", [0, -1_000_000, 10**15])
def test_the_findings_do_not_depend_on_the_clocks_origin(origin: int) -> None:
    # An unfused chain with its kernels and the gaps between them, on an origin after every event too.
    host = [HostEvent("ProfilerStep#0", 0, 100_000, category="step")]
    device = []
    for i, name in enumerate(["aten::mul", "aten::add", "aten::relu", "aten::mul"]):
        host.append(HostEvent(name, 1_000 + i * 1_000, 1_500 + i * 1_000, ext_id=i + 1))
        device.append(DeviceEvent("k_" + name[6:], 20_000 + i * 3_000, 21_000 + i * 3_000, ext_id=i + 1))

    def shifted(by: int) -> Timeline:
        moved = tuple(dataclasses.replace(e, start_ns=e.start_ns + by, end_ns=e.end_ns + by) for e in host)
        work = tuple(dataclasses.replace(d, start_ns=d.start_ns + by, end_ns=d.end_ns + by) for d in device)
        return Timeline(moved, work, "cuda", "CUDA")

    assert analyze(shifted(origin)).to_json() == analyze(shifted(0)).to_json()
    assert "6.0 µs/step of gaps" in only(analyze(shifted(origin)), "unfused_chain").evidence.detail


def test_fallbacks_without_steps_come_in_the_order_they_ran() -> None:
    # No ProfilerStep: the whole recording is the step, its ops in the order they started, threads interleaved.
    host = (
        HostEvent("model.py(1): a", 5_000, 9_000, "1", "python"),
        HostEvent("aten::foo", 5_100, 6_100, "1"),
        HostEvent("aten::_to_cpu", 5_200, 5_300, "1"),
        HostEvent("model.py(1): b", 0, 4_000, "2", "python"),
        HostEvent("aten::bar", 100, 1_100, "2"),
        HostEvent("aten::_to_cpu", 200, 300, "2"),
    )
    found = analyze(Timeline(host, (), "cuda", "CUDA")).of_kind("cpu_fallback")
    assert [f.evidence.ops[0] for f in found] == ["aten::bar", "aten::foo"]
