"""The ``neuronprof`` command: doctor, demo, summarize, diff, check, roofline, advise, report, neuron.

Each sub-command is a module of ``neuronprof.commands``; this module builds the
parser from them and turns a ``CommandError`` into the exit status, in one place.
Each command imports what it drives when it runs, so ``neuronprof --help`` and
``neuronprof summarize`` never import torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Optional

from neuronprof.commands import COMMANDS, CommandError, load

__all__ = ["build_parser", "main"]


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
    for name in COMMANDS:
        command = load(name)
        p = sub.add_parser(name, help=command.HELP, description=command.DESCRIPTION)
        command.add_arguments(p)
        p.set_defaults(func=command.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``neuronprof`` command and return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CommandError as exc:
        for line in exc.lines:
            print(f"neuronprof {args.command}: {line}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        # `neuronprof ... | head` closed the pipe: not an error worth a traceback.
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
