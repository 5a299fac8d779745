"""The ``neuronprof`` sub-commands: one module each, over one small protocol.

Each command module (``commands/summarize.py``...) holds:

* ``HELP``: its line in ``neuronprof --help``;
* ``DESCRIPTION``: the paragraph at the top of ``neuronprof NAME --help``;
* ``add_arguments(parser)``: its arguments, on its own sub-parser;
* ``run(args) -> int``: the work, with the parsed arguments; returns the exit status.

A command that has to end with a message on stderr raises ``CommandError`` with the
exit status on it; ``neuronprof.cli.main`` prints it and exits with that status, in
one place. A module imports only argparse-level things at its top; what it drives
(torch, the trace reader, the findings, the roofline, Neuron's profile) is imported
inside ``run``, so that ``neuronprof --help`` and ``neuronprof NAME --help`` import little.

A new command is a module here and its name in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING, Optional, Protocol, cast

__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "EXIT_PARTIAL", "EXIT_TOOL", "Command", "CommandError", "load"]

COMMANDS = ("doctor", "demo", "summarize", "diff", "check", "roofline", "advise", "report", "neuron")
"""Every sub-command, in the order ``neuronprof --help`` lists them."""

EXIT_TOOL = 1
"""``neuron``: the output was printed, but ``neuron-explorer`` was needed and is missing or failed."""
EXIT_BAD_INPUT = 2
"""Nothing could be analysed: unreadable or invalid input (the status argparse gives a bad argument, too)."""
EXIT_PARTIAL = 3
"""Some files of a folder could not be read: the rest was analysed and each left-out file named on stderr."""


class Command(Protocol):
    """What a command module provides (a module satisfies it with module-level names)."""

    HELP: str
    DESCRIPTION: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's arguments to its sub-parser."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the command's work with the parsed ``args``; return the exit status."""


class CommandError(Exception):
    """What a command has left to say on stderr, and the exit status it ends with.

    ``neuronprof.cli.main`` prints each line as ``neuronprof COMMAND: LINE`` and
    returns ``exit_code``.

    Args:
        *lines: The lines for stderr, without the ``neuronprof COMMAND:`` prefix.
        exit_code: The exit status (default ``EXIT_BAD_INPUT``, 2).
    """

    def __init__(self, *lines: str, exit_code: Optional[int] = None) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines
        self.exit_code = EXIT_BAD_INPUT if exit_code is None else exit_code


def load(name: str) -> Command:
    """The module of command ``name`` (one of ``COMMANDS``)."""
    return cast(Command, importlib.import_module(f"{__name__}.{name}"))


if TYPE_CHECKING:  # mypy checks each module against the protocol
    from neuronprof.commands import advise, check, demo, diff, doctor, neuron, report, roofline, summarize

    _CHECKED: tuple[Command, ...] = (doctor, demo, summarize, diff, check, roofline, advise, report, neuron)
