"""Each device profile (NEFF) on a roofline, from the hardware counters of ``summary-json``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

from neuronprof.analysis._peaks import DevicePeak, device_peak, resolve_peaks
from neuronprof.analysis._roofline import Roofline, place_on_roof
from neuronprof.typing import DevicePreset, PeakSource

if TYPE_CHECKING:
    from neuronprof.analysis.neuron._model import NeuronProfile

__all__ = ["profile_roofline"]


def profile_roofline(
    profile: NeuronProfile,
    device: Optional[Union[DevicePreset, DevicePeak]] = None,
    *,
    peak_flops: Optional[float] = None,
    peak_bw: Optional[float] = None,
) -> Roofline:
    """Place each device profile of ``profile`` on ``device``'s roofline (see ``NeuronProfile.roofline``).

    Per profile: ``flops = hardware_flops``, ``bytes = hbm_read_bytes + hbm_write_bytes``,
    ``time = total_time``; a profile where any of them is not available is left
    out with a note (a missing byte count is never taken as 0); intensity ``flops / bytes`` against the ridge point
    ``peak FLOP/s / peak bytes/s`` of the 16-bit roof (the counters carry no dtype).

    Without ``device`` the profile's own peaks (``profile.peak``) are used; a preset of the
    hand-typed table is the fallback, labelled as one in the notes.

    Raises:
        UnknownDeviceError: No ``device`` was given and the profile carries no peaks: a Neuron
            profile without them does not record which Trainium generation, nor which
            logical-core size (LNC), it ran on.
        ValueError: Unknown preset, or a peak that is not positive.
    """
    peak: DevicePeak
    origin: PeakSource
    own = profile.peak
    if device is None and own is not None:
        # The profile's own peaks (its Parquet Metadata table), adjusted by any peak given.
        custom = peak_flops is not None or peak_bw is not None
        peak = device_peak(own, peak_flops=peak_flops, peak_bw=peak_bw)
        origin = "custom" if custom else "profile"
        where = [
            "peaks from the profile itself (its Parquet Metadata table; not verified on hardware)"
            + (", overridden by the peak given" if custom else "")
        ]
    else:
        # A preset of the hand-typed table: the profiles are a NeuronCore's, of a generation they do not name.
        why = profile.peak_note or "Neuron's Parquet output was not read"
        what = f"the Neuron profile {profile.source}" if profile.source else "the Neuron profile"
        peak, origin = resolve_peaks(
            device,
            peak_flops=peak_flops,
            peak_bw=peak_bw,
            device_label="NEURON",
            device_name=None,
            subject=f"{what}, which carries no hardware peaks ({why}),",
        )
        if own is not None:
            where = [f"the peaks asked for are used, not the profile's own ({own.description})"]
        elif origin == "preset":
            where = [f"peaks from neuronprof's hand-typed preset table, a fallback: the profile carries none ({why})"]
        else:
            where = []
    rows = []
    skipped = []
    for s in profile.summaries:
        if s.kind != "device":
            continue
        flops, moved, t = s.hardware_flops, s.hbm_bytes, s.total_us
        if flops is None or not moved or not t:
            # A byte count that is not available leaves the row out: it is never counted as 0.
            missing = [
                what
                for what, gone in (
                    ("hardware_flops", flops is None),
                    ("hbm_read_bytes", s.hbm_read_bytes is None),
                    ("hbm_write_bytes", s.hbm_write_bytes is None),
                    ("HBM bytes = 0", moved == 0),
                    ("total_time", not t),
                )
                if gone
            ]
            skipped.append(f"{s.label} ({', '.join(missing)} not available)")
            continue
        rows.append(
            place_on_roof(
                s.label,
                input_shapes=None,
                input_dtypes=None,  # the counters carry no dtype: the 16-bit roof
                calls=1,
                time_us=t,
                time_source="device",
                flops=flops,
                moved=float(moved),
                flops_source="counters",
                peak=peak,
            )
        )
    rows.sort(key=lambda r: r.time_us, reverse=True)
    notes = where + [
        "one row per device profile (NEFF): hardware_flops and HBM bytes read + written over total_time, "
        "from Neuron's summary-json; the 16-bit roof is used (the counters carry no dtype)"
    ]
    if skipped:
        notes.append(f"left out {len(skipped)} profile(s) without FLOPs, HBM bytes or total time: {'; '.join(skipped)}")
    if not rows and not skipped:
        notes.append("no device profile: capture with modes including 'device' and read it with neuron-explorer")
    return Roofline(
        rows=tuple(rows),
        device=peak,
        time_source="device",
        source=profile.source,
        notes=tuple(notes),
        device_label="NEURON",
        peak_source=origin,
    )
