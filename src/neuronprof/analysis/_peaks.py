"""The two roofs of a device (peak compute, peak memory bandwidth), the published presets,
and which preset a run's own device is.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional, Union

from neuronprof.analysis.errors import UnknownDeviceError
from neuronprof.typing import DevicePreset, PeakSource

__all__ = ["DEVICE_PEAKS", "DevicePeak", "device_peak", "describe_run_device", "preset_of_run", "resolve_peaks"]


@dataclass(frozen=True)
class DevicePeak:
    """The two roofs of a device: peak compute and peak memory bandwidth.

    Attributes:
        name: Short name shown in reports, e.g. ``"trn2"`` or ``"my-gpu"``.
        flops_per_s: Peak dense FLOP/s for 16-bit floating point (BF16/FP16),
            the roof for ops whose inputs are 16-bit or smaller.
        bytes_per_s: Peak memory (HBM) bandwidth in bytes per second.
        fp32_flops_per_s: Peak dense FP32 FLOP/s, the roof for ops on 32/64-bit
            floats; ``None`` to use ``flops_per_s`` for every dtype.
        description: What the numbers are (chip, core, source).
    """

    name: str
    flops_per_s: float
    bytes_per_s: float
    fp32_flops_per_s: Optional[float] = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("DevicePeak.name must be a non-empty string")
        for attr in ("flops_per_s", "bytes_per_s", "fp32_flops_per_s"):
            value = getattr(self, attr)
            if value is None and attr == "fp32_flops_per_s":
                continue
            _check_positive(f"DevicePeak.{attr}", value)

    @property
    def ridge(self) -> float:
        """Ridge point in FLOP/byte: intensities below it are memory-bound (16-bit roof)."""
        return self.flops_per_s / self.bytes_per_s

    def peak_for(self, dtypes: Optional[tuple[str, ...]]) -> float:
        """Return the compute roof for an op with these input dtypes (FP32 roof for 32/64-bit floats).

        Args:
            dtypes: The op's input dtypes as the trace names them (e.g. ``("float",)``); None when unknown.
        """
        if self.fp32_flops_per_s is not None and dtypes and any(d in _WIDE_FLOATS for d in dtypes):
            return self.fp32_flops_per_s
        return self.flops_per_s

    def to_dict(self) -> dict[str, Any]:
        """Return the peak as a JSON-ready dict."""
        return asdict(self)


def _check_positive(what: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number, got {value!r}")


_WIDE_FLOATS = frozenset({"float", "double", "float32", "float64", "c10::complex<float>", "c10::complex<double>"})

# Published dense peaks (no structured sparsity). The roofline of one op is the
# roofline of the unit that runs it: one NeuronCore (logical or physical) on
# Trainium, one whole GPU on NVIDIA parts. Chip-level presets are there to
# compare against data sheets.
DEVICE_PEAKS: dict[str, DevicePeak] = {
    # AWS Neuron docs, "Trainium Architecture" (about-neuron/arch/neuron-hardware/trainium):
    # per Trainium chip, two NeuronCore-v2 deliver 190 FP16/BF16/cFP8/TF32 TFLOPS and
    # 47.5 FP32 TFLOPS, with 32 GiB of HBM at 820 GB/s. trn1 supports LNC=1 only, so
    # one NeuronCore-v2 is half of each.
    "trn1": DevicePeak(
        "trn1",
        95e12,
        410e9,
        23.75e12,
        "one Trainium1 NeuronCore-v2 (half a chip): 95 BF16 / 23.75 FP32 TFLOP/s, 410 GB/s",
    ),
    "trn1-chip": DevicePeak(
        "trn1-chip",
        190e12,
        820e9,
        47.5e12,
        "one Trainium1 chip (2 NeuronCore-v2): 190 BF16 / 47.5 FP32 TFLOP/s, 820 GB/s",
    ),
    # AWS Neuron docs, "Trainium2 Architecture" (about-neuron/arch/neuron-hardware/trainium2):
    # per Trainium2 chip, eight NeuronCore-v3 deliver 667 BF16/FP16/TF32 TFLOPS and 181
    # FP32 TFLOPS, with 96 GiB of HBM at 2.9 TB/s. neuronx-cc defaults to LNC=2 on Trn2
    # (one logical NeuronCore = two physical cores = a quarter of the chip), hence "trn2".
    "trn2": DevicePeak(
        "trn2",
        667e12 / 4,
        2900e9 / 4,
        181e12 / 4,
        "one Trainium2 logical NeuronCore at the default LNC=2 (2 NeuronCore-v3, a quarter chip): "
        "166.75 BF16 / 45.25 FP32 TFLOP/s, 725 GB/s",
    ),
    "trn2-core": DevicePeak(
        "trn2-core",
        667e12 / 8,
        2900e9 / 8,
        181e12 / 8,
        "one Trainium2 physical NeuronCore-v3 (LNC=1, an eighth of a chip): 83.4 BF16 / 22.6 FP32 TFLOP/s, 362.5 GB/s",
    ),
    "trn2-chip": DevicePeak(
        "trn2-chip",
        667e12,
        2900e9,
        181e12,
        "one Trainium2 chip (8 NeuronCore-v3): 667 BF16 / 181 FP32 TFLOP/s, 2.9 TB/s",
    ),
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: BF16 Tensor Core 1,979 TFLOPS with
    # sparsity (989.4 dense), FP32 67 TFLOPS, 80 GB HBM3 at 3.35 TB/s.
    "h100": DevicePeak("h100", 989.4e12, 3350e9, 67e12, "NVIDIA H100 SXM: 989.4 BF16 / 67 FP32 TFLOP/s, 3.35 TB/s"),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: same Hopper GH100 compute as the H100
    # SXM (1,979 TFLOPS BF16 with sparsity, 989.4 dense; FP32 67 TFLOPS), 141 GB HBM3e
    # at 4.8 TB/s.
    "h200": DevicePeak("h200", 989.4e12, 4800e9, 67e12, "NVIDIA H200 SXM: 989.4 BF16 / 67 FP32 TFLOP/s, 4.8 TB/s"),
    # NVIDIA A100 Tensor Core GPU datasheet: BF16 Tensor Core 312 TFLOPS (624 with
    # sparsity), FP32 19.5 TFLOPS; 80 GB HBM2e SXM at 2,039 GB/s (40 GB: 1,555 GB/s).
    "a100": DevicePeak(
        "a100", 312e12, 2039e9, 19.5e12, "NVIDIA A100 SXM 80GB: 312 BF16 / 19.5 FP32 TFLOP/s, 2.039 TB/s"
    ),
    "a100-40gb": DevicePeak(
        "a100-40gb", 312e12, 1555e9, 19.5e12, "NVIDIA A100 40GB: 312 BF16 / 19.5 FP32 TFLOP/s, 1.555 TB/s"
    ),
}
"""Peak compute and bandwidth presets, by the name ``roofline(device=...)`` takes.

