"""``neuronprof doctor``: what this environment can profile, and what to fix."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional

from neuronprof.commands import CommandError

HELP = "check what this environment can profile"
DESCRIPTION = (
    "Report torch, kineto, the PrivateUse1 backend, available backends and what session(backend='auto') would "
    "pick, with a hint for each problem found. With --probe, profile one tiny op on the device and report what "
    "reached torch.profiler."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--probe",
        action="store_true",
        help="run one tiny op under the profiler and report: device kernels linked to ops, unlinked kernels, "
        "runtime events only, or nothing",
    )
    parser.add_argument(
        "--backend",
        default="auto",
        help="backend to ask about: probed with --probe, and how to install it when it is missing (default: auto)",
    )


def run(args: argparse.Namespace) -> int:
    from neuronprof._doctor import diagnose, probe
    from neuronprof.errors import BackendUnavailableError

    facts = diagnose(args.backend)
    found: Optional[dict[str, Any]] = None
    if args.probe:
        try:
            found = probe(args.backend)
        except BackendUnavailableError as exc:
            raise CommandError(str(exc), exit_code=1) from exc
        facts["probe"] = found
        # The probe has run: the hint to run it is noise here.
        facts["problems"] = [p for p in facts["problems"] if "doctor --probe" not in p]
    if args.json:
        json.dump(facts, sys.stdout, indent=2)
        print()
    else:
        _print_report(facts)
        if found is not None:
            _print_probe(found)
    return 0


def _print_report(facts: dict[str, Any]) -> None:
    print(f"neuronprof {facts['neuronprof']} on Python {facts['python']}")
    if facts.get("torch") is None:
        print("torch:       not importable")
    else:
        print(f"torch:       {facts['torch']} (kineto: {'yes' if facts['kineto'] else 'no'})")
        print(f"PrivateUse1: {facts['privateuse1'] or 'not registered'}")
        print(f"activities:  {', '.join(facts['activities'])}")
        print("backends:")
        for info in facts["backends"]:
            mark = "ok" if info["available"] else "--"
            reason = "" if info["available"] else f"  ({info['reason']})"
            print(f"  [{mark}] {info['name']}{reason}")
        print(f"auto picks:  {facts['auto']}")
        if facts.get("neuron_build"):
            version = facts.get("neuron_version")
            print(
                f"TorchNeuron: {facts['neuron_build']} profiling API"
                + (f" (torch-neuronx {version})" if version else "")
            )
    if facts["problems"]:
        print("hints:")
        for line in facts["problems"]:
            print(f"  - {line}")
    else:
        print("no problems found")


def _print_probe(found: dict[str, Any]) -> None:
    print(f"probe:       one op on {found['placed']} under the {found['backend']} backend")
    print(f"result:      {found['result']}: {found['meaning']}")
    for note in found["notes"]:
        print(f"  note: {note}")
