"""``neuronprof roofline``: each op against a device's roofline, compute- or memory-bound."""

from __future__ import annotations

import argparse
import sys
from typing import get_args

from neuronprof.commands._inputs import reads_files
from neuronprof.commands._options import format_option, jobs_options, old_spelling, rate, row_limit_option
from neuronprof.typing import DevicePreset, TimeSource

HELP = "compute- or memory-bound? each op against a device's roofline (no torch needed)"
DESCRIPTION = (
    "Estimate FLOPs and bytes of every op with recorded shapes and place it on a device's roofline: arithmetic "
    "intensity, achieved vs attainable FLOP/s and GB/s, bound. Without --device, the peaks are those of the device "
    "the trace was recorded on; a trace of the CPU, or of a device without a preset, is refused."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="trace file or folder (profiled with record_shapes=True)")
    parser.add_argument(
        "--device",
        default=None,
        metavar="NAME",
        help=f"peak preset: {', '.join(get_args(DevicePreset))} (default: the preset of the device the trace names)",
    )
    parser.add_argument(
        "--peak-flops", type=rate, default=None, metavar="FLOP/S", help="custom peak FLOP/s, e.g. 989e12 or 989T"
    )
    parser.add_argument(
        "--peak-bw",
        type=rate,
        default=None,
        metavar="BYTES/S",
        help="custom peak memory bandwidth in bytes/s, e.g. 3.35e12 or 3350G",
    )
    time_source = parser.add_argument(
        "--time-source",
        choices=get_args(TimeSource),
        default="auto",
        help="measured time to use (auto: device time when the trace has it)",
    )
    row_limit_option(parser)
    parser.add_argument("--plot", default=None, metavar="PATH", help="also draw the roofline to PATH (.png or .svg)")
    format_option(parser)
    old_spelling(parser, "--time", time_source)
    jobs_options(parser)


@reads_files
def run(args: argparse.Namespace) -> int:
    from neuronprof.analysis._peaks import device_peak
    from neuronprof.analysis.trace import load_trace
    from neuronprof.commands._output import emit

    if args.plot:
        from pathlib import Path

        from neuronprof._io import figure_format

        figure_format(Path(args.plot))  # a plot path it cannot draw to is refused before the trace is read
    if args.device is not None:  # a preset its peaks cannot override is refused before the trace is read, too
        device_peak(args.device, peak_flops=args.peak_flops, peak_bw=args.peak_bw)
    trace = load_trace(args.trace)
    # What roofline(path) does; the FLOP counts and the result model are imported once the trace is read.
    from neuronprof.analysis._roofline import roofline

    result = roofline(
        trace, args.device, peak_flops=args.peak_flops, peak_bw=args.peak_bw, time_source=args.time_source
    )
    if args.plot:
        result.plot(args.plot)
    emit(getattr(result, f"to_{args.format}")(row_limit=args.row_limit))  # the model's own verb for the format
    if args.plot:
        print(f"roofline plot written to {args.plot}", file=sys.stderr)
    return 0