``trn1``/``trn2`` are one NeuronCore as a workload sees it (a Trainium1
NeuronCore-v2; a Trainium2 logical NeuronCore at the default LNC=2);
``trn2-core`` is one physical NeuronCore-v3; ``*-chip`` are whole chips; the
NVIDIA presets are whole GPUs. Values are dense (no sparsity) peaks from the
vendors' published specifications.
"""


def device_peak(
    device: Union[DevicePreset, DevicePeak] = "trn2",
    *,
    peak_flops: Optional[float] = None,
    peak_bw: Optional[float] = None,
) -> DevicePeak:
    """Return the [`DevicePeak`][neuronprof.analysis.DevicePeak] for a preset name, optionally overridden.

    Args:
        device: A key of [`DEVICE_PEAKS`][neuronprof.analysis.DEVICE_PEAKS] or a ``DevicePeak``.
        peak_flops: Peak FLOP/s to use instead of the preset's (for every dtype).
        peak_bw: Peak memory bandwidth in bytes/s to use instead of the preset's.

    Raises:
        ValueError: Unknown preset name, or a peak that is not a positive number.
    """
    if isinstance(device, DevicePeak):
        base = device
    elif isinstance(device, str):
        base = DEVICE_PEAKS.get(device.lower())  # type: ignore[assignment]
        if base is None:
            raise ValueError(
                f"unknown device {device!r}; use one of {', '.join(DEVICE_PEAKS)}, "
                "or give DevicePeak(name, flops_per_s, bytes_per_s)"
            )
    else:
        raise TypeError(f"device must be a preset name or a DevicePeak, got {type(device).__name__}")
    if peak_flops is None and peak_bw is None:
        return base
    return DevicePeak(
        name=f"{base.name} (custom)",
        flops_per_s=base.flops_per_s if peak_flops is None else peak_flops,
        bytes_per_s=base.bytes_per_s if peak_bw is None else peak_bw,
        fp32_flops_per_s=base.fp32_flops_per_s if peak_flops is None else None,
        description="custom peaks" + (f" over {base.name}" if base.description else ""),
    )


# The device models a run names, mapped to the preset holding that part's published
# figures. The names are torch's (torch.cuda.get_device_name(), which kineto writes
# into a trace as deviceProperties[].name), matched whole, without regard to case or
# repeated spaces. Only parts whose datasheet figures are the preset's: the H100 PCIe
# and NVL, the H200 NVL and the A100 80GB PCIe (1,935 GB/s) have other peaks and no
# preset, so a run on one of them is refused rather than compared with a sibling's figures.
_MODEL_PRESETS: dict[str, DevicePreset] = {
    "nvidia h100 80gb hbm3": "h100",  # the SXM5 part (the PCIe card is "NVIDIA H100 PCIe")
    "nvidia h200": "h200",  # the SXM part (the NVL card is "NVIDIA H200 NVL")
    "nvidia a100-sxm4-80gb": "a100",
    "nvidia a100-sxm4-40gb": "a100-40gb",
    "nvidia a100-pcie-40gb": "a100-40gb",  # the same 312 / 19.5 TFLOP/s and 1,555 GB/s as the SXM4 40GB
}


def preset_of_run(device_label: Optional[str], device_name: Optional[str]) -> Optional[DevicePreset]:
    """Return the preset of the device a run was on, or ``None`` when it has none.

    A run has one only when its work was on a device (``device_label`` set) and its
    model is named and known: a CUDA trace names its GPU (``"NVIDIA H100 80GB HBM3"``
    is ``"h100"``); a Neuron trace does not say which Trainium generation ran it, and a
    CPU has no preset.

    Args:
        device_label: The run's device label (``"CUDA"``, ``"NEURON"``...); ``None`` for the CPU only.
        device_name: The device's model as the trace or session names it, or ``None``.
    """
    if device_label is None or not device_name:
        return None
    return _MODEL_PRESETS.get(" ".join(device_name.split()).casefold())


def describe_run_device(device_label: Optional[str], device_name: Optional[str]) -> str:
    """Say in words what a run was on: ``"NVIDIA H200 (CUDA)"``, ``"the CPU only"``...

    Args:
        device_label: The run's device label; ``None`` for the CPU only.
        device_name: The device's model, or ``None`` when not recorded.
    """
    if device_label is None:
        return "the CPU only"
    if device_name:
        return f"{device_name} ({device_label})"
    return f"a {device_label} device whose model is not recorded"


def resolve_peaks(
    device: Optional[Union[DevicePreset, DevicePeak]],
    *,
    peak_flops: Optional[float],
    peak_bw: Optional[float],
    device_label: Optional[str],
    device_name: Optional[str],
    subject: str,
) -> tuple[DevicePeak, PeakSource]:
    """Choose a roofline's peaks: the ones asked for, else those of the run's own device.

    ``device`` is always honoured. Without it, ``peak_flops`` and ``peak_bw`` together
    are peaks of their own; otherwise the run's device must have a preset
    (``preset_of_run``), which either override then adjusts.

    Args:
        device: A preset name or a ``DevicePeak``; ``None`` for the run's own device.
        peak_flops: Peak FLOP/s overriding the chosen peaks' (for every dtype).
        peak_bw: Peak memory bandwidth in bytes/s overriding the chosen peaks'.
        device_label: The run's device label; ``None`` for the CPU only.
        device_name: The device's model, or ``None`` when not recorded.
        subject: Who ran, for the error (``"the trace"``, ``"this session"``).

    Returns:
        The peaks, and where they come from (see [`PeakSource`][neuronprof.typing.PeakSource]).

    Raises:
        UnknownDeviceError: No ``device`` was given and the run's device has no preset.
        ValueError: Unknown preset, or a peak that is not a positive number.
    """
    custom = peak_flops is not None or peak_bw is not None
    if device is not None:
        return device_peak(device, peak_flops=peak_flops, peak_bw=peak_bw), "custom" if custom else "preset"
    if peak_flops is not None and peak_bw is not None:
        return DevicePeak("custom", peak_flops, peak_bw, description="custom peaks"), "custom"
    for what, value in (("peak_flops", peak_flops), ("peak_bw", peak_bw)):
        if value is not None:
            _check_positive(what, value)
    preset = preset_of_run(device_label, device_name)
    if preset is None:
        raise UnknownDeviceError(_refusal(subject, device_label, device_name))
    return device_peak(preset, peak_flops=peak_flops, peak_bw=peak_bw), "custom" if custom else "run"


def _refusal(subject: str, device_label: Optional[str], device_name: Optional[str]) -> str:
    if device_label is None:
        named = f" (its header names {device_name}, but no work on it)" if device_name else ""
        why = f"{subject} records no device work, only CPU ops{named}, and a CPU has no peak preset"
    elif device_name:
        why = f"{subject} was recorded on {device_name} ({device_label}), which has no peak preset"
    elif device_label == "NEURON":
        why = (
            f"{subject} was recorded on a NEURON device, and which Trainium generation and logical-core "
            "size (LNC) it was, which set its peaks, is not recorded"
        )
    else:
        why = f"{subject} was recorded on a {device_label} device whose model is not recorded, so no preset fits it"
    return (
        f"no roofline of the run's own device: {why}. Name the peaks to compare with: device=NAME "
        f"(command line: --device NAME), NAME one of {', '.join(DEVICE_PEAKS)}; or peaks of your own "
        "with peak_flops= and peak_bw= (--peak-flops and --peak-bw)"
    )
