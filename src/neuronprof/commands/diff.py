"""``neuronprof diff``: two traces compared op by op, with verdicts."""

from __future__ import annotations

import argparse
from typing import get_args

from neuronprof.commands._inputs import reads_files
from neuronprof.commands._options import confidence_option, format_option, jobs_options, old_spelling, row_limit_option
from neuronprof.typing import DiffMatch, DiffMetric

HELP = "compare two traces op by op (no torch needed)"
DESCRIPTION = (
    "Compare two traces op by op: calls, self CPU and device time, change and ratio, largest absolute change "
    "first; with a verdict (faster, slower, no measurable change, cannot tell) and its confidence interval for "
    "the step and the ops that matter, each recorded step (or, with enough runs in a folder, each run) a sample."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", help="baseline trace file or folder")
    parser.add_argument("b", help="trace file or folder to compare with the baseline")
    match = parser.add_argument(
        "--match",
        choices=get_args(DiffMatch),
        default="auto",
        help="pair ops by name, or by name and input shapes (auto: shapes when both traces have them)",
    )
    parser.add_argument(
        "--metric",
        choices=get_args(DiffMetric),
        default="auto",
        help="time to compare (auto: device time when both traces have it)",
    )
    parser.add_argument("--per-step", action="store_true", help="divide times by each trace's number of steps")
    confidence_option(parser)
    row_limit_option(parser)
    format_option(parser)
    old_spelling(parser, "--by", match)
    jobs_options(parser)


@reads_files
def run(args: argparse.Namespace) -> int:
    from neuronprof.analysis.trace import load_trace
    from neuronprof.commands._output import emit

    a, b = load_trace(args.a), load_trace(args.b)  # what diff(A, B) reads first; the options are checked already
    from neuronprof.analysis._diff import diff  # the comparison and its verdicts, once both are read

    result = diff(a, b, match=args.match, metric=args.metric, per_step=args.per_step, confidence=args.confidence)
    emit(getattr(result, f"to_{args.format}")(row_limit=args.row_limit))  # the model's own verb for the format
    return 0
