"""``neuronprof neuron``: the engine breakdown and NEFF executions of Neuron's own profile."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import get_args

from neuronprof.commands import EXIT_TOOL, CommandError
from neuronprof.commands._inputs import reads_files
from neuronprof.commands._options import format_option, old_spelling
from neuronprof.typing import DevicePreset

HELP = "engine breakdown and NEFF executions from Neuron's own profile (neuron-explorer)"
DESCRIPTION = (
    "Read Neuron's own profile (a TorchNeuron profile folder or session folder, a bundle from "
    "export(format='neuron'), the tool's JSON, or a .neff with its .ntff) and print the active time of each "
    "NeuronCore engine per device profile, the executions and device time per NEFF, and the NeuronCore busy time "
    "per step. JSON written by neuron-explorer is read directly; otherwise neuron-explorer (package "
    "aws-neuronx-tools) is run."
)

TIMEOUT = 120.0
"""``neuron_profile``'s own default ``timeout``, in seconds (a test holds the two equal); written here so that
``neuronprof neuron --help`` need not import the Neuron reader."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="profile folder, bundle, system_profile.json / *summary*.json, or a .neff")
    parser.add_argument("ntff", nargs="?", default=None, help="the .ntff of a .neff given as PATH")
    format_option(parser, ("text", "markdown", "csv", "json"))
    parser.add_argument(
        "--plot", default=None, metavar="PATH", help="also draw the stacked engine bars to PATH (.png/.svg)"
    )
    normalize = parser.add_argument(
        "--normalize",
        action="store_true",
        help="with --plot: draw each bar as %% of its own profile's total time (a far shorter profile stays visible)",
    )
    parser.add_argument(
        "--roofline",
        nargs="?",
        const="",
        default=None,
        metavar="DEVICE",
        help="also place each NEFF on a roofline (text and markdown only): without DEVICE, against the peaks the "
        f"profile itself carries (its Parquet Metadata table); else a preset: {', '.join(get_args(DevicePreset))}",
    )
    tool = parser.add_argument(
        "--tool",
        default="auto",
        metavar="{auto,never,PATH}",
        help="neuron-explorer to run where a folder holds Neuron Runtime files without their JSON: auto (find it; "
        "the default), never (read existing JSON only), or the path of the executable",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT,
        metavar="S",
        help=f"seconds per neuron-explorer run (default {TIMEOUT:g}); a run that wrote its output is stopped at once",
    )
    old_spelling(parser, "--plot-normalize", normalize)
    old_spelling(parser, "--no-tool", tool, means="never")


@reads_files
def run(args: argparse.Namespace) -> int:
    from neuronprof.analysis.neuron import neuron_profile
    from neuronprof.commands._output import emit, notes_to_stderr

    if args.roofline is not None and args.format not in ("text", "markdown"):
        raise ValueError("--roofline works with --format text or markdown")
    # Warnings are printed here as plain lines, once: a message the notes already hold is not repeated.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile = neuron_profile(args.path, args.ntff, tool=args.tool, timeout=args.timeout, warn_missing=False)
    for w in caught:
        message = str(w.message)
        if not any(n and n in message for n in profile.notes):
            print(f"neuronprof neuron: warning: {' '.join(message.split())}", file=sys.stderr)
    text: str = getattr(profile, f"to_{args.format}")()  # the model's own verb for the format
    if args.roofline is not None:
        rl = profile.roofline(args.roofline or None)
        text += "\n\n" + (rl.to_text() if args.format == "text" else rl.to_markdown())
    if args.plot:
        profile.plot(args.plot, normalize=args.normalize)
    emit(text)
    if args.format == "csv":
        # As `neuronprof summarize --format csv`: where it came from and the notes, as comment lines on stderr.
        how = profile.tool or "existing JSON files"
        notes_to_stderr([f"source: {profile.source} (read with {how})", *profile.notes])
    if args.plot:
        print(f"engine plot written to {args.plot}", file=sys.stderr)
    if profile.tool_error is not None:
        state = "is not installed" if profile.tool_missing else "failed"
        raise CommandError(f"neuron-explorer was needed and {state}; see the note", exit_code=EXIT_TOOL)
    return 0
