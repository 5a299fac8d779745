"""The ``neuronprof neuron`` sub-command: the engine breakdown and NEFF executions of Neuron's own profile."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``neuron`` to the ``neuronprof`` parser's sub-commands."""
    from neuronprof.analysis._roofline import DEVICE_PEAKS
    from neuronprof.analysis.cli import _guarded
    from neuronprof.analysis.neuron._read import DEFAULT_TIMEOUT

    p = subparsers.add_parser(
        "neuron",
        help="engine breakdown and NEFF executions from Neuron's own profile (neuron-explorer)",
        description="Read Neuron's own profile (a TorchNeuron profile folder or session folder, a bundle from "
        "export(format='neuron'), the tool's JSON, or a .neff with its .ntff) and print the active time of each "
        "NeuronCore engine per device profile, the executions and device time per NEFF, and the NeuronCore busy "
        "time per step. JSON written by neuron-explorer is read directly; otherwise neuron-explorer (package "
        "aws-neuronx-tools) is run.",
    )
    p.add_argument("path", help="profile folder, bundle, system_profile.json / *summary*.json, or a .neff")
    p.add_argument("ntff", nargs="?", default=None, help="the .ntff of a .neff given as PATH")
    p.add_argument("--format", choices=("text", "markdown", "csv", "json"), default="text", help="output format")
    p.add_argument("--plot", default=None, metavar="PATH", help="also draw the stacked engine bars to PATH (.png/.svg)")
    p.add_argument(
        "--plot-normalize",
        action="store_true",
        help="draw each bar as %% of its own profile's total time (a far shorter profile stays visible)",
    )
    p.add_argument(
        "--roofline",
        nargs="?",
        const="",
        default=None,
        metavar="DEVICE",
        help="also place each NEFF on a roofline (text and markdown only): without DEVICE, against the peaks the "
        f"profile itself carries (its Parquet Metadata table); else a preset: {', '.join(DEVICE_PEAKS)}",
    )
    p.add_argument("--no-tool", action="store_true", help="read existing JSON only; never run neuron-explorer")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds per neuron-explorer run (default {DEFAULT_TIMEOUT:g}); a run that wrote its output is "
        "stopped at once",
    )
    p.set_defaults(func=_guarded(_neuron))


EXIT_TOOL = 1
"""Exit status when the output was printed but ``neuron-explorer`` was needed and is missing or failed."""


def _neuron(args: argparse.Namespace) -> int:
    from neuronprof.analysis.cli import _emit, _notes_to_stderr
    from neuronprof.analysis.neuron._read import neuron_profile

    if args.roofline is not None and args.format not in ("text", "markdown"):
        raise ValueError("--roofline works with --format text or markdown")
    # Warnings are printed here as plain lines, once: a message the notes already hold is not repeated.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile = neuron_profile(
            args.path, args.ntff, tool="never" if args.no_tool else "auto", timeout=args.timeout, warn_missing=False
        )
    for w in caught:
        message = str(w.message)
        if not any(n and n in message for n in profile.notes):
            print(f"neuronprof neuron: warning: {' '.join(message.split())}", file=sys.stderr)
    render: dict[str, Callable[[], str]] = {
        "text": profile.to_text,
        "markdown": profile.to_markdown,
        "csv": profile.to_csv,
        "json": profile.to_json,
    }
    text = render[args.format]()
    if args.roofline is not None:
        rl = profile.roofline(args.roofline or None)
        text += "\n\n" + (rl.to_text() if args.format == "text" else rl.to_markdown())
    if args.plot:
        profile.plot(args.plot, normalize=args.plot_normalize)
    _emit(text)
    if args.format == "csv":
        # As `neuronprof summarize --format csv`: where it came from and the notes, as comment lines on stderr.
        how = profile.tool or "existing JSON files"
        _notes_to_stderr([f"source: {profile.source} (read with {how})", *profile.notes])
    if args.plot:
        print(f"engine plot written to {args.plot}", file=sys.stderr)
    if profile.tool_error is not None:
        state = "is not installed" if profile.tool_missing else "failed"
        print(f"neuronprof neuron: neuron-explorer was needed and {state}; see the note", file=sys.stderr)
        return EXIT_TOOL
    return 0
