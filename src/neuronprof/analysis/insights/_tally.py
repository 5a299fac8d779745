"""How a rule counts what it found and says it: per-step figures, shares of the step, steady shares, tallies."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from neuronprof.analysis.insights._findings import Evidence, Finding, FindingKind, guide_url

if TYPE_CHECKING:
    from neuronprof.analysis.insights._tree import _Profile


def _steady(p: _Profile, per_step_ns: Sequence[float], threshold: float) -> Optional[str]:
    """How a share of the step is said when it holds, or ``None`` when it does not fire.

    A rule on a share of the step fires when the mean share is at least ``threshold``
    *and* at least half of the steps reach it on their own, so one slow step (a
    pause of the machine) cannot raise it. Its words say "of each step" only when
    every step reaches it.
    """
    if not p.n or p.mean_step_ns <= 0:
        return None
    mean = sum(per_step_ns) / p.n / p.mean_step_ns
    over = sum(1 for v, st in zip(per_step_ns, p.steps) if v / p.step_ns(st) >= threshold)
    if mean < threshold or 2 * over < p.n:
        return None
    if over == p.n:
        return f"{mean:.0%} of each step"
    return f"{mean:.0%} of the step on average ({over} of {p.n} steps at {threshold:.0%} or more)"


def _per_step(total_ns: float, n: int) -> float:
    return total_ns / n / 1000.0


def _share(us: Optional[float], step_us: float) -> Optional[float]:
    # Not clamped: a share above 1 is a rule's overcount, to be seen, not hidden.
    if us is None or step_us <= 0:
        return None
    return us / step_us


class _Tally:
    """Occurrences of one pattern, grouped by a key, summed over the steps."""

    def __init__(self) -> None:
        self.calls: Counter[Any] = Counter()
        self.ns: defaultdict[Any, float] = defaultdict(float)
        self.extra: dict[Any, Any] = {}
        self.steps: defaultdict[Any, set[int]] = defaultdict(set)
        self.step = 0  # the step being read: set by the rule's loop
        self._docs: dict[str, str] = {}  # each kind's guide address, read once per rule (a rule may find thousands)

    def add(self, key: Any, ns: float, extra: Any = None) -> None:
        self.calls[key] += 1
        self.ns[key] += ns
        self.steps[key].add(self.step)
        if extra is not None:
            self.extra.setdefault(key, extra)

    def when(self, key: Any, n: int) -> str:
        """``"in every step"``, or ``"in k of n steps"`` when the pattern is missing from some."""
        k = len(self.steps[key])
        return "in every step" if k >= n else f"in {k} of {n} steps"

    def finding(
        self,
        p: _Profile,
        key: Any,
        kind: FindingKind,
        title: str,
        ops: tuple[str, ...],
        detail: str,
        suggestion: str,
        shown_ns: Optional[float] = None,
    ) -> Finding:
        """The finding for one key: its calls per step, its time per step (``shown_ns`` when given,
        else the tallied time) and that time's share of the mean step; the tallied time is at stake."""
        at_stake = _per_step(self.ns[key], p.n)
        us = at_stake if shown_ns is None else _per_step(shown_ns, p.n)
        evidence = Evidence(ops, self.calls[key] / p.n, us, _share(us, p.mean_step_ns / 1000), detail)
        docs = self._docs.get(kind) or self._docs.setdefault(kind, guide_url(kind))
        return Finding(kind, title, evidence, at_stake, suggestion, docs)
