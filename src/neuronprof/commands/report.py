"""``neuronprof report``: one self-contained HTML report of a trace: table, findings, timeline."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from neuronprof.commands._inputs import reads_files
from neuronprof.commands._options import jobs_options

HELP = "one self-contained HTML report of a trace, or of two runs side by side (no torch needed)"
DESCRIPTION = (
    "Write one HTML file to look at and share: an overview of where each step's time goes, the findings of "
    "`neuronprof advise`, the sortable op table (by shape and module), kernels, memory, ranks and a zoomable step "
    "timeline; with two runs (A B), the two-run pane with `neuronprof diff`'s verdicts. It opens offline in any "
    "browser; nothing is loaded from the network."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="trace file or folder")
    parser.add_argument(
        "other",
        nargs="?",
        default=None,
        metavar="TRACE_B",
        help="a second run: `neuronprof report A B` reports B beside its baseline A (as --baseline A)",
    )
    # Session.report(path) names it `path`; beside the TRACE path, `-o/--output` says which path it is.
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="PATH",
        help="the .html file to write (default: the trace's name with .html, beside it)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="TRACE",
        help="a baseline trace file or folder of runs: adds the two-run pane (neuronprof diff BASELINE TRACE)",
    )
    parser.add_argument(
        "--neuron-profile",
        default=None,
        metavar="PATH",
        help="Neuron's own profile of the run (as `neuronprof neuron PATH` reads it): adds its NEFF rows and "
        "engine breakdown to the kernels pane",
    )
    jobs_options(parser)


@reads_files
def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from neuronprof.analysis.trace import load_trace

    if args.other is not None:
        if args.baseline is not None:
            raise ValueError("give the baseline once: `neuronprof report A B` or `neuronprof report B --baseline A`")
        args.baseline, args.trace = args.trace, args.other
    source = Path(args.trace)
    piped = getattr(args, "piped", {})
    if args.other is not None:  # A is the baseline now and B the trace, piped or not
        piped = {{"trace": "baseline", "other": "trace"}.get(k, k): v for k, v in piped.items()}
    if args.output is not None:
        target = Path(args.output)
    elif "trace" in piped:
        raise ValueError("the trace comes from a pipe, so there is no folder to write the report beside: pass -o PATH")
    else:
        base = source.name if source.is_dir() else re.sub(r"(\.pt\.trace)?\.json(\.gz)?$", "", source.name)
        target = source.parent / f"{base}.html"
    if target.is_dir():
        raise ValueError(f"{target} is a folder: pass -o with the path of the .html file to write")
    if target.exists() and not args.overwrite:
        raise ValueError(f"{target} exists; pass --overwrite to replace it")
    same = _same_file(args.baseline, source) if args.baseline is not None and "baseline" not in piped else None
    if same is not None:
        print(f"neuronprof report: {same}", file=sys.stderr)
    neuron = None
    if args.neuron_profile is not None:
        from neuronprof.analysis.neuron import neuron_profile

        neuron = neuron_profile(args.neuron_profile)
    trace = load_trace(source)  # the one read of the file: every pane reads its events
    # The report's panes and templates are imported once the inputs are read.
    from neuronprof._io import write_text
    from neuronprof.analysis.insights._trace import insights_of, read_of
    from neuronprof.report import environment, trace_report, trace_settings

    # The command's own trace: its tables let go of their events as they are read into the
    # columns every pane and the findings read (the events are held once). The columns are
    # handed to the report (popped), which lets them go before it makes the page.
    reads = [read_of(trace, release=True)]
    ranks: dict[str, Any] = {"steps": trace.steps, "rank": trace.rank}
    if trace.ranks:  # several ranks ran their steps side by side: each is read, and drawn, on its own
        straggler = getattr(insights_of(trace, reads[0]), "straggler", None)
        ranks = {
            "ranks": f"{len(trace.ranks)}" + ("" if straggler is None else f"; straggler: rank {straggler}"),
            "steps": ", ".join(f"rank {t.rank}: {t.steps}" for t in trace.ranks),
        }
    settings = {
        "trace": piped.get("trace", trace.source),
        "backend": trace.backend,
        "device": trace.device_name or trace.device_label or "none (CPU only)",
        **trace_settings(trace),
        **ranks,
        "report made with neuronprof": environment()["neuronprof"],
    }
    title = piped.get("trace", source.name)
    # Grouped as the session's own report groups it: by input shape when they were recorded.
    shapes = bool(trace.event_tables and trace.event_tables[0].metadata.get("record_shapes"))
    table = trace.table("device", group_by="shape" if shapes else "name")
    text = trace_report(
        trace,
        table,
        settings=settings,
        title=title,
        baseline=args.baseline,
        neuron=neuron,
        same=same,
        read=reads.pop(),
        names={k: v for k, v in piped.items() if k in ("trace", "baseline")},
    )
    write_text(target.resolve(), text, overwrite=args.overwrite)
    print(f"report written to {target}", file=sys.stderr)
    return 0


def _same_file(baseline: str, trace: Any) -> Any:
    """The sentence saying that A and B are one file or folder (by ``os.path.samefile``), or ``None``."""
    import os

    try:
        same = os.path.samefile(baseline, trace)
    except OSError:  # not both on disk (a pipe): the comparison says what it finds
        return None
    if not same:
        return None
    return (
        f"A and B are the same {'folder' if os.path.isdir(trace) else 'file'} ({trace}): the comparison shows no "
        "change by construction"
    )
