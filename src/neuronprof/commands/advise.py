"""``neuronprof advise``: what to fix first, with the evidence."""

from __future__ import annotations

import argparse

from neuronprof.commands._inputs import reads_files
from neuronprof.commands._options import format_option, jobs_options

HELP = "what to fix first: findings with their evidence (no torch needed)"
DESCRIPTION = (
    "Read a trace and list what to fix first, most costly first: host-device copies, hidden synchronisations, an "
    "idle device, a CPU-bound loop, unfused elementwise chains, dtype conversions, recompilations, graph breaks, a "
    "slow input pipeline, host time between ops, waiting in collectives, low precision without hardware support, "
    "CPU fallbacks, one dominant op. Each finding gives its evidence, the time at stake, one suggestion and the "
    "guide section that explains it. A folder of ranks' traces is read rank by rank, the straggler named."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="trace file or folder (a folder of ranks' traces: findings per rank)")
    format_option(parser)
    jobs_options(parser)


@reads_files
def run(args: argparse.Namespace) -> int:
    from neuronprof.analysis.trace import load_trace
    from neuronprof.commands._output import emit

    # What advise(path) does; the findings' rules are imported once the trace is read. The
    # command's own trace: its tables let go of their events as they are read into columns.
    trace = load_trace(args.trace)
    from neuronprof.analysis.insights._trace import insights_of, read_of

    result = insights_of(trace, read_of(trace, release=True))
    emit(getattr(result, f"to_{args.format}")())  # the model's own verb for the format
    return 0
