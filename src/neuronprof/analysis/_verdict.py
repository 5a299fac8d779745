"""Did it get faster? The change between two sets of samples, with its confidence interval.

The method (the guide's "Did it get faster?" page says why): the **Hodges–Lehmann
estimate** of the change in log time between the two samples, with its
distribution-free **confidence interval** from the Mann–Whitney null distribution
(Lehmann 1963; Hollander, Wolfe & Chicken, *Nonparametric Statistical Methods*,
3rd ed., §4.3), turned back into a ratio ``B / A`` of typical step times. On
logarithms a change is a factor, so the estimate is the median of every pairwise
ratio ``b_j / a_i``; the interval holds for small samples and for skewed or
heavy-tailed noise (one slow step moves it little), and it assumes only that B is
A's distribution scaled by one factor.

The verdict reads the interval: *slower* when it lies above 1, *faster* when it
lies below 1, *no measurable change* when it holds 1, and *cannot tell* when the
samples are too few for any interval at this confidence (e.g. 3 steps against 3 at
95 %: no arrangement of 6 values is rarer than 1 in 20). *Smallest detectable
change* is half the interval's width: a change smaller than that cannot be told
from these samples' noise.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Optional

from neuronprof.typing import Verdict

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Shift", "shift"]


@dataclass(frozen=True)
class Shift:
    """The change from samples A (the baseline) to samples B, as a ratio ``B / A`` with its interval.

    Attributes:
        ratio: Hodges–Lehmann estimate of ``B / A``: the median of every pairwise
            ratio ``b / a``. 1.25 means B takes 25 % longer; ``None`` without samples.
        low: Lower end of the confidence interval of ``ratio``; ``None`` when the
            samples are too few for one.
        high: Upper end of the interval; ``None`` when too few.
        confidence: The interval's confidence level (0.95: 95 %).
        n_a: Number of samples of A.
        n_b: Number of samples of B.
        p_value: Two-sided Mann–Whitney p-value of "A and B come from one
            distribution" (exact, ties counted as halves); ``None`` without samples.
        detectable: Smallest change these samples can tell from noise, as a
            fraction (0.04: ±4 %): half the interval's width on the log scale;
            ``None`` when too few.
        verdict: ``"slower"`` (the interval lies above 1), ``"faster"`` (below 1),
            ``"no measurable change"`` (it holds 1) or ``"cannot tell"`` (too few samples).
    """

    ratio: Optional[float]
    low: Optional[float]
    high: Optional[float]
    confidence: float
    n_a: int
    n_b: int
    p_value: Optional[float]
    detectable: Optional[float]
    verdict: Verdict

    @property
    def why_not(self) -> Optional[str]:
        """Why there is no verdict (``"cannot tell"``), in words; ``None`` when there is one."""
        if self.verdict != "cannot tell":
            return None
        need = min_samples(self.confidence)
        return (
            f"{self.n_a} and {self.n_b} sample(s) are too few for a {self.confidence:.0%} interval "
            f"(at least {need} on each side, e.g. active={need} steps, or more runs)"
        )

    def describe(self) -> str:
        """One line: the verdict, the ratio and its interval, the smallest detectable change."""
        if self.verdict == "cannot tell":
            ratio = f" (B/A {self.ratio:.3f}×)" if self.ratio is not None else ""
            return f"cannot tell{ratio}: {self.why_not}"
        assert self.ratio is not None and self.low is not None and self.high is not None
        pct = f"{abs(self.ratio - 1):.1%}"
        head = {"slower": f"slower by {pct}", "faster": f"faster by {pct}"}.get(self.verdict, self.verdict)
        detect = ""
        if self.detectable:  # None without an interval; 0 when every pairwise ratio is the same
            factor = 1 + self.detectable
            detect = (
                f"; changes under ±{self.detectable:.1%} are not detectable"
                if factor < 2
                else f"; changes within {factor:.1f}× either way are not detectable"
            )
        return (
            f"{head}: B/A {self.ratio:.3f}× ({self.confidence:.0%} CI {self.low:.3f}–{self.high:.3f}×, "
            f"{self.n_a} vs {self.n_b} samples){detect}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the shift as a JSON-ready dict."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Shift:
        """Build a shift from [`to_dict`][neuronprof.analysis.Shift.to_dict] output.

        Args:
            data: A dict as ``to_dict()`` returns it (e.g. parsed from JSON).

        Raises:
            ValueError: A field is missing or unknown.
        """
        fields = set(cls.__dataclass_fields__)
        if set(data) != fields:
            raise ValueError(f"a shift needs the fields {', '.join(sorted(fields))}")
        return cls(**data)


# -- the Mann-Whitney null distribution ------------------------------------------------------
#
# Written here because scipy.stats offers the Mann-Whitney test (mannwhitneyu) but not the
# quantiles of its null distribution, which the Hodges-Lehmann interval needs, and because
# scipy is no dependency of neuronprof's torch-free commands (the tests check these p-values
# against scipy's). The counts are the coefficients of the Gaussian binomial [m+n choose m]_q.

# Above them, the normal approximation (with continuity correction) is used. It is poor in the
# tails where one side is small (1 sample against 10,000: no 95 % interval, where the exact
# distribution gives one), so such a side is counted exactly up to _SMALL_SIDE_PAIRS pairs
# (O(m * m * n) additions, m the smaller side). With 10 or more samples a side, the
# approximation's k is at most the exact k and within a few percent of it at 95-99 %
# (tests/analysis/test_verdict.py): its interval is never the narrower.
_EXACT_LIMIT = 2500  # m*n up to which the exact distribution is used
_SMALL_SIDE = 10  # a side with fewer samples than this ...
_SMALL_SIDE_PAIRS = 50_000  # ... is counted exactly up to this many pairs m*n


def _exact(m: int, n: int) -> bool:
    """Whether U's null distribution is counted exactly for samples of ``m`` and ``n``."""
    return m * n <= _EXACT_LIMIT or (min(m, n) < _SMALL_SIDE and m * n <= _SMALL_SIDE_PAIRS)


