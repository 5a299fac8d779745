"""The report's operator views beyond the op table: time per ``nn.Module``, the heaviest op's call tree, ranks.

A renderer's part (see ``report``): it reads a timeline's events as numpy columns
(``EventColumns``: no object per event, a trace of millions of events included) and returns
plain data for the page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab

if TYPE_CHECKING:
    from neuronprof.analysis.insights import RankInsights
    from neuronprof.analysis.insights._columns import EventColumns

__all__ = ["call_tree", "modules_data", "ranks_data"]

MODULE_PREFIX = "nn.Module: "
"""How torch names a module's frame when ``with_stack=True`` (``nn.Module: Linear_0``)."""
TREE_DEPTH = 6
"""Levels of the call tree shown; deeper calls are in their parent's total."""
TREE_CHILDREN = 12
"""Children shown per node (the heaviest); the rest are in their parent's total."""
TREE_NODES = 300
"""Nodes shown in all at most, the heaviest branches first; the rest are in their parents' totals."""


def _name_ids(cols: EventColumns, keys: Any, strip: int = 0) -> tuple[Any, list[str]]:
    """Per key of mask ``keys``, an id for its name (less ``strip`` leading characters), -1 elsewhere; and the names.

    Keys differ by category and recorded inputs too: events are grouped by name alone.
    """
    import numpy as np

    ids: dict[str, int] = {}
    per_key = np.full(len(cols.names), -1, np.int64)
    for k in np.flatnonzero(keys).tolist():
        per_key[k] = ids.setdefault(cols.names[k][strip:], len(ids))
    return per_key, list(ids)


def _first_order(ids: Any, count: int) -> Any:
    """Per id below ``count``, the position of its first occurrence in ``ids`` (``len(ids)`` for none)."""
    import numpy as np

    first = np.full(count, len(ids), np.int64)
    np.minimum.at(first, ids, np.arange(len(ids), dtype=np.int64))
    return first


def modules_data(events: EventColumns) -> dict[str, Any]:
    """Time per ``nn.Module`` instance: its frames (``with_stack=True``) summed over the recorded steps.

    Args:
        events: The run's events, as columns; with ranks,
            the top-level columns (every rank's events together) are read.

    Returns:
        ``{"modules": [{"name", "calls", "total_us", "mean_us"}], "notes": [str]}``, heaviest
        first (``total_us`` and ``mean_us`` in µs, summed over the frames in the order
        recorded); a module's total includes the modules it calls.
    """
    import numpy as np

    cols = events
    is_module = cols.key_mask(lambda name, category: category == "python" and name.startswith(MODULE_PREFIX))
    rows = np.flatnonzero(is_module[cols.key])
    if not len(rows):
        return {
            "modules": [],
            "notes": ["no nn.Module frames were recorded: pass with_stack=True to group time by module"],
        }
    per_key, names = _name_ids(cols, is_module, len(MODULE_PREFIX))
    ids = per_key[cols.key[rows]]
    calls = np.bincount(ids, minlength=len(names))
    # Summed one frame after the other, in float µs (np.add.at adds in order), as the totals always were.
    us = np.zeros(len(names))
    np.add.at(us, ids, (cols.end[rows] - cols.start[rows]) / 1000)
    first = _first_order(ids, len(names))
    order = np.lexsort((first, -us))  # heaviest first; ties by first call
    rows_out = []
    for i in order.tolist():
        c, total = int(calls[i]), float(us[i])
        rows_out.append({"name": names[i], "calls": c, "total_us": round(total, 3), "mean_us": round(total / c, 3)})
    return {"modules": rows_out, "notes": ["a module's time includes the modules it calls"]}


def _ops_by_thread(cols: EventColumns, is_op: Any) -> tuple[Any, Any]:
    """The ops' rows, thread by thread (in order of each thread's first op), each thread's by start, the longer first.

    Python frames and ranges are transparent: left out. The sort is stable: ops of one start
    and one end keep the order recorded.

    Args:
        cols: The events.
        is_op: Per key, whether it is an op's.

    Returns:
        ``(rows, bounds)``: the rows into the host columns, and each thread's slice of them
        (``rows[bounds[i]:bounds[i + 1]]``).
    """
    import numpy as np

    rows = np.flatnonzero(is_op[cols.key])
    count = len(cols.threads)
    rank = np.empty(count, np.int64)
    rank[np.argsort(_first_order(cols.thread[rows], count), kind="stable")] = np.arange(count)
    if not _in_tree_order(rank[cols.thread[rows]], cols.start[rows], cols.end[rows]):
        # (a trace's columns are in that order already: thread by thread, each by start, the longer first)
        rows = rows[np.lexsort((-cols.end[rows], cols.start[rows], rank[cols.thread[rows]]))]
    bounds = np.searchsorted(rank[cols.thread[rows]], np.arange(count + 1))
    return rows, bounds


def _in_tree_order(thread: Any, start: Any, end: Any) -> bool:
    """Whether rows are by thread, then by start, then the longer first (what the stable sort above gives)."""

    if len(thread) < 2:
        return True
    later_thread = thread[1:] != thread[:-1]
    if (thread[1:] < thread[:-1]).any():
        return False
    same = ~later_thread
    later_start = start[1:] > start[:-1]
    if (same & (start[1:] < start[:-1])).any():
        return False
    return not (same & ~later_start & (end[1:] > end[:-1])).any()


_CHUNK = 1 << 16
"""Ops walked per pass of a Python loop (their times are Python ints only while walked)."""


def _top_level(starts: Any, ends: Any, bounds: Any) -> Any:
    """The positions of the top-level ops (no op around them), thread by thread.

    A thread's first op is top-level, then the first to start at or after the last
    top-level op's end, and so on; the ops between two are inside the first.

    Args:
        starts: The ops' starts (int ns), thread by thread, each thread's in order.
        ends: Their ends (int ns).
        bounds: Each thread's slice of them.

    Returns:
        The positions (int64), in order.
    """
    import numpy as np

    top: list[Any] = []
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        mine = starts[lo:hi]
        clean = _top_level_clean(mine, ends[lo:hi])
        if clean is not None:
            top.append(clean + lo)
            continue
        i = lo
        while i < hi:
            # From op i on, a window at a time (Python ints only for the window): per op, the next
            # top-level op were it top-level, the first after it to start at or after its end.
            first, at = i, min(i + _CHUNK, hi)
            after = np.searchsorted(mine, ends[first:at], side="left") + lo
            nxt = np.maximum(after, np.arange(first + 1, at + 1)).tolist()
            here = []
            while i < at:
                here.append(i)
                i = nxt[i - first]
            top.append(np.array(here, np.int64))
    return np.concatenate(top) if top else np.empty(0, np.int64)


def _top_level_clean(starts: Any, ends: Any) -> Optional[Any]:
    """``_top_level`` of one thread's ops on arrays, when every op ends within the top-level op it follows; else None.

    Then an op is top-level exactly when it starts at or after every earlier op's end (the
    reach of the ops before it is the last top-level op's end): the same positions, found
    without walking from one top-level op to the next. An op that outlasts the top-level op
    it follows (a span cut at a step's edge) is left to the walk.
    """
    import numpy as np

    if not len(starts) or (ends < starts).any():
        return None
    reach = np.maximum.accumulate(ends)
    top = np.flatnonzero(np.concatenate(([True], starts[1:] >= reach[:-1])))
    return top if (np.maximum.reduceat(ends, top) == ends[top]).all() else None


