"""The rule of last resort: one op takes most of the time, so start there.

Applied after every other rule (``RULE_MODULES`` lists this module last).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from neuronprof import _vocabulary as vocab
from neuronprof.analysis._arrays import present
from neuronprof.analysis.insights._dtypes import _torch_dtype
from neuronprof.analysis.insights._findings import DOMINANT_MIN_STEP_SHARE, DOMINANT_SHARE, Evidence, Finding
from neuronprof.analysis.insights._forest import find
from neuronprof.analysis.insights._tally import (
    _per_step,
    _share,
)
from neuronprof.analysis.insights._tree import (
    _MACHINERY,
    _bookkeeping,
    _is_region,
    _NameMemo,
    _Profile,
)


def _dominant(p: _Profile) -> list[Finding]:
    """``dominant_op``: one op takes most of the time: start there.

    Rule: self time per op name (device time where the profile has it, else host
    time), summed over the steps; the top name fires when it holds more than
    ``DOMINANT_SHARE`` (50 %) of the total and at least ``DOMINANT_MIN_STEP_SHARE``
    (10 %) of the step. torch.compile's machinery (``## Call
    CompiledFxGraph <hash> ##``, ``PythonDispatchMode``, the AOT runtime wrappers;
    ``_MACHINERY``) is never named: its time counts for the compiled region around it
    (``Torch-Compiled Region: k/n``), which is named instead when it dominates.
    Collectives (``c10d::allreduce_``...) are never named: their time is communication.
    No time-at-stake estimate: how much of it can be saved depends on the op.
    """
    import numpy as np

    totals: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    dtypes: defaultdict[str, set[str]] = defaultdict(set)
    # What the rule reads from a name, decided once per distinct name: (an op's own time or the compiled
    # region's around it, torch.compile's bookkeeping, a collective op's, a compiled graph's wrapper).
    read = _NameMemo(
        lambda name: (
            _is_region(name) or bool(_MACHINERY.search(name)),
            _bookkeeping(name),
            vocab.is_collective(name, vocab.K_OP),
            bool(_MACHINERY.search(name)),
        )
    )
    torch_dtypes = _NameMemo(lambda types: [_torch_dtype(t) for t in types])
    f = p.forest
    whats = f.whats
    reads = [read[w[4]] if w[0] is not None else (False, False, False, False) for w in whats]
    # The rows the rule reads, step by step: ops and compiled regions (and their wrappers), less
    # torch.compile's bookkeeping and what runs inside it, and collectives.
    read_keys = np.array([r[0] or w[0] == "op" for r, w in zip(reads, whats)], bool)
    skipped = np.array([r[1] or r[2] for r in reads], bool)
    bookkeeping = np.array([r[1] for r in reads], bool)
    wrapper = np.array([r[3] for r in reads], bool)
    names: dict[str, int] = {}
    of_key = np.array([names.setdefault(w[4], len(names)) for w in whats], np.int32)
    # Each op's self time, or the summed time of the device work it launched (by_owner's running sum).
    reached = np.concatenate(([0], np.cumsum(f.dend[f.by_owner] - f.dstart[f.by_owner])))
    for at in range(0, p.n, _STEPS_AT_ONCE):  # some steps at a time: a few arrays of their rows each
        rows = np.concatenate([p.rows(st, read_keys) for st in p.steps[at : at + _STEPS_AT_ONCE]])
        up = f.parent[rows]
        rows = rows[~skipped[f.key[rows]] & ~((up >= 0) & bookkeeping[f.key[np.maximum(up, 0)]])]
        if not p.has_device_time:
            values = f.self_ns(rows)
        else:
            values = reached[find(f.owners, rows + 1)] - reached[find(f.owners, rows)]
        # Each row's name (a compiled graph's wrapper: its compiled region's, else nobody's: -1).
        keys = f.key[rows]
        named = of_key[keys]
        own = ~wrapper[keys]
        for i in np.flatnonzero(~own).tolist():
            region = f.node(int(rows[i])).parent
            while region is not None and not _is_region(region.name):
                region = region.parent
            named[i] = -1 if region is None else names.setdefault(region.name, len(names))
        kept = named >= 0
        named, values, own, keys = named[kept], values[kept], own[kept], keys[kept]
        found, firsts, inverse = np.unique(named, return_index=True, return_inverse=True)
        sums = np.zeros(len(found), np.int64)
        np.add.at(sums, inverse.reshape(-1), values)
        counts = np.bincount(inverse.reshape(-1)[own], minlength=len(found)).tolist()
        listed = list(names)
        for j in np.argsort(firsts, kind="stable").tolist():  # in the order first met, as the steps are read
            name = listed[int(found[j])]
            totals[name] += int(sums[j])
            calls[name] += counts[j]
        for k in present(keys[own]):
            dtypes[whats[k][4]].update(torch_dtypes[whats[k][3] or ()])
    total = sum(totals.values())
    if not total:
        return []
    name, value = totals.most_common(1)[0]
    share = value / total
    label = "device" if p.has_device_time else "host"
    us = _per_step(value, p.n)
    of_step = _share(us, p.mean_step_ns / 1000) or 0.0
    if share <= DOMINANT_SHARE or len(totals) < 2 or of_step < DOMINANT_MIN_STEP_SHARE:
        return []
    return [
        Finding(
            kind="dominant_op",
            title=f"{name} takes {share:.0%} of the {label} time in ops ({of_step:.0%} of the step): start there",
            evidence=Evidence(
                (name,),
                calls[name] / p.n,
                us,
                of_step,
                f"{share:.0%} of the self {label} time of all ops",
            ),
            estimated_us=None,
            suggestion=_dominant_suggestion(p, name, dtypes[name]),
        )
    ]


def _dominant_suggestion(p: _Profile, name: str, dtypes: set[str]) -> str:
    """What to look at for the dominant op, in words true for this run (what it recorded, where it ran)."""
    if _is_region(name):
        return (
            "it is compiled code already: try torch.compile(mode='max-autotune') or a larger batch, and see "
            "what it runs with TORCH_COMPILE_DEBUG=1"
        )
    look = (
        f"compare {name}'s input shapes (s.table() gives each shape its own row; offline: "
        "neuronprof summarize --group-by shape)"
        if p.record_shapes
        else f"record shapes (record_shapes=True) to see {name}'s input shapes"
    )
    if p.has_device_time:
        look += " and its place on the roofline (s.roofline())"
    ways = ["a better layout", "a fused form"]
    wide = dtypes & {"torch.float32", "torch.float64"}
    low = dtypes & {"torch.bfloat16", "torch.float16"}
    # A smaller dtype helps where the hardware computes it natively: a device, or a CPU known to.
    if wide and not low and (p.has_device_time or (p.tl.native_dtypes or ())):
        ways.insert(0, "a smaller dtype")
    return f"{look}: {', '.join(ways[:-1])} or {ways[-1]} may speed it up"


_STEPS_AT_ONCE = 64
"""How many steps' rows ``_dominant`` reads at a time."""

RULES = (_dominant,)
"""The rules of this module, in the order ``analyze`` applies them."""
