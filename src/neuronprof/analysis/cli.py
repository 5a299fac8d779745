"""The ``summarize``, ``diff`` and ``roofline`` sub-commands of ``neuronprof``.

They read trace files only and never import torch, so they run on any machine
with Python. Bad input is reported on one line, with exit status 2.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any, Optional

from neuronprof.analysis.errors import TraceError
from neuronprof.model import SORT_KEYS

__all__ = ["register"]

EXIT_BAD_INPUT = 2
EXIT_PARTIAL = 3
"""Some files of a folder could not be read: the rest was analysed and each left-out file named on stderr."""

_INPUTS = ("trace", "a", "b", "baseline", "current")

_SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def register(subparsers: Any) -> None:
    """Add ``summarize``, ``diff``, ``check``, ``roofline``, ``advise`` and ``report`` to ``neuronprof``."""
    p = subparsers.add_parser(
        "summarize",
        help="per-operator table of a trace file or folder (no torch needed)",
        description="Print the per-operator table of a Chrome/Perfetto trace (.json, .json.gz), a "
        "TensorBoard trace folder, a multi-rank folder (rank-0.json.gz...), neuronprof's own exports or a "
        "TorchNeuron output folder, as session.table() would; several ranks print side by side, as "
        "session.table(ranks='all') does.",
    )
    p.add_argument("trace", help="trace file or folder")
    p.add_argument(
        "--sort",
        default="device",
        choices=SORT_KEYS,
        metavar="KEY",
        help="sort key: device (default), device_total, cpu, cpu_total, calls, name, flops, "
        "or a torch.profiler key such as self_cpu_time_total",
    )
    p.add_argument("--limit", type=_non_negative, default=None, metavar="N", help="show at most N rows")
    p.add_argument("--device-only", action="store_true", help="only rows with device time")
    p.add_argument(
        "--by",
        choices=("name", "shape"),
        default="name",
        help="one row per op name (default) or per name and input shapes",
    )
    p.add_argument(
        "--ranks",
        choices=("auto", "all", "sum"),
        default="auto",
        help="traces of several ranks (rank-N files, distributedInfo): side by side (auto, all) or summed (sum)",
    )
    p.add_argument("--format", choices=("text", "markdown", "csv", "json"), default="text", help="output format")
    p.set_defaults(func=_guarded(_summarize))

    p = subparsers.add_parser(
        "diff",
        help="compare two traces op by op (no torch needed)",
        description="Compare two traces op by op: calls, self CPU and device time, change and ratio, "
        "largest absolute change first; with a verdict (faster, slower, no measurable change, cannot tell) "
        "and its confidence interval for the step and the ops that matter, each recorded step (or, with "
        "enough runs in a folder, each run) a sample.",
    )
    p.add_argument("a", help="baseline trace file or folder")
    p.add_argument("b", help="trace file or folder to compare with the baseline")
    p.add_argument(
        "--by",
        choices=("auto", "name", "shape"),
        default="auto",
        help="pair ops by name, or by name and input shapes (auto: shapes when both traces have them)",
    )
    p.add_argument(
        "--metric",
        choices=("auto", "device", "cpu"),
        default="auto",
        help="time to compare (auto: device time when both traces have it)",
    )
    p.add_argument("--per-step", action="store_true", help="divide times by each trace's number of steps")
    p.add_argument("--confidence", type=_confidence, default=0.95, metavar="C", help=_CONFIDENCE_HELP)
    p.add_argument("--limit", type=_non_negative, default=None, metavar="N", help="show at most N rows")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text", help="output format")
    p.set_defaults(func=_guarded(_diff))

    p = subparsers.add_parser(
        "check",
        help="a CI gate: exit 1 when CURRENT is slower than BASELINE beyond a threshold (no torch needed)",
        description="Judge whether the current profile is slower than the baseline beyond --max-slowdown, with "
        "the confidence interval of neuronprof diff's verdicts: exit 0 (no regression beyond the threshold at "
        "this confidence), 1 (a regression, named, with its interval), 2 (cannot tell, and why: the interval "
        "holds both, too few samples, a figure missing; or bad input). Each recorded step is a sample; a folder "
        "of runs makes each run's median step one.",
    )
    p.add_argument("baseline", help="baseline trace file or folder of runs")
    p.add_argument("current", help="trace file or folder of runs to judge")
    p.add_argument(
        "--max-slowdown",
        type=_percent,
        default=0.05,
        metavar="PCT",
        help="slowdown allowed, e.g. 5%% or 0.05 (default 5%%)",
    )
    p.add_argument("--op", action="append", default=[], metavar="NAME", help="judge this op's self time (repeatable)")
    p.add_argument("--device", action="store_true", help="judge device time instead of host time")
    p.add_argument("--confidence", type=_confidence, default=0.95, metavar="C", help=_CONFIDENCE_HELP)
    p.add_argument("--markdown", action="store_true", help="print a Markdown block for a CI job summary")
    p.set_defaults(func=_guarded(_check))

    from neuronprof.analysis._roofline import DEVICE_PEAKS

    p = subparsers.add_parser(
        "roofline",
        help="compute- or memory-bound? each op against a device's roofline (no torch needed)",
        description="Estimate FLOPs and bytes of every op with recorded shapes and place it on a "
        "device's roofline: arithmetic intensity, achieved vs attainable FLOP/s and GB/s, bound. "
        "Without --device, the peaks are those of the device the trace was recorded on; a trace of the CPU, "
        "or of a device without a preset, is refused.",
    )
    p.add_argument("trace", help="trace file or folder (profiled with record_shapes=True)")
    p.add_argument(
        "--device",
        default=None,
        metavar="NAME",
        help=f"peak preset: {', '.join(DEVICE_PEAKS)} (default: the preset of the device the trace names)",
    )
    p.add_argument(
        "--peak-flops", type=_rate, default=None, metavar="FLOP/S", help="custom peak FLOP/s, e.g. 989e12 or 989T"
    )
    p.add_argument(
        "--peak-bw",
        type=_rate,
        default=None,
        metavar="BYTES/S",
        help="custom peak memory bandwidth in bytes/s, e.g. 3.35e12 or 3350G",
    )
    p.add_argument(
        "--time",
        choices=("auto", "device", "cpu"),
        default="auto",
        help="measured time to use (auto: device time when the trace has it)",
    )
    p.add_argument("--limit", type=_non_negative, default=None, metavar="N", help="show at most N rows")
    p.add_argument("--plot", default=None, metavar="PATH", help="also draw the roofline to PATH (.png or .svg)")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text", help="output format")
    p.set_defaults(func=_guarded(_roofline))

    p = subparsers.add_parser(
        "advise",
        help="what to fix first: findings with their evidence (no torch needed)",
        description="Read a trace and list what to fix first, most costly first: host-device copies, hidden "
        "synchronisations, an idle device, a CPU-bound loop, unfused elementwise chains, dtype conversions, "
        "recompilations, graph breaks, a slow input pipeline, host time between ops, waiting in collectives, "
        "low precision without hardware support, CPU fallbacks, one dominant op. Each finding gives its evidence, "
        "the time at stake, one suggestion and the guide section that explains it. A folder of ranks' traces is "
        "read rank by rank, the straggler named.",
    )
    p.add_argument("trace", help="trace file or folder (a folder of ranks' traces: findings per rank)")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text", help="output format")
    p.set_defaults(func=_guarded(_advise))

    _register_report(subparsers)


_CONFIDENCE_HELP = "confidence level of the verdicts' intervals, e.g. 0.95 or 95%% (default 95%%)"


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


def _percent(text: str) -> float:
    value = _fraction(text, "a slowdown", "5% or 0.05")
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"expected a slowdown from 0% to 1000%, got {text!r}")
    return value


def _confidence(text: str) -> float:
    value = _fraction(text, "a confidence level", "95% or 0.95")
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a confidence from 50% up to (not including) 100%, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _rate(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMgGtTpP]?)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected a number such as 989e12 or 989T, got {text!r}")
    value = float(m.group(1)) * _SUFFIXES[m.group(2).lower()]
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a command (a piped input read first); expected failures are one line on stderr and exit status 2.

    Files of a folder left out as unreadable are named on stderr, one per line, and a
    command that otherwise succeeded exits with ``EXIT_PARTIAL``.
    """

    def run(args: argparse.Namespace) -> int:
        from neuronprof.analysis._pipes import spooled_inputs
        from neuronprof.analysis.trace import collect_unreadable

        shown: dict[str, str] = {}
        try:
            with spooled_inputs(args, _INPUTS) as shown, collect_unreadable() as left_out:
                status = command(args)
            for path, why in left_out.items():
                print(f"neuronprof {_name(args)}: left out {_shown(path, shown)}: {why}", file=sys.stderr)
            return EXIT_PARTIAL if left_out and status == 0 else status
        except (TraceError, ValueError, ImportError) as exc:
            print(f"neuronprof {_name(args)}: error: {_shown(str(exc), shown)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except OSError as exc:  # e.g. the plot path cannot be written
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            print(f"neuronprof {_name(args)}: error: {_shown(where, shown)}{exc.strerror or exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except MemoryError:
            print(f"neuronprof {_name(args)}: error: out of memory", file=sys.stderr)
            return EXIT_BAD_INPUT

    return run


def _shown(text: str, shown: dict[str, str]) -> str:
    """``text`` with the copy of a piped input named as the user named it (``-``, ``/dev/stdin``...)."""
    for copy, name in shown.items():
        text = text.replace(copy, name)
    return text


def _name(args: argparse.Namespace) -> str:
    return str(getattr(args, "command", "") or "")


def _emit(text: str) -> None:
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _summarize(args: argparse.Namespace) -> int:
    from neuronprof.analysis.trace import load_trace

    trace = load_trace(args.trace)
    if trace.ranks and args.ranks != "sum" or args.ranks == "all":
        ranks = trace.rank_table(args.sort, group_by=args.by, device_only=args.device_only)
        _emit(_render(ranks, args.format, args.limit))
        if args.format == "csv":
            _notes_to_stderr(ranks.notes)
        return 0
    table = trace.table(args.sort, row_limit=args.limit, device_only=args.device_only, group_by=args.by)
    _emit(_render(table, args.format, None))
    if args.format == "csv":
        _notes_to_stderr(table.notes)
    return 0


def _render(model: Any, fmt: str, row_limit: Optional[int]) -> str:
    """A result model in ``--format``: each format is the model's own verb."""
    verb = {"text": model.to_text, "markdown": model.to_markdown, "csv": model.to_csv, "json": model.to_json}[fmt]
    return str(verb(row_limit=row_limit))


def _notes_to_stderr(notes: Any) -> None:
    """CSV on stdout holds rows only; its notes go to stderr as the ``# note:`` lines ``to_csv(notes=True)`` writes."""
    from neuronprof.render import csv_notes

    text = csv_notes(notes)
    if text:
        sys.stderr.write(text)


def _diff(args: argparse.Namespace) -> int:
    from neuronprof.analysis._diff import diff

    result = diff(
        args.a, args.b, match=args.by, metric=args.metric, per_step=args.per_step, confidence=args.confidence
    )
    render = {"text": result.to_text, "markdown": result.to_markdown, "json": lambda n: result.to_json(row_limit=n)}
    _emit(render[args.format](args.limit))
    return 0


def _check(args: argparse.Namespace) -> int:
    from neuronprof.analysis._check import check

    result = check(
        args.baseline,
        args.current,
        max_slowdown=args.max_slowdown,
        ops=args.op,
        device=args.device,
        confidence=args.confidence,
    )
    _emit(result.to_markdown() if args.markdown else result.to_text())
    return result.exit_code


def _roofline(args: argparse.Namespace) -> int:
    from neuronprof.analysis._roofline import roofline

    result = roofline(args.trace, args.device, peak_flops=args.peak_flops, peak_bw=args.peak_bw, time_source=args.time)
    if args.plot:
        result.plot(args.plot)
    render = {"text": result.to_text, "markdown": result.to_markdown, "json": lambda n: result.to_json(row_limit=n)}
    _emit(render[args.format](args.limit))
    if args.plot:
        print(f"roofline plot written to {args.plot}", file=sys.stderr)
    return 0


def _advise(args: argparse.Namespace) -> int:
    from neuronprof.analysis.insights import advise

    result = advise(args.trace)
    render: dict[str, Callable[[], str]] = {
        "text": result.to_text,
        "markdown": result.to_markdown,
        "json": result.to_json,
    }
    _emit(render[args.format]())
    return 0


def _register_report(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="one self-contained HTML report of a trace: table, findings, timeline (no torch needed)",
        description="Write one HTML file to look at and share: the trace's settings, the sortable and filterable "
        "op table, the findings of `neuronprof advise` and a zoomable step timeline. It opens offline in any "
        "browser; nothing is loaded from the network.",
    )
    p.add_argument("trace", help="trace file or folder")
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="PATH",
        help="the .html file to write (default: the trace's name with .html, beside it)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    p.add_argument(
        "--baseline",
        default=None,
        metavar="TRACE",
        help="a baseline trace file or folder of runs: adds the two-run pane (neuronprof diff BASELINE TRACE)",
    )
    p.set_defaults(func=_guarded(_report))


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from neuronprof._io import write_text
    from neuronprof.analysis.insights import analyze, analyze_ranks, timeline_from_trace
    from neuronprof.analysis.trace import load_trace
    from neuronprof.report import environment, render_report, trace_settings

    source = Path(args.trace)
    if args.output is not None:
        target = Path(args.output)
    elif "trace" in getattr(args, "piped", ()):
        raise ValueError("the trace comes from a pipe, so there is no folder to write the report beside: pass -o PATH")
    else:
        base = source.name if source.is_dir() else re.sub(r"(\.pt\.trace)?\.json(\.gz)?$", "", source.name)
        target = source.parent / f"{base}.html"
    if target.exists() and not args.overwrite:
        raise ValueError(f"{target} exists; pass --overwrite to replace it")
    trace = load_trace(source)
    timeline = timeline_from_trace(source)
    # Several ranks ran their steps side by side: each is read, and drawn, on its own.
    insights = analyze_ranks(timeline) if timeline.ranks else analyze(timeline)
    ranks: dict[str, Any] = {"steps": trace.steps, "rank": trace.rank}
    if trace.ranks:
        straggler = getattr(insights, "straggler", None)
        ranks = {
            "ranks": f"{len(trace.ranks)}" + ("" if straggler is None else f"; straggler: rank {straggler}"),
            "steps": ", ".join(f"rank {t.rank}: {t.steps}" for t in trace.ranks),
        }
    settings = {
        "trace": getattr(args, "piped", {}).get("trace", trace.source),
        "backend": trace.backend,
        "device": trace.device_name or trace.device_label or "none (CPU only)",
        **trace_settings(source),
        **ranks,
        "report made with neuronprof": environment()["neuronprof"],
    }
    baseline = None
    if args.baseline is not None:
        from neuronprof.analysis._diff import diff

        baseline = diff(args.baseline, trace)
    text = render_report(
        trace.table("device"),
        insights=insights,
        timeline=timeline,
        settings=settings,
        title=getattr(args, "piped", {}).get("trace", source.name),
        baseline=baseline,
    )
    write_text(target.resolve(), text, overwrite=args.overwrite)
    print(f"report written to {target}", file=sys.stderr)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    """Run only the analysis sub-commands (a test seam; ``neuronprof`` itself is ``neuronprof.cli.main``)."""
    parser = argparse.ArgumentParser(prog="neuronprof")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)