def _heaviest_root(names: Any, durations: Any, count: int) -> Optional[int]:
    """The name (its id) with the most time summed over the top-level calls given, the first to come on a tie.

    Args:
        names: Each top-level call's name id (below ``count``), in order.
        durations: Each one's duration (int ns).
        count: How many names there are.
    """
    import numpy as np

    if not len(names):
        return None
    # Names with no top-level call are out of the running, however little the others' time.
    totals = np.full(count, np.iinfo(np.int64).min, np.int64)
    totals[names] = 0
    np.add.at(totals, names, durations)
    tied = np.flatnonzero(totals == totals.max())
    return int(tied[np.argmin(_first_order(names, count)[tied])])


def _op_forest(starts: Any, ends: Any, calls: Any, ends_at: Any, bounds: Any) -> tuple[Any, Any, Any]:
    """The ops nested in top-level calls: each op's parent and depth.

    Each call's ops are pushed on a stack in order; at an op's start, the ops on top that
    end at or before it are popped, and the one left on top is its parent. A child may
    outlast its parent (a span cut at a step's edge): it stays on the stack above it.
    Where a thread's ops nest cleanly (each within its parent), the stack holds exactly the
    earlier ops still open, and the trace reader's nesting on arrays (``_nesting``) gives the
    same parents and depths at once; a thread whose spans cross is walked op by op.

    Args:
        starts: The ops' starts (int ns), thread by thread, each thread's in order.
        ends: Their ends (int ns).
        calls: The positions of the top-level calls to nest.
        ends_at: Where each call's ops end (the next top-level op's position, or its thread's end).
        bounds: Each thread's slice of the ops (``starts[bounds[i]:bounds[i + 1]]``).

    Returns:
        ``(rows, parent, depth)``: the positions of the calls and the ops in them, in order; each
        one's parent (an index into ``rows``, -1 for a call), and its depth (0 for a call).
    """
    import numpy as np

    from neuronprof.analysis.trace._nesting_arrays import _nesting

    lengths = ends_at - calls
    first = np.cumsum(lengths) - lengths
    rows = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(calls - first, lengths)
    is_call = np.zeros(len(rows), bool)
    is_call[first] = True
    s, e = starts[rows], ends[rows]
    parent = np.full(len(rows), -1, np.int64)
    depth = np.zeros(len(rows), np.int32)
    # The calls of one thread are one after another: its rows are a slice, sorted by start.
    cuts = np.searchsorted(rows, bounds).tolist()
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        if hi == lo:
            continue
        nested = _nesting(s[lo:hi], e[lo:hi] - s[lo:hi], e[lo:hi]) if (e[lo:hi] >= s[lo:hi]).all() else None
        if nested is not None and np.array_equal(nested[0] == 0, is_call[lo:hi]):
            up, deep = nested[1], nested[0]
            parent[lo:hi] = np.where(up >= 0, up.astype(np.int64) + lo, -1)
            depth[lo:hi] = deep
        else:
            _stack_walk(s, e, is_call, lo, hi, parent, depth)
    return rows, parent, depth


def _stack_walk(s: Any, e: Any, is_call: Any, lo: int, hi: int, parent: Any, depth: Any) -> None:
    """``_op_forest``'s stack, op by op, over one thread's ops ``[lo, hi)``: fills ``parent`` and ``depth``."""
    stack: list[int] = []
    open_ends: list[int] = []
    levels: list[int] = []
    for at in range(lo, hi, _CHUNK):
        to = min(at + _CHUNK, hi)
        up, deep = [], []
        for i, start, end, call in zip(range(at, to), s[at:to].tolist(), e[at:to].tolist(), is_call[at:to].tolist()):
            if call:
                stack, open_ends, levels = [i], [end], [0]
                up.append(-1)
                deep.append(0)
                continue
            # The call itself stays open: an op inside it starts before it ends.
            while open_ends[-1] <= start:
                stack.pop()
                open_ends.pop()
                levels.pop()
            up.append(stack[-1])
            deep.append(levels[-1] + 1)
            stack.append(i)
            open_ends.append(end)
            levels.append(levels[-1] + 1)
        parent[at:to] = up
        depth[at:to] = deep


