"""Roofline: FLOP/byte formulas, device peaks, bounds, the model and its plot."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_builders import op, write_trace

from neuronprof.analysis import (
    DEVICE_PEAKS,
    DevicePeak,
    NeuronProfile,
    Roofline,
    UnknownDeviceError,
    device_peak,
    dtype_size,
    op_cost,
    roofline,
)
from neuronprof.analysis.neuron import DeviceSummary
from neuronprof.cli import main as analysis_main
from neuronprof.errors import NeuronProfError

F32, BF16 = "float", "c10::BFloat16"


@pytest.mark.parametrize(
    "name, dims, dtypes, concrete, flops, nbytes",
    [
        # Element-wise with broadcasting: one FLOP per output element.
        ("aten::mul", [(4096, 4096), (4096, 1)], [F32, F32], None, 4096 * 4096, (2 * 4096 * 4096 + 4096) * 4),
        ("aten::add_", [(8, 8), ()], [BF16, "Scalar"], None, 64, 2 * 64 * 2),
        ("aten::pow", [(10,), ()], [F32, "Scalar"], None, 10, 80),
        # Reductions: one FLOP per input element; the output shrinks along dim.
        ("aten::sum", [(64, 32), (), ()], [F32, "ScalarList", "Scalar"], ["", "[-1]", "True"], 2048, (2048 + 64) * 4),
        ("aten::mean", [(64, 32)], [F32], None, 2048, (2048 + 1) * 4),
        # Matmuls: 2·M·K·N.
        ("aten::mm", [(128, 64), (64, 32)], [BF16, BF16], None, 2 * 128 * 64 * 32, (128 * 64 + 64 * 32 + 128 * 32) * 2),
        (
            "aten::addmm",
            [(32,), (128, 64), (64, 32), (), ()],
            [F32, F32, F32, "Scalar", "Scalar"],
            None,
            2 * 128 * 64 * 32,
            (32 + 128 * 64 + 64 * 32 + 128 * 32) * 4,
        ),
        ("aten::bmm", [(4, 16, 8), (4, 8, 2)], [F32, F32], None, 2 * 4 * 16 * 8 * 2, (512 + 64 + 128) * 4),
        (
            "aten::linear",
            [(2, 5, 64), (32, 64), (32,)],
            [BF16] * 3,
            None,
            2 * 10 * 64 * 32,
            (640 + 2048 + 32 + 320) * 2,
        ),
        # Attention: 2·B·H·L·S·(E + Ev).
        (
            "aten::scaled_dot_product_attention",
            [(2, 4, 128, 64)] * 3,
            [BF16] * 3,
            None,
            2 * 8 * 128 * 128 * 128,
            (3 * 2 * 4 * 128 * 64 + 2 * 4 * 128 * 64) * 2,
        ),
        # Norms and softmax.
        (
            "aten::layer_norm",
            [(16, 1024), (), (1024,), (1024,)],
            [F32, "ScalarList", F32, F32],
            None,
            8 * 16 * 1024,
            (16 * 1024 * 2 + 2048) * 4,
        ),
        (
            "aten::rms_norm",
            [(16, 1024), (), (1024,)],
            [BF16, "ScalarList", BF16],
            None,
            4 * 16 * 1024,
            (16 * 1024 * 2 + 1024) * 2,
        ),
        ("aten::_softmax", [(16, 1024), (), ()], [F32, "Scalar", "Scalar"], None, 5 * 16 * 1024, 2 * 16 * 1024 * 4),
        # Convolution: 2 · output elements · C_in/groups · kernel.
        (
            "aten::convolution",
            [(1, 3, 32, 32), (8, 3, 3, 3), (8,)],
            [F32] * 3,
            ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
            2 * 8 * 32 * 32 * 3 * 9,
            (3 * 1024 + 8 * 27 + 8 + 8 * 1024) * 4,
        ),
        # Copies move bytes and no FLOPs.
        ("aten::copy_", [(100,), (100,)], [F32, F32], None, 0, 800),
        ("aten::cat", [((10, 4), (10, 4)), ()], ["TensorList", "Scalar"], None, 0, 2 * 80 * 4),
    ],
)
def test_op_cost_formulas(name: str, dims: list, dtypes: list, concrete: Any, flops: float, nbytes: float) -> None:
    cost = op_cost(name, dims, dtypes, concrete)
    assert cost is not None
    assert (cost.flops, cost.bytes) == (pytest.approx(flops), pytest.approx(nbytes))


@pytest.mark.parametrize(
    "name, dims, dtypes",
    [
        ("aten::view", [(4, 4), ()], [F32, "ScalarList"]),  # views move nothing
        ("aten::mm", None, None),  # no shapes recorded
        ("aten::mm", [(4, 5), (6, 7)], [F32, F32]),  # shapes that do not multiply
        ("aten::mul", [(), ()], ["Scalar", "Scalar"]),  # no tensors at all
        ("my::custom_op", [(4, 4)], [F32]),
        ("aten::mm", [(4, -1), (-1, 4)], [F32, F32]),  # nonsense
    ],
)
def test_no_estimate_rather_than_a_guess(name: str, dims: Any, dtypes: Any) -> None:
    assert op_cost(name, dims, dtypes) is None


def test_dtype_sizes() -> None:
    assert [dtype_size(d) for d in ("float", "c10::BFloat16", "c10::Half", "double", "long int", "bool")] == [
        4,
        2,
        2,
        8,
        8,
        1,
    ]
    assert dtype_size("torch.bfloat16") == 2
    assert dtype_size("Scalar") is None and dtype_size("") is None


def test_presets_and_custom_peaks() -> None:
    assert {"trn1", "trn2", "h100", "h200", "a100"} <= set(DEVICE_PEAKS)
    trn2 = DEVICE_PEAKS["trn2"]
    assert trn2.flops_per_s == pytest.approx(667e12 / 4) and trn2.bytes_per_s == pytest.approx(725e9)
    assert DEVICE_PEAKS["h200"].bytes_per_s > DEVICE_PEAKS["h100"].bytes_per_s
    assert trn2.peak_for(("c10::BFloat16",)) == trn2.flops_per_s
    assert trn2.peak_for(("float", "Scalar")) == trn2.fp32_flops_per_s
    custom = device_peak("h100", peak_bw=1e12)
    assert (custom.flops_per_s, custom.bytes_per_s) == (DEVICE_PEAKS["h100"].flops_per_s, 1e12)
    assert device_peak(DevicePeak("mine", 1e12, 1e11)).ridge == 10
    with pytest.raises(ValueError, match="unknown device"):
        device_peak("v100")
    with pytest.raises(ValueError, match="positive"):
        DevicePeak("bad", 0, 1e9)
    with pytest.raises(ValueError, match="positive"):
        DevicePeak("bad", 1e12, float("inf"))


def _matmul_trace(tmp_path: Path, n: int, dtype: str = BF16) -> Path:
    # Device time on the host op, as a CUDA trace attributes its kernel.
    return write_trace(
        tmp_path / f"mm{n}.json",
        [
            op("aten::mm", 0, 100, pid=1, tid=1, External_id=5, Input_Dims=[[n, n], [n, n]], Input_type=[dtype] * 2),
            op("gemm", 10, 50, cat="kernel", pid=0, tid=7, External_id=5),
        ],
        deviceProperties=[{"name": "GPU"}],
    )


def test_large_bf16_matmul_is_compute_bound_and_small_one_memory_bound(tmp_path: Path) -> None:
    big = roofline(_matmul_trace(tmp_path, 8192), device="h100")
    assert big.time_source == "device"
    row = big.row("aten::mm")
    assert row.bound == "compute" and row.time_us == 50
    assert row.intensity == pytest.approx(2 * 8192**3 / (3 * 8192 * 8192 * 2))
    assert row.achieved_flops_per_s == pytest.approx(2 * 8192**3 / 50e-6)
    assert row.attainable_flops_per_s == DEVICE_PEAKS["h100"].flops_per_s
    assert row.pct_of_peak == pytest.approx(100 * row.achieved_flops_per_s / row.attainable_flops_per_s)
    small = roofline(_matmul_trace(tmp_path, 16), device="h100").row("aten::mm")
    assert small.bound == "memory"
    assert small.attainable_flops_per_s == pytest.approx(small.intensity * DEVICE_PEAKS["h100"].bytes_per_s)
    # FP32 inputs meet the lower FP32 roof: the same matmul becomes memory-bound at a smaller size.
    fp32 = roofline(_matmul_trace(tmp_path, 8192, F32), device="h100").row("aten::mm")
    assert fp32.peak_flops_per_s == DEVICE_PEAKS["h100"].fp32_flops_per_s


def test_recorded_flops_win_over_the_formula(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "t.json", [op("aten::mm", 0, 10, Input_Dims=[[4, 4], [4, 4]], Input_type=[F32, F32], flops=999)]
    )
    row = roofline(path, "trn2").row("aten::mm")
    assert (row.flops, row.flops_source) == (999, "trace")


def test_wrappers_are_left_out_and_said_so(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "t.json",
        [
            op("aten::linear", 0, 100, Input_Dims=[[4, 8], [8, 8], [8]], Input_type=[F32] * 3),
            op("aten::addmm", 5, 90, Input_Dims=[[8], [4, 8], [8, 8], [], []], Input_type=[F32] * 3 + ["Scalar"] * 2),
        ],
    )
    rl = roofline(path, "trn1")
    assert [r.name for r in rl.rows] == ["aten::addmm"]
    assert any("aten::linear" in n for n in rl.notes)


def test_trace_without_shapes_says_how_to_fix_it(tmp_path: Path) -> None:
    rl = roofline(write_trace(tmp_path / "t.json", [op("aten::mm", 0, 10)]), "trn2")
    assert rl.rows == () and rl.bound is None
    assert any("record_shapes=True" in n for n in rl.notes)
    assert "record_shapes=True" in rl.to_text()


def test_model_round_trips_and_renders(tmp_path: Path) -> None:
    rl = roofline(_matmul_trace(tmp_path, 1024), device="trn2")
    assert Roofline.from_json(rl.to_json()) == rl
    text = rl.to_text()
    assert "roofline on trn2" in text and "ridge point" in text and "aten::mm" in text
    assert "| aten::mm |" in rl.to_markdown()
    with pytest.raises(ValueError):
        roofline(_matmul_trace(tmp_path, 4), time_source="wall")  # type: ignore[arg-type]


@pytest.mark.slow
def test_plot_writes_png_and_svg_and_refuses_other_suffixes(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rl = roofline(_matmul_trace(tmp_path, 1024), device="trn2")
    rl.plot(tmp_path / "r.png")
    rl.plot(str(tmp_path / "r.svg"))
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert b"<svg" in (tmp_path / "r.svg").read_bytes()[:500]
    with pytest.raises(ValueError, match=".png or .svg"):
        rl.plot(tmp_path / "r.pdf")


def test_plot_without_matplotlib_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rl = roofline(_matmul_trace(tmp_path, 64), device="trn2")
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match=r"pip install neuronprof\[plot\]"):
        rl.plot(tmp_path / "r.png")


@settings(max_examples=40, deadline=None)
@given(flops=st.integers(0, 10**13), dur_us=st.integers(1, 10**7), read_share=st.floats(0, 1))
def test_trace_ops_and_neuron_counters_are_placed_by_one_formula(
    tmp_path_factory: pytest.TempPathFactory, flops: int, dur_us: int, read_share: float
) -> None:
    # A bf16 matmul with torch's own FLOP count (with_flops=True): the bytes come from its shapes.
    path = write_trace(
        tmp_path_factory.mktemp("one") / "t.json",
        [op("aten::mm", 0, dur_us, Input_Dims=[[128, 64], [64, 32]], Input_type=[BF16, BF16], flops=flops)],
    )
    (row,) = roofline(path, device="trn2", time_source="cpu").rows
    # The same FLOPs, bytes and time as Neuron's hardware counters of one NEFF (16-bit roof: no dtype).
    read = int(row.bytes * read_share)
    summary = DeviceSummary(
        key="n_1",
        label="neff",
        total_us=float(dur_us),
        hbm_read_bytes=read,
        hbm_write_bytes=int(row.bytes) - read,
        hardware_flops=float(flops),
    )
    (neff,) = NeuronProfile(summaries=(summary,)).roofline("trn2").rows
    assert neff.bound == row.bound and neff.flops_source == "counters" and row.flops_source == "trace"
    for name in (
        "intensity",
        "peak_flops_per_s",
        "attainable_flops_per_s",
        "achieved_flops_per_s",
        "achieved_bytes_per_s",
        "pct_of_peak",
    ):
        got, want = getattr(neff, name), getattr(row, name)
        assert (got is None) == (want is None) and (want is None or got == pytest.approx(want)), name
    # The formula itself: attainable under the roof; compute-bound exactly right of the ridge point.
    assert row.attainable_flops_per_s <= row.peak_flops_per_s
    assert (row.bound == "compute") == (row.intensity >= DEVICE_PEAKS["trn2"].ridge)


# -- whose peaks: the machine the run was on, or a preset named, never a silent default ------


def _gpu_trace(tmp_path: Path, name: str) -> Path:
    """A bf16 matmul with its kernel's device time, on a GPU the header names as torch does."""
    return write_trace(
        tmp_path / "gpu.json",
        [
            op("aten::mm", 0, 100, pid=1, tid=1, External_id=5, Input_Dims=[[512, 512]] * 2, Input_type=[BF16] * 2),
            op("gemm", 10, 50, cat="kernel", pid=0, tid=7, External_id=5),
        ],
        deviceProperties=[{"id": 0, "name": name}],
    )


