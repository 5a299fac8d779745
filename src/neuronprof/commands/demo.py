"""``neuronprof demo``: run a case study of ``examples/`` with ``neuronprof.compare()``."""

from __future__ import annotations

import argparse

from neuronprof._demo import DEMOS, SUMMARIES

HELP = "run a case study: rmsnorm, mlp or attention"
DESCRIPTION = (
    "Run one of neuronprof's case studies with neuronprof.compare() and print the comparison. Options after the "
    "case go to the case study itself, e.g. "
    "`neuronprof demo rmsnorm --device cpu --shape 1024x1024 --plot rmsnorm.png`; "
    "`neuronprof demo attention --help` lists them."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "cases:\n" + "\n".join(f"  {name:<10} {SUMMARIES[name]}" for name in DEMOS)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("demo", nargs="?", choices=DEMOS, default="rmsnorm", help="the case study (default: rmsnorm)")
    parser.add_argument("demo_args", nargs=argparse.REMAINDER, help="options for the case study (see its --help)")


def run(args: argparse.Namespace) -> int:
    from neuronprof._demo import run_demo

    return run_demo(args.demo, list(args.demo_args))
