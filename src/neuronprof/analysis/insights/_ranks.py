"""Findings of several ranks: each rank read on its own, and the rank the others wait for.

A folder of per-rank traces is not one profile: its ranks' steps ran side by side,
not one after another, so reading them as one timeline would average the ranks as
if they were steps. [`analyze_ranks`][neuronprof.analysis.insights.analyze_ranks]
reads each rank's own timeline with [`analyze`][neuronprof.analysis.insights.analyze]
and names the straggler by the cross-rank view's one rule
(``neuronprof._vocabulary.straggler``): the rank with the most compute per step, a
rank's compute being its step time less the time inside its steps during which one
of its collectives was in flight.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from neuronprof import _vocabulary as vocab
from neuronprof._model_base import ResultModel
from neuronprof.analysis.insights._findings import Finding, Insights, _us
from neuronprof.analysis.insights._timeline import Timeline

if TYPE_CHECKING:
    from neuronprof.render import Block, Column, Format

RANK_INSIGHTS_SCHEMA = "neuronprof.rank_insights/1"


@dataclass(frozen=True)
class RankInsights(ResultModel):
    """Findings of a job's ranks, rank by rank: what ``neuronprof advise`` returns for a folder of ranks.

    Each rank is read on its own, over its own steps (never averaged with the other
    ranks as if they were steps), and the straggler is named: the rank the others
    wait for, whose findings are the ones to fix first. ``print()`` it for every
    rank's findings, the straggler's first; save it with
    [`to_json`][neuronprof.analysis.insights.RankInsights.to_json] (read back with
    [`from_json`][neuronprof.analysis.insights.RankInsights.from_json]).

    Attributes:
        ranks: One [`Insights`][neuronprof.analysis.insights.Insights] per rank, indexed
            by rank: that rank's findings, steps and step time.
        straggler: The rank the others wait for: the most compute per step (step time
            less the time in collectives); ``None`` when fewer than two ranks recorded
            steps or two share the largest figure.
        compute_per_step_us: Per rank, its mean compute per step (µs): the mean of its
            ``ProfilerStep#N`` spans less the time inside them during which one of its
            collectives (a process group's span, a ``c10d::*`` op, ``aten::wait``,
            ``record_param_comms``, a communication kernel) was in flight; ``None``
            without steps.
        collective_wait_per_step_us: Per rank, that time in collectives per step (µs);
            ``None`` without steps.
        notes: Remarks about the folder (a rank without a trace, files that name no rank).
        source: The trace files read.
    """

    ranks: tuple[Insights, ...]
    straggler: Optional[int] = None
    compute_per_step_us: tuple[Optional[float], ...] = ()
    collective_wait_per_step_us: tuple[Optional[float], ...] = ()
    notes: tuple[str, ...] = field(default=())
    source: str = ""

    SCHEMA: ClassVar[str] = RANK_INSIGHTS_SCHEMA
    _KIND: ClassVar[str] = "neuronprof findings of several ranks"
    _ROWS: ClassVar[Optional[str]] = "findings"
    _ROW_TYPE: ClassVar[Optional[type]] = Finding
    _ROW_KEY: ClassVar[str] = "kind"
    _ROW_WORDS: ClassVar[str] = "finding of kind"
    _JSON: ClassVar[Mapping[str, Any]] = {"ensure_ascii": False}

    def __post_init__(self) -> None:
        self._as_tuples("ranks", "compute_per_step_us", "collective_wait_per_step_us", "notes")
        for r in self.ranks:
            if not isinstance(r, Insights):
                raise TypeError(f"RankInsights.ranks must hold Insights objects, got {type(r).__name__}")

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    def rank(self, rank: int) -> Insights:
        """Return one rank's findings.

        Args:
            rank: The rank, from 0.

        Raises:
            IndexError: No such rank.
        """
        if not 0 <= rank < len(self.ranks):
            raise IndexError(f"no rank {rank}: ranks 0 to {len(self.ranks) - 1}")
        return self.ranks[rank]

    def order(self) -> list[int]:
        """The ranks in the order they are shown: the straggler first, then the others by rank."""
        rest = [r for r in range(len(self.ranks)) if r != self.straggler]
        return rest if self.straggler is None else [self.straggler, *rest]

    @property
    def findings(self) -> tuple[Finding, ...]:
        """Every rank's findings, rank by rank in [`order`][neuronprof.analysis.insights.RankInsights.order].

        The straggler's come first. A finding does not say its rank: read one rank's
        with ``rank(r).findings``.
        """
        return tuple(f for r in self.order() for f in self.ranks[r].findings)

    def kinds(self) -> list[str]:
        """Return the kinds of [`findings`][neuronprof.analysis.insights.RankInsights.findings], in that order."""
        return [f.kind for f in self.findings]

    def head(self, n: Optional[int]) -> RankInsights:
        """Return a copy with the first ``n`` findings of each rank (all when ``n`` is None or negative).

        Args:
            n: How many findings of each rank to keep; None or negative keeps all.
        """
        ranks = tuple(r.head(n) for r in self.ranks)
        return self if all(a is b for a, b in zip(ranks, self.ranks)) else self._carry(ranks=ranks)

    # -- renderers ------------------------------------------------------------------
    def _header(self) -> str:
        n = len(self.ranks)
        first = self.ranks[0] if self.ranks else None
        where = ""
        if first is not None:
            where = f" ({first.backend}" + (f", {first.device_label})" if first.device_label else ")")
        head = f"{n} rank{'s' if n != 1 else ''}{where}, each read on its own"
        s = self.straggler
        if s is not None:
            others = [v for r, v in enumerate(self.compute_per_step_us) if r != s and v is not None]
            return (
                f"{head}: rank {s} is the straggler, the rank the others wait for: {_us(self.compute_per_step_us[s])} "
                f"of compute per step, the most of {len(others) + 1} ranks (next: {_us(max(others))}); compute is "
                "step time less time in collectives"
            )
        known = [v for v in self.compute_per_step_us if v is not None]
        if len(known) < 2:
            return f"{head}: no straggler named (fewer than two ranks recorded steps)"
        return f"{head}: no straggler (no rank computes 25 % longer per step than every other)"

    def _rank_title(self, rank: int) -> str:
        mark = " (the straggler)" if rank == self.straggler else ""
        compute = self.compute_per_step_us[rank] if rank < len(self.compute_per_step_us) else None
        waited = self.collective_wait_per_step_us[rank] if rank < len(self.collective_wait_per_step_us) else None
        if compute is None:
            return f"rank {rank}{mark}: no steps recorded"
        return f"rank {rank}{mark}: compute {_us(compute)}/step, {_us(waited)}/step in collectives"

    def _view(self, fmt: Format, row_limit: Optional[int]) -> list[Block]:
        """Every rank's findings, the straggler's first, each under its rank's title."""
        from neuronprof.render import Column, Grid

        if fmt == "csv":
            pairs = [(r, f) for r in self.order() for f in self.ranks[r].head(row_limit).findings]
            one = Insights(())._view("csv", None)[0]
            assert isinstance(one, Grid)
            cols: list[Column[tuple[int, Finding]]] = [Column("rank", lambda p: str(p[0]))]
            cols += [Column(c.header, functools.partial(_of_finding, c)) for c in one.columns]
            return [Grid(cols, pairs)]
        blocks: list[Block] = [f"**{self._header()}**" if fmt == "markdown" else self._header()]
        for r in self.order():
            title = self._rank_title(r)
            if fmt == "markdown":
                blocks += ["", f"### {title[0].upper()}{title[1:]}", "", *self.ranks[r]._view(fmt, row_limit)]
            else:
                blocks += ["", f"== {title} ==", *self.ranks[r]._view(fmt, row_limit)]
        if self.notes:
            blocks += ["", *(f"{'- ' if fmt == 'markdown' else ''}note: {n}" for n in self.notes)]
        return blocks

    def _data(self) -> dict[str, Any]:
        return {
            "world_size": len(self.ranks),
            "straggler": self.straggler,
            "source": self.source,
            "notes": list(self.notes),
            "ranks": [
                {
                    "rank": r,
                    "compute_per_step_us": _at(self.compute_per_step_us, r),
                    "collective_wait_per_step_us": _at(self.collective_wait_per_step_us, r),
                    "insights": ins.to_dict(),
                }
                for r, ins in enumerate(self.ranks)
            ],
        }

    @classmethod
    def _from_data(cls, data: Mapping[str, Any]) -> RankInsights:
        ranks = data.get("ranks")
        if not isinstance(ranks, list) or not all(isinstance(r, Mapping) for r in ranks):
            raise ValueError("neuronprof findings of several ranks need a 'ranks' list")
        try:
            by_rank = sorted(ranks, key=lambda r: int(r["rank"]))
            straggler = data.get("straggler")
            return cls(
                ranks=tuple(Insights.from_dict(r["insights"]) for r in by_rank),
                straggler=None if straggler is None else int(straggler),
                compute_per_step_us=tuple(_opt_float(r.get("compute_per_step_us")) for r in by_rank),
                collective_wait_per_step_us=tuple(_opt_float(r.get("collective_wait_per_step_us")) for r in by_rank),
                notes=tuple(str(n) for n in data.get("notes", ())),
                source=str(data.get("source", "")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"invalid findings of several ranks: {exc}") from None


def _of_finding(column: Column[Finding], pair: tuple[int, Finding]) -> str:
    return column.cell(pair[1])


def analyze_ranks(timeline: Timeline) -> RankInsights:
    """Return the findings of every rank of a timeline, each rank read on its own, and the straggler.

    Args:
        timeline: A timeline with one timeline per rank (``timeline.ranks``, as
            [`timeline_from_trace`][neuronprof.analysis.insights.timeline_from_trace]
            reads a folder of ranks); a timeline of one rank gives one entry.

    Returns:
        Per rank, its findings over its own steps and its compute per step, and the
        straggler named, as a [`RankInsights`][neuronprof.analysis.insights.RankInsights].

    Raises:
        TypeError: ``timeline`` is not a [`Timeline`][neuronprof.analysis.insights.Timeline].
        ValueError: An event's time or id does not fit in int64 (a trace's always do).
    """
    from neuronprof.analysis.insights import analyze

    if not isinstance(timeline, Timeline):
        raise TypeError(f"analyze_ranks() takes a Timeline, got {type(timeline).__name__}")
    return rank_insights(timeline, [analyze(t) for t in timeline.ranks or (timeline,)])


def rank_insights(
    timeline: Timeline,
    found: list[Insights],
    figures: Optional[list[tuple[Optional[float], Optional[float]]]] = None,
) -> RankInsights:
    """``analyze_ranks`` of a timeline whose ranks' findings ``found`` are made already (one per rank, in order).

    ``figures``: each rank's ``rank_figures``, when read already (from its columns); else read from the timeline.
    """
    per_rank = timeline.ranks or (timeline,)
    figures = [rank_figures(t) for t in per_rank] if figures is None else figures
    compute = tuple(c for c, _ in figures)
    own = {n for t in per_rank for n in t.notes}
    straggler = vocab.straggler(compute)
    if straggler is not None:
        found[straggler] = _as_straggler(found[straggler])
    return RankInsights(
        ranks=tuple(found),
        straggler=straggler,
        compute_per_step_us=compute,
        collective_wait_per_step_us=tuple(w for _, w in figures),
        notes=tuple(n for n in timeline.notes if n not in own) if timeline.ranks else (),
        source=timeline.source,
    )


def _as_straggler(insights: Insights) -> Insights:
    """The straggler's findings, in its words: its time in collectives is not waiting for a slower rank.

    The others wait for the straggler; what it spends in a collective is the
    collective's own cost (moving the data, the last rank's share of the sync).
    """
    out = []
    for f in insights.findings:
        if f.kind == "communication_wait":
            f = dataclasses.replace(
                f,
                title=f.title.replace("Waiting in collectives", "Collectives"),
                evidence=dataclasses.replace(
                    f.evidence,
                    detail=f.evidence.detail.split("; a rank waits")[0]
                    + "; this rank is the straggler, the one the others wait for: the time is the collectives' "
                    "own cost, not waiting",
                ),
                suggestion=(
                    "speed up this rank's own work first (its other findings): the other ranks wait for it; then "
                    "overlap communication with compute (DDP overlaps gradient buckets with backward)"
                ),
            )
        out.append(f)
    return dataclasses.replace(insights, findings=tuple(out))


def rank_figures(timeline: Timeline) -> tuple[Optional[float], Optional[float]]:
    """One rank's ``(compute per step, time in collectives per step)`` in µs; ``(None, None)`` without steps.

    The steps are the rank's ``ProfilerStep#N`` spans as the table counts them (an empty
    last step of a thread, opened as the profiler stopped, is none:
    ``neuronprof._vocabulary.step_count``); the time in collectives is
    ``neuronprof._vocabulary.collective_wait_ns`` of its collective events, host and device.

    Args:
        timeline: The events of one rank.
    """
    import numpy as np

    host = timeline.host
    threads: dict[str, int] = {}
    thread = np.array([threads.setdefault(e.thread, len(threads)) for e in host], np.int64)
    spans = [(e.start_ns, e.end_ns) for e in host if vocab.is_collective(e.name, vocab.K_OTHER)]
    spans += [(d.start_ns, d.end_ns) for d in timeline.device if vocab.is_collective(d.name, vocab.K_DEVICE)]
    return figures_of(
        thread,
        np.array([e.start_ns for e in host], np.int64),
        np.array([e.end_ns for e in host], np.int64),
        np.array([e.category == "step" for e in host], bool),
        spans,
    )


def figures_of(
    thread: Any, start: Any, end: Any, is_step: Any, collectives: list[tuple[int, int]]
) -> tuple[Optional[float], Optional[float]]:
    """``rank_figures`` of a rank's host events as columns (thread, start, end in ns, whether a step) and the
    ``(start, end)`` of its collective events, host and device."""
    steps = _steps(thread, start, end, is_step)
    if not steps:
        return None, None
    waited = sum(vocab.collective_wait_ns(steps, collectives))
    total = sum(e - s for s, e in steps)
    n = len(steps)
    return (total - waited) / n / 1000, waited / n / 1000


def _steps(thread: Any, start: Any, end: Any, is_step: Any) -> list[tuple[int, int]]:
    """The rank's steps as ``(start, end)`` ns, thread by thread, as the table counts them."""
    import numpy as np

    steps, others = np.flatnonzero(is_step), np.flatnonzero(~is_step)
    out: list[tuple[int, int]] = []
    for th in dict.fromkeys(thread[steps].tolist()):
        mine = steps[thread[steps] == th]
        spans = sorted(zip(start[mine].tolist(), end[mine].tolist()))
        within = np.sort(start[others[thread[others] == th]], kind="stable")  # in tree order: nearly sorted
        lo = np.searchsorted(within, [s for s, _ in spans])
        hi = np.searchsorted(within, [e for _, e in spans])
        out += spans[: vocab.step_count((lo < hi).tolist())]
    return out


def _at(values: Sequence[Optional[float]], i: int) -> Optional[float]:
    return values[i] if i < len(values) else None


def _opt_float(value: Any) -> Optional[float]:
    return None if value is None else float(value)