def _cpu_trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "cpu.json", [op("aten::mm", 0, 10, Input_Dims=[[64, 64]] * 2, Input_type=[F32] * 2)])


def test_a_cpu_trace_is_refused_with_what_it_ran_on_and_how_to_name_a_preset(tmp_path: Path, capsys) -> None:
    path = _cpu_trace(tmp_path)
    with pytest.raises(UnknownDeviceError) as info:
        roofline(path)
    message = str(info.value)
    assert isinstance(info.value, NeuronProfError) and isinstance(info.value, ValueError)
    assert str(path) in message and "no device work, only CPU ops" in message and "a CPU has no peak preset" in message
    assert "device=NAME" in message and "--device NAME" in message and "peak_flops=" in message
    assert all(name in message for name in DEVICE_PEAKS)
    # The command line says the same on one line, exit status 2, and prints no table.
    assert analysis_main(["roofline", str(path), "--plot", str(tmp_path / "r.png")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "a CPU has no peak preset" in err
    assert not (tmp_path / "r.png").exists()


@pytest.mark.parametrize(
    "name, preset",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("nvidia  a100-sxm4-80gb", "a100"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
    ],
)
def test_a_trace_naming_a_known_device_is_compared_with_that_device(tmp_path: Path, name: str, preset: str) -> None:
    rl = roofline(_gpu_trace(tmp_path, name))
    assert rl.device == DEVICE_PEAKS[preset]
    assert (rl.peak_source, rl.device_label, rl.device_name) == ("run", "CUDA", name)
    assert f"device: the run's own, {name} (CUDA), with preset {preset}'s published peaks" in rl.to_text()
    assert Roofline.from_json(rl.to_json()) == rl


@pytest.mark.parametrize("name", ["NVIDIA H100 PCIe", "NVIDIA H200 NVL", "NVIDIA A100 80GB PCIe", "NVIDIA L4"])
def test_a_device_without_a_preset_is_refused_by_name(tmp_path: Path, name: str) -> None:
    # Siblings of the presets' parts have other clocks and bandwidth: no neighbour's figures.
    with pytest.raises(UnknownDeviceError, match=f"recorded on {name} \\(CUDA\\), which has no peak preset"):
        roofline(_gpu_trace(tmp_path, name))


def test_an_explicit_preset_is_honoured_and_said_to_be_a_preset(tmp_path: Path) -> None:
    on_cpu = roofline(_cpu_trace(tmp_path), device="h100")
    assert (on_cpu.device, on_cpu.peak_source) == (DEVICE_PEAKS["h100"], "preset")
    assert "device: preset h100, as asked, not the machine the run was on, which was the CPU only" in on_cpu.to_text()
    h100 = _gpu_trace(tmp_path, "NVIDIA H100 80GB HBM3")
    other = roofline(h100, device="h200")
    assert other.device == DEVICE_PEAKS["h200"] and other.peak_source == "preset"
    assert "not the machine the run was on, which was NVIDIA H100 80GB HBM3 (CUDA)" in other.to_markdown()
    same = roofline(h100, device="h100")
    assert "device: preset h100, as asked, which is the machine the run was on" in same.to_text()
    # A Neuron trace does not say which Trainium generation it ran on: no claim either way.
    neuron = write_trace(
        tmp_path / "neuron.json",
        [
            op("aten::mm", 0, 100, pid=1, tid=1, External_id=5, Input_Dims=[[64, 64]] * 2, Input_type=[BF16] * 2),
            op("nc_exec_running", 10, 50, cat="kernel", pid=0, tid=7, External_id=5),
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "NeuronCore 0"}},
        ],
    )
    with pytest.raises(UnknownDeviceError, match="which Trainium generation and logical-core size"):
        roofline(neuron)
    trn2 = roofline(neuron, device="trn2")
    assert "so whether these peaks are its own is not known" in trn2.to_text()


