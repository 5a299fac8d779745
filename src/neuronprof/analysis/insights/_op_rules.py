"""The rules about the ops themselves: unfused chains and dtype conversions."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from neuronprof.analysis.insights._copies import (
    _cause,
    _dtype_pair,
    _in_optimizer,
    _is_scalar_source,
    _outer_wrapper,
)
from neuronprof.analysis.insights._dtypes import _family
from neuronprof.analysis.insights._findings import (
    CHAIN_MIN_OPS,
    Finding,
)
from neuronprof.analysis.insights._intervals import _array, _union
from neuronprof.analysis.insights._tally import (
    _per_step,
    _Tally,
)
from neuronprof.analysis.insights._tree import (
    _OPTIMIZER,
    COPY_OPS,
    ELEMENTWISE_OPS,
    MATMUL_OPS,
    _NameMemo,
    _Node,
    _Profile,
)

if TYPE_CHECKING:
    from neuronprof.analysis.insights._forest import _Forest

_FUSED_FORMS: tuple[tuple[str, frozenset[str], str], ...] = (
    (
        "rms_norm",
        frozenset({"aten::mean", "aten::rsqrt", "aten::mul"}),
        "torch.rms_norm(x, (x.shape[-1],), weight, eps) (or torch.nn.RMSNorm): one op instead of the chain",
    ),
    (
        "layer_norm",
        frozenset({"aten::mean", "aten::sub", "aten::sqrt"}),
        "torch.nn.functional.layer_norm (or torch.nn.LayerNorm): one op instead of the chain",
    ),
    (
        "layer_norm",
        frozenset({"aten::mean", "aten::sub", "aten::rsqrt"}),
        "torch.nn.functional.layer_norm (or torch.nn.LayerNorm): one op instead of the chain",
    ),
)


def _is_attention(names: Sequence[str], before: Optional[str], after: Optional[str]) -> bool:
    """A softmax (with its scaling and masking) between two matmuls: attention written by hand."""
    return bool({"aten::softmax", "aten::_softmax"} & set(names)) and before in MATMUL_OPS and after in MATMUL_OPS


def _chain_suggestion(names: Sequence[str], before: Optional[str], after: Optional[str]) -> str:
    present = set(names)
    if _is_attention(names, before, after):
        return "torch.nn.functional.scaled_dot_product_attention: one fused attention op"
    if len(names) == 1 and before in MATMUL_OPS and names[0] in ("aten::add", "aten::add_"):
        return (
            "nn.Linear or torch.nn.functional.linear(x, weight, bias) (torch.addmm for 2-D inputs): the bias add "
            "fused into the matmul"
        )
    for _form, needed, text in _FUSED_FORMS:
        if needed <= present:
            return text
    return "torch.compile the function: it fuses these elementwise ops into one kernel"


_REDUCTIONS = frozenset(
    "aten::" + n
    for n in ("mean", "sum", "var", "var_mean", "std", "amax", "softmax", "_softmax", "log_softmax", "_log_softmax")
)


def _feeds(prev: _Node, cur: _Node) -> bool:
    """Whether ``cur`` may consume ``prev``'s output: the data-dependence test of a chain.

    Traces record input shapes, not tensor ids or output shapes, so this is a heuristic:
    with shapes recorded for both ops, ``cur`` must take an input of a shape ``prev``
    took (an elementwise op's output has its input's shape), of a matmul's output
    shape after a matmul (``mm`` ``(n, k) @ (k, m)`` → ``(n, m)``), or, after a reduction,
    an input of the same rank as the reduced one (``mean(-1, keepdim=True)``). Without
    shapes, any two consecutive ops on the step's thread with no other op between pass.
    """
    a, b = prev.input_shapes, cur.input_shapes
    if not a or not b:
        return True
    a_shapes = {s for s in a if s}
    b_shapes = {s for s in b if s}
    if not a_shapes or not b_shapes:
        return True  # only scalars recorded: nothing to compare
    if prev.name in MATMUL_OPS:
        # A matmul's output: the first input's leading dims and the second's last one.
        if len(a) >= 2 and a[0] and a[1]:
            last = a[1][0] if prev.name == "aten::linear" else a[1][-1]  # linear's weight is (out, in)
            return (*a[0][:-1], last) in b_shapes
        return True
    if a_shapes & b_shapes:
        return True
    if prev.name in _REDUCTIONS:
        ranks = {len(s) for s in a_shapes}
        return any(len(s) in ranks for s in b_shapes)
    return False


def _bias_shaped(shapes: Optional[tuple[tuple[int, ...], ...]]) -> bool:
    """Whether an ``add``'s recorded inputs are a matmul's output and a bias: what ``addmm`` would fuse.

    Only with recorded shapes: the add takes the matmul's output and a vector of its
    last dimension (``(n, out) + (out,)``, or ``(1, ..., 1, out)``). Two operands of the
    same shape are a residual connection, not a bias. Without shapes a bias and a
    residual look the same, so no claim is made.
    """
    if not shapes or len(shapes) < 2 or not shapes[0] or not shapes[1]:
        return False
    big, small = sorted(shapes[:2], key=len, reverse=True)
    if len(big) == len(small) and big == small:
        return False  # x + residual
    return small[-1] == big[-1] and all(d == 1 for d in small[:-1])


def _own_bias(f: _Forest, rows: Any) -> Any:
    """Per matmul row, whether it adds a bias already (nothing left for ``addmm`` to fuse).

    ``aten::linear`` given a bias, or a matmul that runs ``aten::addmm`` (``aten::baddbmm``)
    under it, as ``nn.Linear(bias=True)`` does (the matmul itself does not count).
    """
    import numpy as np

    found, back = np.unique(f.key[rows], return_inverse=True)
    given = [(f.whats[k][4], f.whats[k][2]) for k in found.tolist()]
    linear = np.array([name == "aten::linear" and bool(s and len(s) >= 3 and s[2]) for name, s in given], bool)
    linear = linear[back.reshape(-1)]
    # The rows under each matmul: from the one after it to the last of its subtree.
    lo = np.asarray(rows, np.int64) + 1
    counts = f.last[rows] + 1 - lo
    under = np.arange(int(counts.sum())) + np.repeat(lo - np.cumsum(counts) + counts, counts)
    adds = f.key_mask(lambda name, _category: name in ("aten::addmm", "aten::baddbmm"))[f.key[under]]
    owner = np.repeat(np.arange(len(lo)), counts)
    return linear | (np.bincount(owner[adds], minlength=len(lo)) > 0)


def _feeding(whats: Sequence[tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    """``_feeds`` of pairs of keys (two int arrays: the previous op's, the next one's), each pair by position.

    ``_feeds`` reads a name and two recorded signatures, which a trace repeats: it is asked once per
    distinct pair of keys.
    """
    import numpy as np

    n = len(whats)
    signed = _NameMemo(lambda k: _Node(whats[k][4], 0, 0, input_shapes=whats[k][2]))

    def feeds(prev: Any, cur: Any) -> Any:
        found, back = np.unique(prev.astype(np.int64) * n + cur, return_inverse=True)
        return np.array([_feeds(signed[c // n], signed[c % n]) for c in found.tolist()], bool)[back.reshape(-1)]

    return feeds


def _in_optimizer_rows(f: _Forest, rows: Any) -> Any:
    """Per row, whether it runs inside ``Optimizer.step``/``zero_grad``: a row above it, below its step, is one."""
    import numpy as np

    optimizer = f.key_mask(lambda name, _category: _OPTIMIZER.match(name))
    is_step = f.key_mask(lambda _name, category: category == "step")
    out = np.zeros(len(rows), bool)
    at, up = np.arange(len(rows)), f.parent[rows]
    while len(at):
        keys = f.key[np.maximum(up, 0)]
        climb = (up >= 0) & ~is_step[keys]  # up to the root, or to the step
        inside = climb & optimizer[keys]
        out[at[inside]] = True
        climb &= ~inside
        at, up = at[climb], f.parent[up[climb]]
    return out


def _runs(link: Any, cont: Any, bias_add: Callable[[Any], Any]) -> tuple[Any, Any, Any]:
    """The runs of ops that may be one chain, as positions in a sequence of ops: ``(starts, ends, bias adds)``.

    A run is as long as each op may be in a chain (``link``) and continues the run of the
    op before it (``cont``: both linked, in one step, the one fed by the other), except that
    an op which ``bias_add`` (asked of the positions that start runs) calls a bias add is a run
    of its own, and the rest of its run a run that starts after it. Runs are in order, each
    ``[start, end)``; the third array says which runs are bias adds.
    """
    import numpy as np

    starts = np.flatnonzero(link & ~cont)
    ends = np.flatnonzero(link & ~np.append(cont[1:], False)) + 1
    done: list[tuple[Any, Any, Any]] = [(starts[:0], ends[:0], np.zeros(0, bool))]
    while len(starts):
        cut = bias_add(starts)
        done.append((starts[~cut], ends[~cut], np.zeros(int((~cut).sum()), bool)))
        starts, ends = starts[cut], ends[cut]
        done.append((starts, starts + 1, np.ones(len(starts), bool)))
        rest = ends > starts + 1
        starts, ends = starts[rest] + 1, ends[rest]
    starts, ends, bias = (np.concatenate(parts) for parts in zip(*done))
    order = np.argsort(starts, kind="stable")
    return starts[order], ends[order], bias[order]


def _chains(p: _Profile) -> list[Finding]:
    """``unfused_chain``: consecutive small ops that one fused op would replace.

    Rule: a run of at least ``CHAIN_MIN_OPS`` (3) ops called directly by the step,
    one after another, each elementwise or a normalisation's small reduction
    (``ELEMENTWISE_OPS``: ``add``, ``mul``, ``pow``, ``mean``, ``rsqrt``, ``softmax``...),
    each one consuming the previous one's output as far as the trace can tell (see
    ``_feeds``: a shared input shape when shapes are recorded; independent ops on
    tensors of other shapes break the chain);
    also a matmul without a bias of its own followed by an ``add`` of a bias-shaped
    vector, when shapes are recorded (``addmm`` fuses it; see ``_bias_shaped``: a residual
    add of two same-shaped tensors or a Python number is not a bias), and any run
    holding a softmax between two matmuls (attention). Ops inside a
    library op (``aten::rms_norm``'s own decomposition), a compiled region or an
    optimizer's step (``Optimizer.step#...``: its per-parameter ``add_``, ``sqrt``,
    ``div``; ``foreach=True``/``fused=True`` is the optimizer's own fix) are not the
    caller's to fuse and never count. The suggestion names the fused op when the
    chain matches one (``rms_norm``, ``layer_norm``, ``scaled_dot_product_attention``,
    ``addmm``), else ``torch.compile``. A bias add is reported on its own, and the ops
    after it (an activation) are read as a run of their own. Time at stake: the
    chain's device time minus its longest op's (one fused pass remains; for
    attention the two matmuls count in the chain; for a bias add, the add's whole
    time), or the same on host time without device time.
    """
    import numpy as np

    f = p.forest
    whats = f.whats
    # Every step's top-level calls in one sequence, read at once; a run never crosses into the next step.
    tops = [s.top_rows for s in p.steps if len(s.top_rows)]
    if not tops:
        return []
    rows = np.concatenate(tops)
    n = len(rows)
    new = np.zeros(n, bool)  # each step's first call
    new[np.cumsum([0, *(len(t) for t in tops[:-1])])] = True
    key = f.key[rows]
    # Elementwise ops, less those inside an optimizer's step (torch.optim's own internals).
    link = f.key_mask(lambda name, _category: name in ELEMENTWISE_OPS)[key]
    link[link] = ~_in_optimizer_rows(f, rows[link])
    feeds = _feeding(whats)
    cont = np.zeros(n, bool)
    follow = np.flatnonzero(link[1:] & link[:-1] & ~new[1:]) + 1
    cont[follow] = feeds(key[follow - 1], key[follow])
    matmul = f.key_mask(lambda name, _category: name in MATMUL_OPS)
    add = f.key_mask(lambda name, _category: name in ("aten::add", "aten::add_"))

    def bias_add(starts: Any) -> Any:
        # An add right after a matmul of its step, fed by it, adding a bias the matmul does not add itself.
        out = np.zeros(len(starts), bool)
        at = starts[~new[starts] & add[key[starts]] & matmul[key[starts - 1]]]
        if len(at):
            ok = feeds(key[at - 1], key[at])
            found, back = np.unique(key[at[ok]], return_inverse=True)  # (the add's shapes: once per key)
            ok[ok] = np.array([_bias_shaped(whats[k][2]) for k in found.tolist()], bool)[back.reshape(-1)]
            ok[ok] = ~_own_bias(f, rows[at[ok] - 1])
            out[np.searchsorted(starts, at)] = ok
        return out

    starts, ends, addmm = _runs(link, cont, bias_add)
    # The ops beside each run, in its step (-1: none).
    before = np.where(new[starts], -1, key[starts - 1])
    beside = np.append(~new[1:], False)  # whether the next call is in the same step
    after = np.where(beside[ends - 1], key[np.minimum(ends, n - 1)], -1)
    # A softmax between two matmuls (only there: most runs are not, and need no look at their ops).
    softmax = f.key_mask(lambda name, _category: name in ("aten::softmax", "aten::_softmax"))[key]
    softmaxes = np.concatenate(([0], np.cumsum(softmax)))
    between = (before >= 0) & (after >= 0) & matmul[np.maximum(before, 0)] & matmul[np.maximum(after, 0)]
    attention = between & (softmaxes[ends] > softmaxes[starts])
    kept = (ends - starts >= CHAIN_MIN_OPS) | addmm | attention
    if not kept.any():
        return []
    starts, ends, addmm, attention = starts[kept], ends[kept], addmm[kept], attention[kept]
    before, after = before[kept], after[kept]
    # Attention's matmuls are part of what the fused op replaces: their time counts too.
    lo, hi = starts - attention, ends + attention
    timed = [rows[a:b] for a, b in zip(lo.tolist(), hi.tolist())]
    sizes = hi - lo
    if p.has_device_time:
        costs, gap_ns = f.device_costs(timed)  # each op's device_ns(); gaps between them
        cost, gaps = _array(list(itertools.chain.from_iterable(costs))), _array(gap_ns)
    else:
        timed_rows = np.concatenate(timed)
        cost, gaps = f.end[timed_rows] - f.start[timed_rows], np.zeros(len(timed), np.int64)
    first = np.cumsum(sizes) - sizes
    total = np.add.reduceat(cost, first)
    # One fused pass remains; a fused bias add costs nothing extra.
    stake = np.where(addmm, total, total - np.maximum.reduceat(cost, first))
    # Plain chains are told apart by their ops' names; the fused forms also by their neighbours'.
    names = [w[4] for w in whats]
    ids: dict[str, int] = {}
    name_id = np.array([ids.setdefault(name, len(ids)) for name in names], np.int64)
    seq, width = name_id[key].tobytes(), name_id.itemsize  # the calls' names, as bytes: a run's is a slice
    # A fused form's neighbours, as one number (-1: a plain chain, whatever its neighbours).
    last = np.where(after >= 0, name_id[after] + 1, 0)
    near = np.where(addmm | attention, name_id[np.maximum(before, 0)] * (len(ids) + 1) + last, -1).tolist()
    groups: dict[tuple[bytes, int], int] = {}
    group = [
        groups.setdefault((seq[a * width : b * width], c), len(groups))
        for a, b, c in zip(starts.tolist(), ends.tolist(), near)
    ]
    m = len(groups)
    group_of = np.array(group, np.int64)
    calls = np.bincount(group_of, minlength=m).tolist()
    # Summed run by run in run order, as a float, as _Tally sums them.
    ns = np.bincount(group_of, weights=stake.astype(np.float64), minlength=m).tolist()
    sums = np.zeros((m, 2), np.result_type(total, gaps))  # (Python ints for times past int64)
    np.add.at(sums, group_of, np.stack((total, gaps), 1))
    totals, gap_sums = sums.T.tolist()
    firsts = np.unique(group_of, return_index=True)[1]  # each group's first run, in group order
    tally = _Tally()
    label = "device" if p.has_device_time else "host"
    findings = []
    key_list = key.tolist()
    name_of = names.__getitem__
    suggestions: dict[frozenset[str], str] = {}
    for g, (a, b, k, j, fz, attn) in enumerate(
        zip(*(x[firsts].tolist() for x in (starts, ends, before, after, addmm | attention, attention)))
    ):
        run = tuple(map(name_of, key_list[a:b]))
        nb, na = (names[k] if k >= 0 else None), (names[j] if j >= 0 else None)
        tkey = (run, nb, na) if fz else (run, None, None)
        tally.calls[tkey], tally.ns[tkey] = calls[g], ns[g]
        gap_total = gap_sums[g]
        detail = f"{len(run)} separate ops, each a full pass over memory; {label} time shown"
        if p.has_device_time and gap_total:
            detail += f"; {_per_step(gap_total, p.n):.1f} µs/step of gaps between their device executions"
        if attn:  # (_is_attention of the run and its neighbours; a lone softmax between two matmuls too)
            title = "Attention written as matmul, softmax, matmul: one fused op exists"
            ops = (str(nb), *run, str(na))
            detail = f"the seq × seq scores go through memory between {len(run) + 2} ops; {label} time shown"
        elif len(run) == 1:
            title = f"{nb} then {run[0]}: an unfused bias add"
            ops = (str(nb), *run)
            detail = f"the bias is added in a second pass over the matmul's output; the add's own {label} time shown"
        else:
            title = f"{len(run)} elementwise ops in a row could be one fused op"
            ops = run
        if fz or len(run) == 1:
            suggestion = _chain_suggestion(run, nb, na)
        else:  # (neither attention nor a bias add: what the ops are decides, whatever their order)
            present = frozenset(run)
            suggestion = suggestions.get(present) or suggestions.setdefault(present, _chain_suggestion(run, None, None))
        findings.append(tally.finding(p, tkey, "unfused_chain", title, ops, detail, suggestion, totals[g]))
    return findings


_LOW = frozenset({"torch.bfloat16", "torch.float16"})
_WIDE = frozenset({"torch.float32", "torch.float64"})


def _promotes(src: str, dst: str) -> bool:
    """Whether a 0-dim ``src`` converted to ``dst`` is a Python number's promotion: same family or wider."""
    a, b = _family(src), _family(dst)
    return a is not None and b is not None and a <= b


def _conversions(p: _Profile) -> list[Finding]:
    """``dtype_conversion``: tensors converted to another dtype in every step.

    Rule: an ``aten::_to_copy`` (each call is a real conversion; ``aten::to`` returns
    its input unchanged when nothing changes) that is either called by the step
    itself (an explicit ``.float()``/``.to(dtype)``) or made implicitly by an op the
    step calls directly (``aten::add`` converting a ``double`` Python scalar to
    ``float``). Conversions inside a library op's implementation or an optimizer's
    step (``Optimizer.step#...``) are not counted, and copies already reported as
    ``host_device_copy`` are not reported twice. A 0-dim source (a Python scalar:
    ``x * 3``, ``.add_(1.0)``) converted to a dtype of its own family or a wider one
    (bool → int → float → complex; ``torch.float64`` → ``torch.float32``) is torch's
    type promotion of a number, not the caller's conversion, and is not reported;
    nor is a copy whose source and target dtypes are the same (a move or a layout
    change). An op that converts its float32 input to bfloat16 or float16 by itself
    is autocast (type promotion never narrows): when a run shows one, those casts and
    the implicit conversions of its low-precision results back to float32 (in ops on
    autocast's float32 list, in backward functions, where they meet float32 tensors)
    are named in a note, not reported; explicit ``.to()`` calls and every other
    conversion (a float64 weight meeting them) still are. Without
    recorded dtypes (``record_shapes=False``) a number's promotion, a device move and
    a conversion look the same (so does ``.to(copy=True)`` in the same dtype): none
    is reported, and one note names them and says ``record_shapes=True`` would
    tell. Threshold: any occurrence. Time at stake: the time the conversions keep the
    host or the device busy (the union of their host calls and their device work,
    which overlap), per step.
    """
    tally = _Tally()
    unseen: Counter[str] = Counter()
    autocast: list[tuple[int, Any, int, Any]] = []  # autocast's casts: float32 → bf16/fp16, and back in backward
    narrowed = False
    to_copy = p.forest.key_mask(lambda name, _category: name == "aten::_to_copy")
    for tally.step, step in enumerate(p.steps):
        top_rows = set(step.top_rows.tolist()) if len(step.top_rows) else set()
        for node in p.find(step, to_copy):
            copies = [n for n in node.walk() if n.name in COPY_OPS]
            if any(c._i in p.claimed for c in copies):
                continue
            cause = _cause(node)
            wrapper = _outer_wrapper(node)
            explicit = wrapper._i in top_rows
            implicit = cause is not None and cause._i in top_rows
            if not (explicit or implicit) or _in_optimizer(node):
                continue
            pair, scalar = _dtype_pair(node), _is_scalar_source(node)
            if pair is None:
                # Without dtypes a Python number's promotion, a same-dtype copy (.to(copy=True)), a device
                # move and a real conversion look the same: no claim (said once, below).
                unseen[cause.name if implicit and cause is not None else wrapper.name] += 1
                continue
            if pair is not None and pair[0] == pair[1]:
                continue  # a copy in the same dtype (a move or a layout change): no conversion
            if not explicit and scalar and pair and _promotes(*pair):
                continue  # a Python number meeting a tensor: torch's own type promotion
            # One finding per op and dtype pair: several conversions of one op are told apart.
            key = (cause.name if implicit and cause is not None else wrapper.name, pair)
            # The host call and its device work overlap in time: their union, not their sum.
            spans = [(node.start_ns, node.end_ns)]
            spans += [(d.start_ns, d.end_ns) for m in node.walk() for d in m.device]
            entry = (tally.step, key, sum(e - s for s, e in _union(spans)), (pair, scalar, explicit))
            narrowing = pair[0] in _WIDE and pair[1] in _LOW
            # Under autocast, its low-precision results come back to float32 on their own: in ops on its
            # float32 list (cross_entropy, softmax), in backward functions, and where they meet float32
            # tensors (a residual add). They follow from autocast, not from a tensor made in a wrong dtype.
            back = pair[0] in _LOW and pair[1] == "torch.float32"
            if not explicit and (narrowing or back):
                autocast.append(entry)
                narrowed = narrowed or narrowing
            else:
                tally.add(*entry[1:])
    if narrowed:
        # Type promotion never narrows: an op converting its float32 input to bfloat16 is autocast's cast,
        # and the casts back in its backward are autocast's too. They are the cost of the user's choice.
        p.notes.append(
            f"{len(autocast) / max(p.n, 1):g} conversion(s) per step come from autocast (its casts from float32 to "
            "a low-precision dtype, and its results promoted back to float32), not reported as dtype conversions"
        )
    else:
        for entry in autocast:
            tally.step = entry[0]
            tally.add(*entry[1:])
    if unseen:
        names = ", ".join(sorted(unseen))
        alike = (
            "a Python number's promotion, a same-dtype copy, a device move and a conversion"
            if p.has_device
            else "a Python number's promotion, a same-dtype copy and a conversion"
        )
        p.notes.append(
            f"{sum(unseen.values()) / max(p.n, 1):g} copy(ies) per step made by {names} may be dtype conversions "
            f"or not ({alike} look the same without dtypes); record_shapes=True would tell"
        )
    findings = []
    for key in tally.calls:
        name, dtypes = key
        _, scalar, explicit = tally.extra[key]
        conv = f" ({dtypes[0]} → {dtypes[1]})"
        if explicit:
            detail = f"an explicit conversion{conv} in the step"
            suggestion = "convert once before the loop (weights and constants), or create the tensor in the dtype used"
        else:
            detail = f"{name} converts one of its inputs to another dtype{conv} on every call"
            if scalar:
                detail += "; the input is a 0-dim tensor: a Python scalar or a constant of another dtype"
                suggestion = (
                    "give constants the tensor's dtype (torch.tensor(eps, dtype=x.dtype)), or use a fused op that "
                    "takes the scalar as a parameter (torch.rms_norm takes eps)"
                )
            else:
                suggestion = f"create the tensor in the dtype of the others ({dtypes[1]}), once, before the loop"
        findings.append(
            tally.finding(
                p,
                key,
                "dtype_conversion",
                f"{name} converts {dtypes[0]} to {dtypes[1]} {tally.when(key, p.n)}",
                (name, "aten::_to_copy"),
                detail,
                suggestion,
            )
        )
    return findings


RULES = (_chains, _conversions)
"""The rules of this module, in the order ``analyze`` applies them."""
