"""The unfused-chain rule reads every step's top-level calls at once: the same findings as the call-by-call scan.

The rule finds its runs with array operations over all steps' calls together, and does
work per run found only. Each part is checked here, on generated inputs, against the
plain version it replaces: the scan of each step's calls one after another, with the
same tests of each pair of calls.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Optional

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronprof.analysis.insights._copies import _in_optimizer
from neuronprof.analysis.insights._findings import CHAIN_MIN_OPS, Finding
from neuronprof.analysis.insights._op_rules import _chain_suggestion, _chains, _feeds, _is_attention, _runs
from neuronprof.analysis.insights._tally import _per_step, _Tally
from neuronprof.analysis.insights._timeline import DeviceEvent, HostEvent, Timeline
from neuronprof.analysis.insights._tree import ELEMENTWISE_OPS, MATMUL_OPS, _Node, _Profile


def _reference_runs(link: list[bool], fed: list[bool], new: list[bool], bias: list[bool]) -> list[tuple[int, ...]]:
    """The scan: each run grows while the next call is linked and fed; a bias add at a run's start is a run alone."""
    runs = []
    i = 0
    while i < len(link):
        if not link[i]:
            i += 1
            continue
        j = i + 1
        while j < len(link) and link[j] and not new[j] and fed[j]:
            j += 1
        if bias[i]:
            j = i + 1
        runs.append((i, j, bias[i]))
        i = j
    return runs


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()), max_size=40))
def test_the_runs_found_at_once_are_the_scans(calls: list[tuple[bool, bool, bool, bool]]) -> None:
    link, fed, new, bias = (list(c) for c in zip(*calls)) if calls else ([], [], [], [])
    if new:
        new[0] = True
    n = len(link)
    links, news = np.array(link, bool).reshape(n), np.array(new, bool).reshape(n)
    cont = np.zeros(n, bool)
    cont[1:] = links[1:] & links[:-1] & ~news[1:] & np.array(fed[1:], bool)
    asked: list[int] = []

    def bias_add(starts: Any) -> Any:
        asked.extend(starts.tolist())
        return np.array([bias[s] for s in starts.tolist()], bool)

    starts, ends, adds = _runs(links, cont, bias_add)
    assert list(zip(starts.tolist(), ends.tolist(), adds.tolist())) == _reference_runs(link, fed, new, bias)
    assert sorted(asked) == starts.tolist()  # asked of the runs' starts only


def _has_own_bias(matmul: _Node) -> bool:
    shapes = matmul.input_shapes
    if matmul.name == "aten::linear" and shapes and len(shapes) >= 3 and shapes[2]:
        return True
    return any(n.name in ("aten::addmm", "aten::baddbmm") for n in matmul.walk()[1:])


def _bias_add(matmul: _Node, add: _Node) -> bool:
    shapes = add.input_shapes
    if not shapes or len(shapes) < 2 or not shapes[0] or not shapes[1] or _has_own_bias(matmul):
        return False
    big, small = sorted(shapes[:2], key=len, reverse=True)
    if len(big) == len(small) and big == small:
        return False
    return small[-1] == big[-1] and all(d == 1 for d in small[:-1])


def _reference_chains(p: _Profile) -> list[Finding]:
    """The rule as a scan of each step's top-level calls, one call after another."""
    tally = _Tally()
    totals: defaultdict[Any, int] = defaultdict(int)
    gaps: defaultdict[Any, int] = defaultdict(int)
    f = p.forest
    found: list[tuple[Any, ...]] = []
    for tally.step, step in enumerate(p.steps):
        rows = step.top_rows
        if not len(rows):
            continue
        nodes = f.nodes(rows)
        tops = [n.name for n in nodes]
        link = [n.name in ELEMENTWISE_OPS and not _in_optimizer(n) for n in nodes]
        i = 0
        while i < len(tops):
            if not link[i]:
                i += 1
                continue
            j = i + 1
            while j < len(tops) and link[j] and _feeds(nodes[j - 1], nodes[j]):
                j += 1
            before = tops[i - 1] if i > 0 else None
            addmm = (
                before in MATMUL_OPS
                and tops[i] in ("aten::add", "aten::add_")
                and _feeds(nodes[i - 1], nodes[i])
                and _bias_add(nodes[i - 1], nodes[i])
            )
            if addmm:
                j = i + 1
            run = tops[i:j]
            after = tops[j] if j < len(tops) else None
            attention = _is_attention(run, before, after)
            if len(run) >= CHAIN_MIN_OPS or addmm or attention:
                timed = rows[i - 1 : j + 1] if attention else rows[i:j]
                found.append((tally.step, tuple(run), before, after, addmm or attention, addmm, timed))
            i = j
    if p.has_device_time:
        costs, gap_ns = f.device_costs([c[-1] for c in found])
    else:
        costs, gap_ns = [(f.end[c[-1]] - f.start[c[-1]]).tolist() for c in found], [0] * len(found)
    for (tally.step, names, before, after, fused, addmm, _), cost, gap in zip(found, costs, gap_ns):
        stake = sum(cost) if addmm else sum(cost) - max(cost)
        key = (names, before, after) if fused else (names, None, None)
        tally.add(key, stake, (before, after))
        totals[key] += sum(cost)
        gaps[key] += gap
    findings = []
    label = "device" if p.has_device_time else "host"
    for key in tally.calls:
        names = key[0]
        before, after = tally.extra[key]
        detail = f"{len(names)} separate ops, each a full pass over memory; {label} time shown"
        if p.has_device_time and gaps[key]:
            detail += f"; {_per_step(gaps[key], p.n):.1f} µs/step of gaps between their device executions"
        if _is_attention(names, before, after):
            title = "Attention written as matmul, softmax, matmul: one fused op exists"
            ops = (str(before), *names, str(after))
            detail = f"the seq × seq scores go through memory between {len(names) + 2} ops; {label} time shown"
        elif len(names) == 1:
            title = f"{before} then {names[0]}: an unfused bias add"
            ops = (str(before), *names)
            detail = f"the bias is added in a second pass over the matmul's output; the add's own {label} time shown"
        else:
            title = f"{len(names)} elementwise ops in a row could be one fused op"
            ops = names
        suggestion = _chain_suggestion(names, before, after)
        findings.append(tally.finding(p, key, "unfused_chain", title, ops, detail, suggestion, totals[key]))
    return findings


