"""The ``neuronprof`` command line: doctor, demo, summarize, diff, check, roofline, advise, report, neuron.

Each sub-command lives with the code it drives; this module only builds the
parser and dispatches, so that ``neuronprof summarize`` never imports torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Optional

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """Return the ``neuronprof`` argument parser with every sub-command."""
    from neuronprof import __version__

    parser = argparse.ArgumentParser(
        prog="neuronprof",
        description="Profile PyTorch on Trainium, TPU, GPU and CPU; read the traces anywhere.",
    )
    parser.add_argument("--version", action="version", version=f"neuronprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    # Each register() adds its sub-commands with set_defaults(func=...).
    from neuronprof import _demo, _doctor
    from neuronprof.analysis import cli as analysis_cli
    from neuronprof.analysis.neuron import cli as neuron_cli

    _doctor.register(sub)
    _demo.register(sub)
    analysis_cli.register(sub)
    neuron_cli.register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``neuronprof`` command and return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # `neuronprof ... | head` closed the pipe: not an error worth a traceback.
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
