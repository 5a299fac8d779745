"""The report's findings, as plain data for the page: each finding's title, time at stake, evidence and guide link.

A renderer's part (see ``report``): it reads [`Insights`][neuronprof.analysis.insights.Insights]
(or [`RankInsights`][neuronprof.analysis.insights.RankInsights], rank by rank) and writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union, cast
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from neuronprof.analysis.insights import Insights, RankInsights

__all__ = ["MAX_FINDINGS"]

MAX_FINDINGS = 50
"""Findings listed per run (per rank of a folder) at most, the first in ``advise``'s order (what to fix first).

A long trace of many distinct op chains can hold thousands (about 1 kB of page each);
the header still counts every one, and ``advise`` lists them all.
"""


def _guide_link(kind: str, docs: str) -> dict[str, Any]:
    """A finding's guide section as a link: ``docs`` on the published guide, or the page in the sources (said so)."""
    from neuronprof.analysis.insights._findings import GUIDE_TITLE, GUIDE_URL, SECTIONS

    parts = urlsplit(docs)
    published = parts.scheme in ("http", "https") and bool(parts.netloc)
    in_sources = docs.split("#")[0] == GUIDE_URL
    note = f"{docs}, a page in neuronprof's sources" if in_sources else (None if published else docs)
    # Only a published address is linked: a path in the sources would resolve against the report's own
    # folder (where no guide is), and an address of any other scheme (from a JSON file, say) is shown as text.
    href = docs if published else None
    return {"href": href, "text": f"{GUIDE_TITLE} → {SECTIONS.get(kind, kind)}", "note": note}


def _findings_data(insights: Union[Insights, RankInsights, None]) -> Optional[dict[str, Any]]:
    if insights is None:
        return None
    from neuronprof.analysis.insights import RankInsights

    if isinstance(insights, RankInsights):
        return _rank_findings_data(insights)
    from neuronprof.analysis.insights._findings import _evidence_text, _stake

    listed = insights.head(MAX_FINDINGS)
    cut = len(listed.findings) < len(insights.findings)
    notes = list(insights.notes)
    if cut:
        notes.insert(
            0,
            f"the first {len(listed.findings)} of {len(insights.findings)} findings are listed here, in the order of "
            "what to fix first; `neuronprof advise TRACE` (or `s.insights()`) lists every one",
        )
    return {
        "header": insights._header(),
        "findings": [
            {
                "kind": f.kind,
                "title": f.title,
                "stake": _stake(f),
                "estimated_us": f.estimated_us,
                "evidence": _evidence_text(f.evidence, f.kind),
                "suggestion": f.suggestion,
                "guide": _guide_link(f.kind, f.docs),
            }
            for f in listed.findings
        ],
        "notes": notes,
    }


def _rank_findings_data(insights: RankInsights) -> dict[str, Any]:
    """Every rank's findings in one list, the straggler's first, each titled with its rank."""
    findings: list[dict[str, Any]] = []
    notes: list[str] = []
    for rank in insights.order():
        one = cast(dict[str, Any], _findings_data(insights.ranks[rank]))
        notes.append(f"{insights._rank_title(rank)}; {one['header']}")
        findings += [{**f, "title": f"rank {rank}: {f['title']}"} for f in one["findings"]]
        notes += [f"rank {rank}: {n}" for n in one["notes"]]
    return {"header": insights._header(), "findings": findings, "notes": [*notes, *insights.notes]}