_OPS = [
    "aten::add",
    "aten::add_",
    "aten::mul",
    "aten::mean",
    "aten::rsqrt",
    "aten::sub",
    "aten::sqrt",
    "aten::softmax",
    "aten::relu",
    "aten::mm",
    "aten::bmm",
    "aten::linear",
    "aten::cat",
]
_SHAPES: list[Optional[tuple[tuple[int, ...], ...]]] = [
    None,
    ((4, 8), (4, 8)),
    ((4, 8), (8,)),
    ((4, 8), (1, 8)),
    ((4, 8), ()),
    ((4, 1), (4, 8)),
    ((4, 16), (16, 8)),
    ((4, 16), (8, 16)),
    ((4, 16), (8, 16), (8,)),
    ((2, 4, 8), (2, 8, 4)),
    ((2, 4, 4), ()),
]


def _random_timeline(seed: int) -> Timeline:
    """Steps of random calls: elementwise ops, matmuls (some running an addmm), an optimizer's step, other ops."""
    rng = random.Random(seed)
    host: list[HostEvent] = []
    device: list[DeviceEvent] = []
    t, ext = 0, 0
    steps = rng.choice([0, 1, 1, 2, 3])
    for s in range(max(steps, 1)):
        step_start = t
        t += 100
        for _ in range(rng.randint(0, 18)):
            name = rng.choice(_OPS)
            start, end = t, t + rng.randint(200, 3_000)
            ext += 1
            host.append(HostEvent(name, start, end, ext_id=ext, input_shapes=rng.choice(_SHAPES)))
            if name in MATMUL_OPS and rng.random() < 0.3:
                inner = rng.choice(["aten::addmm", "aten::baddbmm", "aten::t"])
                host.append(HostEvent(inner, start + 10, end - 10, ext_id=ext + 1000))
            if rng.random() < 0.15:
                # An optimizer's step around a few ops: torch.optim's own, never a chain.
                host.append(HostEvent("Optimizer.step#SGD.step", start - 5, end + 5, category="annotation"))
            for _k in range(rng.choice([0, 1, 1, 2])):
                d = start + rng.randint(0, 4_000)
                device.append(DeviceEvent("kernel", d, d + rng.randint(100, 2_000), ext_id=ext))
            t = end + rng.randint(10, 300)
        if steps:
            host.append(HostEvent(f"ProfilerStep#{s}", step_start, t + 50, category="step"))
            if rng.random() < 0.2:  # a step inside an optimizer's range: its calls are the step's own
                host.append(
                    HostEvent("Optimizer.zero_grad#SGD.zero_grad", step_start - 5, t + 55, category="annotation")
                )
        t += 200
    if rng.random() < 0.3:
        device = []
    label = "CUDA" if device or rng.random() < 0.5 else None
    return Timeline(tuple(host), tuple(device), device_label=label)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32))
def test_the_chains_found_at_once_are_the_scans(seed: int) -> None:
    p = _Profile(_random_timeline(seed))
    assert repr(_chains(p)) == repr(_reference_chains(p))


def test_the_generated_steps_hold_every_kind_of_chain() -> None:
    # The generator above reaches the rule's cases: plain chains, bias adds, attention, with and without device time.
    seen = set()
    for seed in range(300):
        p = _Profile(_random_timeline(seed))
        for finding in _chains(p):
            seen.add((finding.title.split(" ")[-1], p.has_device_time))
    assert {("op", True), ("op", False), ("add", True), ("add", False), ("exists", True)} <= seen
