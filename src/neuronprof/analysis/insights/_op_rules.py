"""The rules about the ops themselves: unfused chains and dtype conversions."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any, Optional

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
from neuronprof.analysis.insights._intervals import _union
from neuronprof.analysis.insights._tally import (
    _per_step,
    _Tally,
)
from neuronprof.analysis.insights._tree import (
    _OPTIMIZER,
    COPY_OPS,
    ELEMENTWISE_OPS,
    MATMUL_OPS,
    _Node,
    _Profile,
)

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


def _has_own_bias(matmul: _Node) -> bool:
    """Whether a matmul already adds a bias: ``aten::linear`` given a bias, or one that runs ``aten::addmm``."""
    shapes = matmul.input_shapes
    if matmul.name == "aten::linear" and shapes and len(shapes) >= 3 and shapes[2]:
        return True
    return any(n.name in ("aten::addmm", "aten::baddbmm") for n in matmul.walk()[1:])  # (the first: the matmul)


def _bias_add(matmul: _Node, add: _Node) -> bool:
    """Whether ``add`` adds a bias to ``matmul``'s output: what ``addmm`` would fuse.

    Only with recorded shapes: the add takes the matmul's output and a vector of its
    last dimension (``(n, out) + (out,)``, or ``(1, ..., 1, out)``). Two operands of the
    same shape are a residual connection, not a bias, and a matmul with a bias of its
    own (``nn.Linear(bias=True)`` runs ``addmm``) has nothing left to fuse. Without
    shapes a bias and a residual look the same, so no claim is made.
    """
    shapes = add.input_shapes
    if not shapes or len(shapes) < 2 or not shapes[0] or not shapes[1] or _has_own_bias(matmul):
        return False
    big, small = sorted(shapes[:2], key=len, reverse=True)
    if len(big) == len(small) and big == small:
        return False  # x + residual
    return small[-1] == big[-1] and all(d == 1 for d in small[:-1])


def _chains(p: _Profile) -> list[Finding]:
    """``unfused_chain``: consecutive small ops that one fused op would replace.

    Rule: a run of at least ``CHAIN_MIN_OPS`` (3) ops called directly by the step,
    one after another, each elementwise or a normalisation's small reduction
    (``ELEMENTWISE_OPS``: ``add``, ``mul``, ``pow``, ``mean``, ``rsqrt``, ``softmax``...),
    each one consuming the previous one's output as far as the trace can tell (see
    ``_feeds``: a shared input shape when shapes are recorded; independent ops on
    tensors of other shapes break the chain);
    also a matmul without a bias of its own followed by an ``add`` of a bias-shaped
    vector, when shapes are recorded (``addmm`` fuses it; see ``_bias_add``: a residual
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
    tally = _Tally()
    totals: defaultdict[Any, int] = defaultdict(int)  # the chains' own time
    gaps: defaultdict[Any, int] = defaultdict(int)  # device idle between their executions
    f = p.forest
    whats = f.whats
    # _feeds reads a name and two recorded signatures, which a trace repeats: decided once per pair of keys.
    signed = [_Node(w[4], 0, 0, input_shapes=w[2]) for w in whats]
    fed: dict[tuple[int, int], bool] = {}

    def feeds(prev: int, cur: int) -> bool:
        found = fed.get((prev, cur))
        if found is None:
            found = fed[prev, cur] = _feeds(signed[prev], signed[cur])
        return found

    # Elementwise ops, less those inside an optimizer's step (torch.optim's own internals).
    optimizer = f.key_mask(lambda name, _category: _OPTIMIZER.match(name))[f.key]
    is_step = f.key_mask(lambda _name, category: category == "step")[f.key]
    elementwise = f.key_mask(lambda name, _category: name in ELEMENTWISE_OPS)
    linked = elementwise[f.key] & ~f.under(optimizer, is_step)
    found: list[tuple[Any, ...]] = []  # the runs: step, names, neighbours, fused form, bias add, rows timed
    for tally.step, step in enumerate(p.steps):
        rows = step.top_rows
        if not len(rows):
            continue
        keys = f.key[rows].tolist()
        tops = [whats[k][4] for k in keys]  # their names
        link = linked[rows].tolist()
        i = 0
        while i < len(tops):
            if not link[i]:
                i += 1
                continue
            j = i + 1
            while j < len(tops) and link[j] and feeds(keys[j - 1], keys[j]):
                j += 1
            before = tops[i - 1] if i > 0 else None
            addmm = (
                before in MATMUL_OPS
                and tops[i] in ("aten::add", "aten::add_")
                and feeds(keys[i - 1], keys[i])
                and _bias_add(f.node(int(rows[i - 1])), signed[keys[i]])
            )
            if addmm:
                j = i + 1  # the bias add alone; what follows it (an activation...) is read as a run of its own
            run = tops[i:j]
            after = tops[j] if j < len(tops) else None
            # (between two matmuls only: most runs are not, and need no list of names)
            attention = before in MATMUL_OPS and after in MATMUL_OPS and _is_attention(run, before, after)
            if len(run) >= CHAIN_MIN_OPS or addmm or attention:
                # Attention's matmuls are part of what the fused op replaces: their time counts too.
                timed = rows[i - 1 : j + 1] if attention else rows[i:j]
                found.append((tally.step, tuple(run), before, after, addmm or attention, addmm, timed))
            i = j
    if p.has_device_time:
        costs, gap_ns = f.device_costs([c[-1] for c in found])  # each op's device_ns(); gaps between them
    else:
        costs, gap_ns = [(f.end[c[-1]] - f.start[c[-1]]).tolist() for c in found], [0] * len(found)
    for (tally.step, names, before, after, fused, addmm, _), cost, gap in zip(found, costs, gap_ns):
        # One fused pass remains; a fused bias add costs nothing extra.
        stake = sum(cost) if addmm else sum(cost) - max(cost)
        # Plain chains are told apart by their ops; the fused forms also by their neighbours.
        key = (names, before, after) if fused else (names, None, None)
        tally.add(key, stake, (before, after))
        totals[key] += sum(cost)
        gaps[key] += gap
    findings = []
    for key in tally.calls:
        names = key[0]
        before, after = tally.extra[key]
        gap_total = gaps[key]
        label = "device" if p.has_device_time else "host"
        detail = f"{len(names)} separate ops, each a full pass over memory; {label} time shown"
        if p.has_device_time and gap_total:
            detail += f"; {_per_step(gap_total, p.n):.1f} µs/step of gaps between their device executions"
        if len(names) == 1:
            title = f"{before} then {names[0]}: an unfused bias add"
            ops = (str(before), *names)
            detail = f"the bias is added in a second pass over the matmul's output; the add's own {label} time shown"
        elif _is_attention(names, before, after):
            title = "Attention written as matmul, softmax, matmul: one fused op exists"
            ops = (str(before), *names, str(after))
            detail = f"the seq × seq scores go through memory between {len(names) + 2} ops; {label} time shown"
        else:
            title = f"{len(names)} elementwise ops in a row could be one fused op"
            ops = names
        findings.append(
            tally.finding(
                p, key, "unfused_chain", title, ops, detail, _chain_suggestion(names, before, after), totals[key]
            )
        )
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
