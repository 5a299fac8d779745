"""``neuronprof summarize``: the per-operator table of a trace file or folder, as ``session.table()`` gives it."""

from __future__ import annotations

import argparse
from typing import Any, get_args

from neuronprof.commands._inputs import reads_files
from neuronprof.commands._options import format_option, jobs_options, old_spelling, row_limit_option
from neuronprof.typing import SORT_KEYS, GroupBy

HELP = "per-operator table of a trace file or folder (no torch needed)"
DESCRIPTION = (
    "Print the per-operator table of a Chrome/Perfetto trace (.json, .json.gz), a TensorBoard trace folder, a "
    "multi-rank folder (rank-0.json.gz...), neuronprof's own exports or a TorchNeuron output folder, as "
    "session.table() would; several ranks print side by side, as session.table(ranks='all') does."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="trace file or folder")
    sort_by = parser.add_argument(
        "--sort-by",
        default="device",
        choices=SORT_KEYS,
        metavar="KEY",
        help="sort key: device (default), device_total, cpu, cpu_total, calls, name, flops, "
        "or a torch.profiler key such as self_cpu_time_total",
    )
    row_limit_option(parser)
    parser.add_argument("--device-only", action="store_true", help="only rows with device time")
    group_by = parser.add_argument(
        "--group-by",
        choices=get_args(GroupBy),
        default="name",
        help="one row per op name (default) or per name and input shapes",
    )
    parser.add_argument(
        "--ranks",
        choices=("auto", "all", "sum"),
        default="auto",
        help="traces of several ranks (rank-N files, distributedInfo): side by side (auto, all) or summed (sum)",
    )
    format_option(parser, ("text", "markdown", "csv", "json"))
    old_spelling(parser, "--sort", sort_by)
    old_spelling(parser, "--by", group_by)
    jobs_options(parser)


@reads_files
def run(args: argparse.Namespace) -> int:
    from neuronprof.analysis.trace import load_trace
    from neuronprof.commands._output import emit, notes_to_stderr

    trace = load_trace(args.trace)
    if trace.ranks and args.ranks != "sum" or args.ranks == "all":
        model: Any = trace.rank_table(args.sort_by, group_by=args.group_by, device_only=args.device_only)
    else:
        model = trace.table(
            args.sort_by, row_limit=args.row_limit, device_only=args.device_only, group_by=args.group_by
        )
    # Each format is the model's own verb (the table is cut already; a cross-rank table is cut here).
    emit(getattr(model, f"to_{args.format}")(row_limit=args.row_limit))
    if args.format == "csv":
        notes_to_stderr(model.notes)
    return 0