@lru_cache(maxsize=16)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) equally likely arrangements give each U = 0..m*n.

    The same for ``(n, m)``: the cost, O(m * m * n), is least with the smaller side first.
    """
    coeffs = [1]
    for i in range(1, m + 1):
        # times (1 - q^(n+i)) ...
        grown = coeffs + [0] * (n + i)
        for k in range(len(coeffs)):
            grown[k + n + i] -= coeffs[k]
        # ... divided by (1 - q^i): a running sum with stride i
        for k in range(i, len(grown)):
            grown[k] += grown[k - i]
        coeffs = grown[: m * n + 1] if i == m else grown
    return tuple(coeffs[: m * n + 1])


def _u_cdf(u: float, m: int, n: int) -> float:
    """P(U <= u) under the null hypothesis (A and B from one distribution)."""
    if not _exact(m, n):
        mean, sd = m * n / 2, math.sqrt(m * n * (m + n + 1) / 12)
        return 0.5 * (1 + math.erf((u + 0.5 - mean) / (sd * math.sqrt(2))))
    counts = _u_counts(min(m, n), max(m, n))
    top = math.floor(u)
    if top < 0:
        return 0.0
    return sum(counts[: top + 1]) / math.comb(m + n, m)


def _lower_rank(m: int, n: int, alpha: float) -> int:
    """The largest k with P(U <= k - 1) <= alpha / 2: the interval is the k-th smallest to k-th largest ratio.

    0 when no interval exists at this confidence. P(U <= k) rises with k, so k is found by
    bisection (O(log mn) evaluations).
    """
    lo, hi = 0, m * n  # P(U <= k) <= alpha / 2 holds for every k below the answer, for none from it
    while lo < hi:
        mid = (lo + hi) // 2
        if _u_cdf(mid, m, n) <= alpha / 2:
            lo = mid + 1
        else:
            hi = mid
    return lo


# -- order statistics of the pairwise differences --------------------------------------------
#
# The estimate and its interval are order statistics of the m*n differences b_j - a_i. Listing
# and sorting them costs O(mn log mn) time and O(mn) memory (a quarter of a million floats at
# 500 samples a side, for each op `diff` judges); they are selected instead on the implicit
# sorted matrix (rows a_i, columns b_j), in O((m + n) log n) per step and O(log mn) steps:
# each step's pivot is the weighted median of the rows' middle candidates, which rules out at
# least a quarter of the candidates left (a weighted-median selection in the manner of Johnson &
# Mizoguchi, "Selecting the Kth element in X + Y and X1 + X2 + ... + Xm", SIAM J. Comput. 7,
# 1978). Written here: numpy and scipy select only from a listed array. Up to _LISTED_PAIRS
# pairs the differences are listed and sorted, in Python: `diff` of a small trace then never
# imports numpy (about 80 ms).

_LISTED_PAIRS = 4096


def _order_statistics(la: list[float], lb: list[float], ranks: list[int]) -> list[float]:
    """The ``ranks``-th smallest (0-based) of the differences ``y - x`` (``x`` in ``la``, ``y`` in ``lb``)."""
    if len(la) * len(lb) <= _LISTED_PAIRS:
        diffs = sorted(y - x for x in la for y in lb)
        return [diffs[r] for r in ranks]
    import numpy as np

    return _differences_at(np.sort(np.array(la, np.float64)), np.sort(np.array(lb, np.float64)), ranks)


def _prefix(a: np.ndarray, b: np.ndarray, t: float, lo: np.ndarray, hi: np.ndarray, *, strict: bool) -> np.ndarray:
    """For each row i, how many b_j give ``b_j - a_i <= t`` (``< t`` when ``strict``), as computed in floats.

    Rounded subtraction keeps order, so each row's count is a prefix of the sorted ``b``,
    known to end within the row's candidates (``lo[i] .. hi[i]``). It is guessed from
    ``a_i + t``; the rows where rounding moved the guess are bisected (O(log n) passes).
    """
    import numpy as np

    n = len(b)

    def beyond(j: np.ndarray, rows: np.ndarray) -> np.ndarray:
        d = b[np.minimum(j, n - 1)] - a[rows]
        return d >= t if strict else d > t

    every = np.arange(len(a))
    p = np.clip(np.searchsorted(b, a + t, side="left" if strict else "right"), lo, hi)
    # The guess is the count where the element before it qualifies and the one at it does not.
    wrong = ((p > lo) & beyond(p - 1, every)) | ((p < hi) & ~beyond(p, every))
    rows = np.flatnonzero(wrong)
    if len(rows):
        left, right = lo[rows], hi[rows]
        while True:
            active = left < right
            if not active.any():
                break
            mid = (left + right) // 2
            fits = ~beyond(mid, rows)
            left = np.where(active & fits, mid + 1, left)
            right = np.where(active & ~fits, mid, right)
        p[rows] = left
    return p


def _differences_at(a: np.ndarray, b: np.ndarray, ranks: list[int]) -> list[float]:
    """The ``ranks``-th smallest (0-based) of the differences ``b_j - a_i``; ``a`` and ``b`` sorted."""
    import numpy as np

    m, n = len(a), len(b)
    out = []
    for r in ranks:
        lo = np.zeros(m, dtype=np.int64)  # row i's candidates are its columns lo[i] .. hi[i] - 1
        hi = np.full(m, n, dtype=np.int64)
        below = 0  # differences ruled out below the candidates
        while True:
            widths = hi - lo
            left = int(widths.sum())
            if left <= 4 * (m + n):  # few enough to list
                rows = np.repeat(np.arange(m), widths)
                cols = np.arange(left) - np.repeat(np.cumsum(widths) - widths, widths) + lo[rows]
                out.append(float(np.sort(b[cols] - a[rows])[r - below]))
                break
            rows = np.flatnonzero(widths)
            middles = b[lo[rows] + widths[rows] // 2] - a[rows]
            order = np.argsort(middles, kind="stable")
            weight = np.cumsum(widths[rows][order])
            pivot = float(middles[order][np.searchsorted(weight, weight[-1] / 2)])
            under = _prefix(a, b, pivot, lo, hi, strict=True)
            if int(under.sum()) > r:  # the answer lies below the pivot
                hi = np.minimum(hi, under)
                continue
            upto = _prefix(a, b, pivot, lo, hi, strict=False)
            if int(upto.sum()) > r:  # the pivot is the answer
                out.append(pivot)
                break
            below = int(upto.sum())  # the answer lies above it
            lo = np.maximum(lo, upto)
    return out


def min_samples(confidence: float = 0.95) -> int:
    """The fewest samples on each side (the same number) that can give an interval at ``confidence``."""
    n = 1
    while _lower_rank(n, n, 1 - confidence) == 0:
        n += 1
    return n


def shift(a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95) -> Shift:
    """Estimate how much B changed against A (``B / A``), with a confidence interval and a verdict.

    Args:
        a: The baseline's samples: positive times (e.g. µs per step), any unit shared with ``b``.
        b: The samples to judge.
        confidence: Confidence level of the interval, between 0.5 and 1 (0.95 for 95 %).

    Returns:
        A [`Shift`][neuronprof.analysis.Shift] with the Hodges–Lehmann ratio, its interval,
        the p-value, the smallest detectable change and the verdict (the method is in
        this module's docstring).

    Raises:
        ValueError: A sample is not a positive finite number, or ``confidence`` is out of range.
    """
    if not 0.5 <= confidence < 1:
        raise ValueError(f"confidence must be at least 0.5 and below 1, got {confidence!r}")
    for side, values in (("A", a), ("B", b)):
        for v in values:
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"samples of {side} must be positive times, got {v!r}")
    m, n = len(a), len(b)
    if not m or not n:
        return Shift(None, None, None, confidence, m, n, None, None, "cannot tell")
    la, lb = sorted(math.log(v) for v in a), sorted(math.log(v) for v in b)
    total = m * n  # the pairwise differences log b_j - log a_i (see _order_statistics)
    k = _lower_rank(m, n, 1 - confidence)
    ranks = [(total - 1) // 2, total // 2] + ([k - 1, total - k] if k else [])
    at = _order_statistics(la, lb, ranks)
    centre = (at[0] + at[1]) / 2
    # U counts the pairs where B is the larger, ties as halves.
    below = sum(bisect_left(la, y) for y in lb)
    u = below + 0.5 * (sum(bisect_right(la, y) for y in lb) - below)
    p = min(1.0, 2 * min(_u_cdf(u, m, n), 1 - _u_cdf(math.ceil(u) - 1, m, n)))
    if k == 0:
        return Shift(_exp(centre), None, None, confidence, m, n, p, None, "cannot tell")
    lo, hi = at[2], at[3]
    verdict: Verdict = "slower" if lo > 0 else "faster" if hi < 0 else "no measurable change"
    detectable = _exp((hi - lo) / 2) - 1
    return Shift(_exp(centre), _exp(lo), _exp(hi), confidence, m, n, p, detectable, verdict)


def _exp(x: float) -> float:
    """``math.exp``, infinite past the largest float (a ratio of 1e-300 and 1e300 s): no OverflowError."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf
