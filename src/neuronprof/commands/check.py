"""``neuronprof check``: a CI gate, exit 1 when the current run is slower than its baseline beyond a threshold."""

from __future__ import annotations

import argparse

from neuronprof.commands._inputs import reads_files
from neuronprof.commands._options import confidence_option, jobs_options, old_spelling, percent

HELP = "a CI gate: exit 1 when CURRENT is slower than BASELINE beyond a threshold (no torch needed)"
DESCRIPTION = (
    "Judge whether the current profile is slower than the baseline beyond --max-slowdown, with the confidence "
    "interval of neuronprof diff's verdicts: exit 0 (no regression beyond the threshold at this confidence), 1 (a "
    "regression, named, with its interval), 2 (cannot tell, and why: the interval holds both, too few samples, a "
    "figure missing; or bad input). Each recorded step is a sample; a folder of runs makes each run's median step "
    "one."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", help="baseline trace file or folder of runs")
    parser.add_argument("current", help="trace file or folder of runs to judge")
    parser.add_argument(
        "--max-slowdown",
        type=percent,
        default=0.05,
        metavar="PCT",
        help="slowdown allowed, e.g. 5%% or 0.05 (default 5%%)",
    )
    ops = parser.add_argument(
        "--ops", action="append", default=[], metavar="NAME", help="judge this op's self time (repeatable)"
    )
    parser.add_argument("--device", action="store_true", help="judge device time instead of host time")
    confidence_option(parser)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown block for a CI job summary")
    old_spelling(parser, "--op", ops)
    jobs_options(parser)


@reads_files
def run(args: argparse.Namespace) -> int:
    from neuronprof.analysis.trace import load_trace
    from neuronprof.commands._output import emit

    # What check(BASELINE, CURRENT) reads first (its options are checked already); the verdicts, once both are read.
    baseline, current = load_trace(args.baseline), load_trace(args.current)
    from neuronprof.analysis._check import check

    result = check(
        baseline,
        current,
        max_slowdown=args.max_slowdown,
        ops=args.ops,
        device=args.device,
        confidence=args.confidence,
    )
    emit(result.to_markdown() if args.markdown else result.to_text())
    return result.exit_code
