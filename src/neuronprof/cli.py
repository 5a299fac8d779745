"""The ``neuronprof`` command: doctor, demo, summarize, diff, check, roofline, advise, report, neuron.

Each sub-command is a module of ``neuronprof.commands``; this module builds the
parser from them and turns a ``CommandError`` into the exit status, in one place.
Each command imports what it drives when it runs, so ``neuronprof --help`` and
``neuronprof summarize`` never import torch; ``neuronprof NAME ...`` loads the module
of command NAME only, and a command imports what it analyses with once its input is
read (tests/test_cli_startup.py checks what each one has imported by then).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Optional, Union

from neuronprof.commands import COMMANDS, CommandError, load

__all__ = ["build_parser", "main"]


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """Return the ``neuronprof`` argument parser with every sub-command.

    Args:
        only: Load the module of this command only (one of ``COMMANDS``): the others are
            named, without their help or arguments. For ``neuronprof NAME ...``, where
            nothing but NAME's arguments is parsed or shown.
    """
    from neuronprof import __version__

    parser = argparse.ArgumentParser(
        prog="neuronprof",
        description="Profile PyTorch on Trainium, TPU, GPU and CPU; read the traces anywhere.",
    )
    parser.add_argument("--version", action="version", version=f"neuronprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        command = load(name)
        p = sub.add_parser(name, help=command.HELP, description=command.DESCRIPTION)
        command.add_arguments(p)
        p.set_defaults(func=command.run)
    return parser


def spare_blas_threads() -> None:
    """Ask OpenBLAS's idle threads to sleep at once, if numpy is not loaded yet.

    numpy's wheels load OpenBLAS, which starts worker threads (one per core, less the main
    thread), threads no command uses; each spins some 2**28 cycles waiting for work before it
    sleeps.
    Measured on two cores: a 50 kB trace's ``summarize`` took 0.18-0.25 s of CPU with numpy
    imported plainly, 0.12-0.13 s after this (``import numpy`` alone: 0.13 s against 0.08 s).
    OpenBLAS reads ``OPENBLAS_THREAD_TIMEOUT`` once, as it loads, so this only acts before
    numpy's first import: in a process of the command line's own (a user's script that
    imported numpy first keeps its BLAS as it is). A value the user set is kept.
    """
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # 2**4 cycles: OpenBLAS's shortest


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the ``neuronprof`` command and return its exit status."""
    given = sys.argv[1:] if argv is None else list(argv)
    spare_blas_threads()
    # `neuronprof NAME ...`: only NAME's module is loaded. Anything before a command name (`-h`,
    # `--version`, a typo) gets the whole parser, whose help lists every command.
    only = given[0] if given and given[0] in COMMANDS else None
    args = build_parser(only).parse_args(given)
    plain = warnings.formatwarning
    warnings.formatwarning = _one_line  # for this run only: a command-line user needs no source line
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
    finally:
        warnings.formatwarning = plain


def _one_line(
    message: Union[Warning, str], category: type[Warning], filename: str, lineno: int, line: Optional[str] = None
) -> str:
    """A neuronprof warning as one plain line (``neuronprof: warning: ...``); any other as Python writes it."""
    from neuronprof.errors import NeuronProfWarning

    if issubclass(category, NeuronProfWarning):
        return f"neuronprof: warning: {message}\n"
    return _PYTHON_FORMAT(message, category, filename, lineno, line)


_PYTHON_FORMAT = warnings.formatwarning


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
