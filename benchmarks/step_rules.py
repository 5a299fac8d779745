"""CPU time of the findings rules that read every step: ``host_overhead`` and ``idle_device``.

The trace is read once (its forest and ``_Profile``), then each rule runs ``--rounds``
times on it; prints each rule's best CPU seconds. A long trace of many steps (a
thousand steps or more) shows what reading the steps costs. To compare two trees,
run it with each one's ``src`` on ``PYTHONPATH``, one after the other.

    python benchmarks/step_rules.py TRACE [--rounds 3]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from neuronprof.analysis import load_trace
    from neuronprof.analysis.insights._device_rules import _idle_and_bound
    from neuronprof.analysis.insights._step_rules import _step_time
    from neuronprof.analysis.insights._trace import read_of
    from neuronprof.analysis.insights._tree import _Profile
    from neuronprof.analysis.insights._tree_reader import forest_of

    timeline, columns, keys = read_of(load_trace(args.trace))
    if timeline.ranks:
        raise SystemExit("one rank's trace, please: a folder of ranks is read rank by rank")
    (offset, whats) = keys[0]
    p = _Profile(timeline, forest_of(columns, whats, offset))
    print(f"{args.trace}: {p.n} steps, {len(p.forest)} host events, {len(p.forest.dstart)} device events")
    for rule in (_step_time, _idle_and_bound):
        best = float("inf")
        for _ in range(args.rounds):
            start = time.process_time()
            rule(p)
            best = min(best, time.process_time() - start)
        print(f"{rule.__name__:>16}: {best:.3f} s CPU (best of {args.rounds})")


if __name__ == "__main__":
    main()