def test_peaks_given_by_hand_need_no_preset(tmp_path: Path) -> None:
    rl = roofline(_cpu_trace(tmp_path), peak_flops=1e12, peak_bw=1e11)
    assert (rl.device.flops_per_s, rl.device.bytes_per_s, rl.peak_source) == (1e12, 1e11, "custom")
    assert "custom peaks (peak_flops/peak_bw given); the run was on the CPU only" in rl.to_text()
    with pytest.raises(UnknownDeviceError):
        roofline(_cpu_trace(tmp_path), peak_bw=1e11)  # one peak alone still needs a device's other
    with pytest.raises(ValueError, match="positive"):
        roofline(_cpu_trace(tmp_path), peak_flops=-1.0)
    bw = roofline(_gpu_trace(tmp_path, "NVIDIA H200"), peak_bw=1e12)
    assert bw.device.flops_per_s == DEVICE_PEAKS["h200"].flops_per_s and bw.peak_source == "custom"


def test_the_command_line_takes_the_traces_own_device_and_honours_device(cuda_trace: Path, capsys) -> None:
    assert analysis_main(["roofline", str(cuda_trace)]) == 0
    assert "device: the run's own, NVIDIA H100 80GB HBM3 (CUDA)" in capsys.readouterr().out
    assert analysis_main(["roofline", str(cuda_trace), "--device", "trn2", "--format", "json"]) == 0
    data = Roofline.from_json(capsys.readouterr().out)
    assert (data.device.name, data.peak_source, data.device_name) == ("trn2", "preset", "NVIDIA H100 80GB HBM3")


def test_a_neuron_profile_needs_a_preset_named() -> None:
    summary = DeviceSummary(
        key="n_1", label="neff", total_us=10.0, hbm_read_bytes=10, hbm_write_bytes=10, hardware_flops=100.0
    )
    profile = NeuronProfile(summaries=(summary,))
    refusal = r"Neuron profile, which carries no hardware peaks \(.*\), was recorded on a NEURON device"
    with pytest.raises(UnknownDeviceError, match=refusal):
        profile.roofline()
    rl = profile.roofline("trn2")
    assert (rl.peak_source, rl.device_label) == ("preset", "NEURON")
    assert "device: preset trn2, as asked; the run was on a NEURON device whose model is not recorded" in rl.to_text()
