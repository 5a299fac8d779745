"""The report's operator views beyond the op table: time per ``nn.Module``, the heaviest op's call tree, ranks.

A renderer's part (see ``report``): it reads a
[`Timeline`][neuronprof.analysis.insights.Timeline] and returns plain data for the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Optional

from neuronprof import _vocabulary as vocab

if TYPE_CHECKING:
    from neuronprof.analysis.insights import HostEvent, RankInsights, Timeline

__all__ = ["call_tree", "modules_data", "ranks_data"]

MODULE_PREFIX = "nn.Module: "
"""How torch names a module's frame when ``with_stack=True`` (``nn.Module: Linear_0``)."""
TREE_DEPTH = 6
"""Levels of the call tree shown; deeper calls are in their parent's total."""
TREE_CHILDREN = 12
"""Children shown per node (the heaviest); the rest are in their parent's total."""
TREE_NODES = 300
"""Nodes shown in all at most, the heaviest branches first; the rest are in their parents' totals."""

_START, _END = attrgetter("start_ns"), attrgetter("end_ns")


def modules_data(timeline: Timeline) -> dict[str, Any]:
    """Time per ``nn.Module`` instance: its frames (``with_stack=True``) summed over the recorded steps.

    Returns:
        ``{"modules": [{"name", "calls", "total_us", "mean_us"}], "notes": [str]}``, heaviest first;
        a module's total includes the modules it calls.
    """
    sums: dict[str, list[float]] = {}
    for e in timeline.host:
        if e.category == "python" and e.name.startswith(MODULE_PREFIX):
            s = sums.setdefault(e.name[len(MODULE_PREFIX) :], [0, 0.0])
            s[0] += 1
            s[1] += (e.end_ns - e.start_ns) / 1000
    if not sums:
        return {
            "modules": [],
            "notes": ["no nn.Module frames were recorded: pass with_stack=True to group time by module"],
        }
    rows = [
        {"name": name, "calls": int(c), "total_us": round(us, 3), "mean_us": round(us / c, 3)}
        for name, (c, us) in sorted(sums.items(), key=lambda kv: -kv[1][1])
    ]
    return {"modules": rows, "notes": ["a module's time includes the modules it calls"]}


def _ops_by_thread(host: Sequence[HostEvent]) -> list[list[HostEvent]]:
    """Each thread's ops, by start then the longer first (Python frames and ranges are transparent)."""
    threads: dict[str, list[HostEvent]] = {}
    for e in host:
        if e.category == "op":
            threads.setdefault(e.thread, []).append(e)
    for evs in threads.values():
        # By start, then the later end first: two stable sorts on plain keys.
        evs.sort(key=_END, reverse=True)
        evs.sort(key=_START)
    return list(threads.values())


def _heaviest_root(threads: Sequence[Sequence[HostEvent]]) -> Optional[str]:
    """The top-level op (no op around it) with the most time summed over its calls."""
    totals: dict[str, int] = {}
    for evs in threads:
        open_until = None
        for e in evs:
            if open_until is None or e.start_ns >= open_until:
                totals[e.name] = totals.get(e.name, 0) + e.end_ns - e.start_ns
                open_until = e.end_ns
    return max(totals, key=totals.__getitem__) if totals else None


def _op_forest(threads: Sequence[Sequence[HostEvent]], root: str) -> list[dict[str, Any]]:
    """The calls of top-level op ``root`` with the ops nested in them, by their times; nothing else is built."""
    roots: list[dict[str, Any]] = []
    for evs in threads:
        stack: list[dict[str, Any]] = []
        open_until = None  # the end of the top-level call being walked
        for e in evs:
            if open_until is not None and e.start_ns >= open_until:
                stack, open_until = [], None
            if open_until is None:
                open_until = e.end_ns
                if e.name != root:
                    continue
            elif not stack:
                continue  # inside another top-level op
            while stack and stack[-1]["end"] <= e.start_ns:
                stack.pop()
            node = {"name": e.name, "start": e.start_ns, "end": e.end_ns, "children": []}
            (stack[-1]["children"] if stack else roots).append(node)
            stack.append(node)
    return roots


def _merge(nodes: Sequence[dict[str, Any]], depth: int, budget: list[int]) -> list[dict[str, Any]]:
    """Calls of the same name under the same parent merged: calls, total and self µs, heaviest first.

    ``budget`` holds how many more nodes may be shown; each node shown takes one.
    """
    by_name: dict[str, dict[str, Any]] = {}
    for n in nodes:
        total = n["end"] - n["start"]
        # A child may run past its parent's end (a span cut at a step's edge): its part inside counts.
        inner = sum(min(c["end"], n["end"]) - c["start"] for c in n["children"])
        m = by_name.setdefault(n["name"], {"name": n["name"], "calls": 0, "total": 0, "self": 0, "kids": []})
        m["calls"] += 1
        m["total"] += total
        m["self"] += max(total - inner, 0)
        m["kids"] += n["children"]
    out = []
    for m in sorted(by_name.values(), key=lambda m: -m["total"])[:TREE_CHILDREN]:
        if budget[0] <= 0:
            break
        budget[0] -= 1
        kids = _merge(m["kids"], depth + 1, budget) if depth + 1 < TREE_DEPTH else []
        hidden = len({k["name"] for k in m["kids"]}) - len(kids)
        out.append(
            {
                "name": m["name"],
                "calls": m["calls"],
                "total_us": round(m["total"] / 1000, 3),
                "self_us": round(m["self"] / 1000, 3),
                "children": kids,
                "hidden": hidden,
            }
        )
    return out


def call_tree(timeline: Timeline) -> Optional[dict[str, Any]]:
    """The call tree of the heaviest top-level op (the most host time summed over its calls).

    Returns:
        ``{"name", "calls", "total_us", "self_us", "children": [...], "hidden"}`` (children alike,
        ``hidden`` the children not shown), or ``None`` when no op was recorded.
    """
    threads = _ops_by_thread(timeline.host)
    root = _heaviest_root(threads)
    if root is None:
        return None
    merged = _merge(_op_forest(threads, root), 0, [TREE_NODES])
    return merged[0] if merged else None


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