def _merge(names: Any, durations: Any, ends: Any, starts: Any, parent: Any, depth: Any) -> dict[str, Any]:
    """Calls of the same name under the same merged parent merged, level by level down to ``TREE_DEPTH``.

    Args:
        names: Each op's name id (the calls' and the ops' in them, in order, as ``_op_forest`` gives them).
        durations: Each one's duration (int ns).
        ends: Each one's end (int ns).
        starts: Each one's start (int ns).
        parent: Each one's parent (an index into these, -1 for a call).
        depth: Each one's depth (0 for a call).

    Returns:
        Per merged node (the calls' one is 0): ``"name"`` (id), ``"parent"`` (-1 for the calls'),
        ``"calls"``, ``"total"`` and ``"self"`` (int ns: its ops' time less their children's
        inside it, never below 0 per op), ``"first"`` (the position of its first op).
    """
    import numpy as np

    n = len(names)
    child = np.flatnonzero(parent >= 0)
    up = parent[child]
    # A child may run past its parent's end (a span cut at a step's edge): its part inside counts.
    inner = np.zeros(n, np.int64)
    np.add.at(inner, up, np.minimum(ends[child], ends[up]) - starts[child])
    own = np.maximum(durations - inner, 0)
    merged = np.full(n, -1, np.int64)
    top = np.flatnonzero(depth == 0)
    merged[top] = 0
    node_name, node_parent = [int(names[top[0]])], [-1]
    width = int(names.max()) + 1
    for level in range(1, TREE_DEPTH + 1):
        at = np.flatnonzero(depth == level)
        if not len(at):
            break
        pair = merged[parent[at]] * width + names[at]
        kinds, which = np.unique(pair, return_inverse=True)
        merged[at] = len(node_name) + which
        node_name += (kinds % width).tolist()
        node_parent += (kinds // width).tolist()
    shown = merged >= 0
    ids = merged[shown]
    count = len(node_name)
    total = np.zeros(count, np.int64)
    self_ = np.zeros(count, np.int64)
    np.add.at(total, ids, durations[shown])
    np.add.at(self_, ids, own[shown])
    return {
        "name": node_name,
        "parent": node_parent,
        "calls": np.bincount(ids, minlength=count).tolist(),
        "total": total.tolist(),
        "self": self_.tolist(),
        "first": _first_order(ids, count).tolist(),
    }


def _shown(nodes: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The merged call tree as the page draws it, from its root (node 0), the heaviest branches first.

    Per node, its ``TREE_CHILDREN`` heaviest children (on a tie, the first to come), down to
    ``TREE_DEPTH`` levels and ``TREE_NODES`` nodes in all, depth first; the rest are in their
    parents' totals and counted in ``hidden``.
    """
    kids: list[list[int]] = [[] for _ in nodes["name"]]
    for m, up in enumerate(nodes["parent"]):
        if up >= 0:
            kids[up].append(m)
    total, first = nodes["total"], nodes["first"]
    budget = [TREE_NODES]

    def level(ms: list[int], depth: int) -> list[dict[str, Any]]:
        out = []
        for m in sorted(ms, key=lambda m: (-total[m], first[m]))[:TREE_CHILDREN]:
            if budget[0] <= 0:
                break
            budget[0] -= 1
            below = level(kids[m], depth + 1) if depth + 1 < TREE_DEPTH else []
            out.append(
                {
                    "name": names[nodes["name"][m]],
                    "calls": nodes["calls"][m],
                    "total_us": round(total[m] / 1000, 3),
                    "self_us": round(nodes["self"][m] / 1000, 3),
                    "children": below,
                    "hidden": len(kids[m]) - len(below),
                }
            )
        return out

    return level([0], 0)[0]


def call_tree(events: EventColumns) -> Optional[dict[str, Any]]:
    """The call tree of the heaviest top-level op (the most host time summed over its calls).

    Ops are nested per thread (Python frames and ranges are transparent); calls of one name
    under one parent are merged.

    Args:
        events: The run's events, as columns; with ranks,
            the top-level columns (every rank's events together) are read.

    Returns:
        ``{"name", "calls", "total_us", "self_us", "children": [...], "hidden"}`` (children alike;
        ``total_us`` and ``self_us`` in µs; ``hidden`` the children not shown), or ``None`` when no
        op was recorded.
    """
    import numpy as np

    cols = events
    is_op = cols.key_mask(lambda name, category: category == "op")
    rows, bounds = _ops_by_thread(cols, is_op)
    if not len(rows):
        return None
    starts, ends = cols.start[rows], cols.end[rows]
    per_key, names = _name_ids(cols, is_op)
    ids = per_key[cols.key[rows]]
    del rows
    top = _top_level(starts, ends, bounds)
    root = _heaviest_root(ids[top], ends[top] - starts[top], len(names))
    if root is None:
        return None
    # Each top-level call's ops run to the next top-level op of its thread, or the thread's end.
    ends_at = np.minimum(np.append(top[1:], len(starts)), bounds[np.searchsorted(bounds, top, side="right")])
    calls = ids[top] == root
    at, parent, depth = _op_forest(starts, ends, top[calls], ends_at[calls], bounds)
    nodes = _merge(ids[at], ends[at] - starts[at], ends[at], starts[at], parent, depth)
    return _shown(nodes, names)


def ranks_data(overview: dict[str, Any], insights: Optional[RankInsights]) -> Optional[dict[str, Any]]:
    """The distributed pane: per rank, mean compute, communication, waiting and idle per step (µs).

    Read from the overview's steps (``rank N · ...``). Waiting is estimated as a rank's time
    in collectives beyond the least any rank spent there: the time all ranks spend in a
    collective at least is the transfer, the rest is waiting for a later rank.

    Returns:
        ``{"ranks": [{"rank", "steps", "step_us", "compute_us", "communication_us", "waiting_us",
        "idle_us"}], "straggler": int or None, "notes": [str]}``, or ``None`` for one rank.
    """
    per: dict[int, list[dict[str, Any]]] = {}
    for s in overview["steps"]:
        if s["name"].startswith("rank "):
            per.setdefault(int(s["name"].split(" ", 2)[1]), []).append(s)
    if len(per) < 2:
        return None

    def mean(steps: list[dict[str, Any]], key: Optional[str] = None) -> float:
        vals = [s["us"] if key is None else s["parts"][key] for s in steps]
        return sum(vals) / len(vals)

    comm = {r: mean(steps, "communication") for r, steps in per.items()}
    least = min(comm.values())
    rows = []
    for r, steps in sorted(per.items()):
        step, idle = mean(steps), mean(steps, "idle")
        rows.append(
            {
                "rank": r,
                "steps": len(steps),
                "step_us": round(step, 3),
                "compute_us": round(step - comm[r] - idle, 3),
                "communication_us": round(least, 3),
                "waiting_us": round(comm[r] - least, 3),
                "idle_us": round(idle, 3),
            }
        )
    straggler = None if insights is None else insights.straggler
    notes = [
        "busy outside collectives: every instant of the step with an event recorded, less the time in collectives "
        "(idle left out); communication is the least time any rank spent in collectives (the transfer all "
        "ranks share), and waiting a rank's time in collectives beyond it",
    ]
    # The findings' rule reads "compute" as step time less the time in collectives, idle included: said so.
    figures = [] if insights is None else list(enumerate(insights.compute_per_step_us))
    said = ", ".join(f"rank {r}: {v:,.1f} µs" for r, v in figures if v is not None)
    notes.append(
        "the straggler is the rank with the most compute per step as the findings count it (step time less the time "
        f"in collectives, idle included{'; ' + said if said else ''}), more than {vocab.STRAGGLER_MARGIN:.0%} above "
        "every other rank's; when no rank is that far above the others, none is named"
    )
    return {"ranks": rows, "straggler": straggler, "notes": notes}
