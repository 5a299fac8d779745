"""``neuronprof doctor``: what this environment can profile, and what to fix.

It is the first thing to run when a device column comes out empty.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from typing import Any

__all__ = ["diagnose", "register"]


def diagnose() -> dict[str, Any]:
    """Collect the facts ``neuronprof doctor`` prints, as a JSON-ready dict.

    Returns:
        Keys ``python``, ``torch``, ``kineto``, ``privateuse1``, ``activities``,
        ``backends`` (each with ``available`` and a ``reason`` when not), ``auto``
        and ``problems`` (a list of one-line hints).
    """
    from neuronprof import __version__

    facts: dict[str, Any] = {"neuronprof": __version__, "python": platform.python_version(), "problems": []}
    problems: list[str] = facts["problems"]
    try:
        import torch
        import torch.profiler
    except ImportError as exc:
        facts["torch"] = None
        problems.append(f"torch is not importable ({exc}): pip install torch")
        return facts

    from neuronprof.backends import auto_choice, describe_backends
    from neuronprof.backends.base import PRIVATEUSE1_MIN_TORCH, privateuse1_name, torch_version

    facts["torch"] = torch.__version__
    facts["kineto"] = bool(torch.autograd.kineto_available())
    if not facts["kineto"]:
        problems.append("this torch build has no kineto: device activity cannot be profiled; install an official build")
    pu1 = privateuse1_name()
    facts["privateuse1"] = pu1
    supported = torch.profiler.supported_activities()
    # A renamed PrivateUse1 activity prints under the backend's name ("MYDEV").
    facts["activities"] = sorted(
        "PrivateUse1" + (f" ({pu1.upper()})" if pu1 else "")
        if a == torch.profiler.ProfilerActivity.PrivateUse1
        else str(a).split(".")[-1]
        for a in supported
    )
    facts["backends"] = describe_backends()
    facts["auto"] = auto_choice()
    need = ".".join(map(str, PRIVATEUSE1_MIN_TORCH))
    if pu1 is not None and torch_version() < PRIVATEUSE1_MIN_TORCH:
        problems.append(f"PrivateUse1 device time needs torch >= {need}; upgrade torch and the {pu1} plugin")
    if pu1 is not None and torch.profiler.ProfilerActivity.PrivateUse1 not in supported:
        problems.append(
            f"{pu1} is registered but torch.profiler lists no PrivateUse1 activity: its profiler plugin did not load"
        )
    for info in facts["backends"]:
        if info["name"] == "neuron" and not info["available"]:
            problems.append(f"neuron: {info['reason']}")
    if facts["auto"] == "cpu":
        problems.append("no accelerator found: sessions will profile the CPU only (no device columns)")
    return facts


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
    if facts["problems"]:
        print("hints:")
        for line in facts["problems"]:
            print(f"  - {line}")
    else:
        print("no problems found")


def _run(args: argparse.Namespace) -> int:
    facts = diagnose()
    if args.json:
        json.dump(facts, sys.stdout, indent=2)
        print()
    else:
        _print_report(facts)
    return 0


def register(subparsers: Any) -> None:
    """Add ``neuronprof doctor`` to the command-line parser."""
    parser = subparsers.add_parser(
        "doctor",
        help="check what this environment can profile",
        description="Report torch, kineto, the PrivateUse1 backend, available backends and what "
        "session(backend='auto') would pick, with a hint for each problem found.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_run)
