"""What the commands' options accept, and the old spellings of renamed options.

Each option is spelled as the keyword of the Python function it drives
(``--row-limit`` for ``row_limit``, ``--time-source`` for ``time_source``); an
older spelling is still accepted, hidden from ``--help``, with a note on stderr.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from typing import Any, Optional, Union

__all__ = [
    "confidence_option",
    "format_option",
    "jobs_options",
    "non_negative",
    "old_spelling",
    "percent",
    "rate",
    "row_limit_option",
]

_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


class _OldSpelling(argparse.Action):
    """An option's old spelling: hidden from ``--help``; a note on stderr, then the new option's own action."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        *,
        new: argparse.Action,
        means: Optional[str] = None,
        default: Any = None,  # argparse passes the parser's default for ``dest``; the new option's stands
    ) -> None:
        flag = means is not None
        super().__init__(
            option_strings,
            dest,
            nargs=0 if flag else new.nargs,
            const=new.const,
            default=argparse.SUPPRESS,
            type=None if flag else new.type,  # type: ignore[arg-type]  # a type named by string: the parser looks it up
            choices=None if flag else new.choices,
            metavar=new.metavar,
            help=argparse.SUPPRESS,
        )
        self.new = new
        self.means = means

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        instead = max(self.new.option_strings, key=len) + ("" if self.means is None else f" {self.means}")
        print(f"{parser.prog}: {option_string} is deprecated; use {instead} (the same meaning)", file=sys.stderr)
        self.new(parser, namespace, values if self.means is None else self.means, option_string)


def old_spelling(
    parser: argparse.ArgumentParser, old: str, new: argparse.Action, *, means: Optional[str] = None
) -> None:
    """Accept ``old`` as the option ``new`` (what ``add_argument`` returned), with a deprecation note.

    Args:
        parser: The command's parser.
        old: The old spelling, e.g. ``"--limit"``.
        new: The option it now is.
        means: For an old flag that took no value, the value of ``new`` it stands for
            (``--no-tool`` means ``--tool never``).
    """
    parser.add_argument(old, dest=new.dest, action=_OldSpelling, new=new, means=means)


def row_limit_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--row-limit N`` (show at most N rows; default all), with its old spelling ``--limit``."""
    row_limit = parser.add_argument(
        "--row-limit", type=non_negative, default=None, metavar="N", help="show at most N rows"
    )
    old_spelling(parser, "--limit", row_limit)


def format_option(parser: argparse.ArgumentParser, choices: Sequence[str] = ("text", "markdown", "json")) -> None:
    """Add ``--format`` (default ``text``) with these choices."""
    parser.add_argument("--format", choices=choices, default="text", help="output format")


def confidence_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--confidence C`` (default 95 %), the confidence level of the verdicts' intervals."""
    help = "confidence level of the verdicts' intervals, e.g. 0.95 or 95%% (default 95%%)"
    parser.add_argument("--confidence", type=confidence, default=0.95, metavar="C", help=help)


def jobs_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--jobs N`` and ``--executor dask://HOST:PORT``: where a folder's files are read (one or the other)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--jobs",
        type=jobs,
        default=None,
        metavar="N",
        help="worker processes reading a folder's files side by side (default: one per core, for folders of 1 MiB "
        "or more; 1 reads them in this process, one after another)",
    )
    where.add_argument(
        "--executor",
        type=executor,
        default=None,
        metavar="dask://HOST:PORT",
        help="read a folder's files on a running Dask cluster instead (needs neuronprof[dask], and the files at "
        "the same path on its workers)",
    )


def jobs(text: str) -> int:
    """A number of worker processes: a whole number >= 1."""
    from neuronprof._executors import check_jobs

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of worker processes, got {text!r}") from None
    try:
        check_jobs(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def executor(text: str) -> str:
    """A Dask scheduler's address, ``dask://HOST:PORT`` (checked here; reached when the command starts)."""
    from neuronprof._executors import dask_address

    try:
        dask_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _fraction(text: str, what: str, example: str) -> float:
    """``5%`` or ``0.05`` as the fraction 0.05; a bare number of 1 or more is ambiguous and refused."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what} such as {example}, got {text!r}") from None
    if not raw.endswith("%") and value >= 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is ambiguous: write {what} with a % sign, or as a fraction (e.g. {example})"
        )
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"expected {what} such as {example}, got {text!r}")
    return value


def percent(text: str) -> float:
    """A slowdown: ``5%`` or ``0.05``, from 0 to 1000 %."""
    value = _fraction(text, "a slowdown", "5% or 0.05")
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"expected a slowdown from 0% to 1000%, got {text!r}")
    return value


def confidence(text: str) -> float:
    """A confidence level: ``95%`` or ``0.95``, from 50 % up to (not including) 100 %."""
    value = _fraction(text, "a confidence level", "95% or 0.95")
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a confidence from 50% up to (not including) 100%, got {text!r}")
    return value


def non_negative(text: str) -> int:
    """A whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def rate(text: str) -> float:
    """A positive rate, with an SI suffix or not: ``989e12``, ``989T``, ``3350G``."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtTpP]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a number such as 989e12 or 989T, got {text!r}")
    value = float(m.group(1)) * _SUFFIXES[m.group(2).lower()]
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value
