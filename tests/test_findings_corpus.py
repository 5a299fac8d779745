"""The findings corpus: ``neuronprof advise`` on traces of real workloads, against labels read from their evidence.

Each case of ``tests/corpus/labels.json`` is a trace that ``tests/corpus/generate.py``
recorded (tiny ``transformers`` models built from configs, small planted problems,
two-rank DDP over gloo, one step on the PrivateUse1 test backend). Its labels say
what the trace shows: the kinds that **must** be found (the planted problems and
what the trace shows beyond doubt), the kinds that **may** be found because they
are true for this run (a tiny model is dominated by host time between its ops),
and title fragments that no finding may carry (``must_not_titles``: the wrong one
of two findings of one kind). Any other kind is a false finding.

The traces are committed, so every check here is a check of the engine on fixed
input: it never depends on this machine's timing.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Union

import pytest

from neuronprof.analysis import Insights, advise
from neuronprof.analysis.insights import FINDING_KINDS, Finding, RankInsights

CORPUS = Path(__file__).resolve().parent / "corpus"
TRACES = CORPUS / "traces"
LABELS: dict[str, Any] = json.loads((CORPUS / "labels.json").read_text(encoding="utf-8"))
CASES = sorted(LABELS["cases"])

FILE_BUDGET = 400 * 1024
"""Largest trace file, gzipped: the corpus lives in the repository."""
CORPUS_BUDGET = 4 * 1024 * 1024


def trace_of(case: str) -> Path:
    """A case's trace: ``traces/<case>.json.gz``, or the folder ``traces/<case>/`` of its rank files."""
    folder = TRACES / case
    return folder if folder.is_dir() else TRACES / f"{case}.json.gz"


@cache
def findings_of(case: str) -> Union[Insights, RankInsights]:
    return advise(trace_of(case))


@dataclass(frozen=True)
class Verdict:
    """One case's findings read against its labels."""

    found: tuple[Finding, ...]
    missing: frozenset[str]
    """``must`` kinds not found."""
    false: tuple[Finding, ...]
    """Findings of a kind outside ``must`` and ``may``, or whose title holds a ``must_not_titles`` fragment."""
    planted: int
    planted_found: int


def verdict(case: str) -> Verdict:
    label = LABELS["cases"][case]
    found = tuple(findings_of(case))
    allowed = set(label["must"]) | set(label["may"])
    banned = label.get("must_not_titles", [])
    false = tuple(f for f in found if f.kind not in allowed or any(b in f.title for b in banned))
    kinds = {f.kind for f in found}
    planted = [p["kind"] for p in label["planted"]]
    return Verdict(
        found=found,
        missing=frozenset(set(label["must"]) - kinds),
        false=false,
        planted=len(planted),
        planted_found=sum(1 for k in planted if k in kinds),
    )


def _describe(findings: tuple[Finding, ...]) -> str:
    return "; ".join(f"[{f.kind}] {f.title}" for f in findings) or "none"


# == the corpus itself ===============================================================


def test_every_case_has_its_trace_and_the_corpus_stays_small() -> None:
    total = 0
    for case in CASES:
        path = trace_of(case)
        files = sorted(path.glob("*.json.gz")) if path.is_dir() else [path]
        assert files and all(f.is_file() for f in files), f"{case}: no trace at {path.relative_to(CORPUS)}"
        for f in files:
            size = f.stat().st_size
            assert size < FILE_BUDGET, f"{f.name}: {size / 1024:.0f} KB, over {FILE_BUDGET // 1024} KB"
            total += size
    assert total < CORPUS_BUDGET, f"the corpus holds {total / 1024:.0f} KB, over {CORPUS_BUDGET // 1024} KB"
    on_disk = {p.name.removesuffix(".json.gz") for p in TRACES.iterdir()}
    assert on_disk == set(CASES), "every trace has labels and every label a trace"


@pytest.mark.parametrize("case", CASES)
def test_labels_are_complete(case: str) -> None:
    label = LABELS["cases"][case]
    known = set(FINDING_KINDS)
    assert label["workload"].strip() and "\n" not in label["workload"]
    for group in ("must", "may"):
        assert set(label[group]) <= known, f"{case}: unknown kinds in {group}: {set(label[group]) - known}"
        assert all(reason.strip() for reason in label[group].values()), f"{case}: every {group} kind says why"
    assert not set(label["must"]) & set(label["may"]), f"{case}: a kind is either a must or a may"
    assert isinstance(label["record_shapes"], bool)
    for planted in label["planted"]:
        assert planted["kind"] in label["must"], f"{case}: a planted problem must be found"
        assert planted["problem"].strip()


@pytest.mark.parametrize("case", CASES)
def test_labels_say_how_the_trace_was_recorded(case: str) -> None:
    path = trace_of(case)
    for f in sorted(path.glob("*.json.gz")) if path.is_dir() else [path]:
        # The header comes before the events; the session writes "record_shapes": 1 there when shapes were on.
        with gzip.open(f, "rt", encoding="utf-8") as stream:
            header = stream.read(4096).split('"traceEvents"')[0]
        assert ('"record_shapes": 1' in header) == LABELS["cases"][case]["record_shapes"], f.name


def test_the_corpus_covers_what_it_is_for() -> None:
    labels = LABELS["cases"].values()
    planted = {p["kind"] for label in labels for p in label["planted"]}
    assert {"dtype_conversion", "host_overhead", "input_pipeline", "hidden_sync", "communication_wait"} <= planted
    assert any(not label["planted"] for label in labels), "clean cases too"
    assert any(trace_of(case).is_dir() for case in CASES), "a multi-rank folder"
    assert sum(1 for label in labels if not label["record_shapes"]) >= 2, "cases recorded without shapes"


# == the engine on the corpus ========================================================


@pytest.mark.parametrize("case", CASES)
@pytest.mark.slow
def test_advise_finds_what_the_trace_shows_and_nothing_else(case: str) -> None:
    v = verdict(case)
    problems = []
    if v.missing:
        problems.append(f"missed {sorted(v.missing)}")
    if v.false:
        problems.append(f"false: {_describe(v.false)}")
    assert not problems, f"{case}: " + " | ".join(problems) + f"\nfound: {_describe(v.found)}"


@pytest.mark.slow
def test_corpus_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """Findings raised, true and false over the whole corpus, and the planted problems found."""
    verdicts = {case: verdict(case) for case in CASES}
    raised = sum(len(v.found) for v in verdicts.values())
    false = sum(len(v.false) for v in verdicts.values())
    planted = sum(v.planted for v in verdicts.values())
    planted_found = sum(v.planted_found for v in verdicts.values())
    lines = [
        f"findings corpus: {len(CASES)} cases, {raised} findings raised, {raised - false} true, {false} false; "
        f"planted problems found {planted_found}/{planted}"
    ]
    lines += [
        f"  {case}: {len(v.found)} raised, {len(v.false)} false"
        + (f", missed {sorted(v.missing)}" if v.missing else "")
        for case, v in verdicts.items()
        if v.false or v.missing
    ]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert false == 0 and planted_found == planted, lines[0]


@pytest.mark.slow
def test_the_planted_straggler_is_named_and_ranks_are_read_apart() -> None:
    # Rank 1 does extra matmuls each step; rank 0 waits for it in gloo's all-reduce.
    ranks = findings_of("ddp_straggler")
    assert isinstance(ranks, RankInsights) and ranks.straggler == 1
    assert "communication_wait" in ranks.rank(0).kinds()
    assert all(ranks.rank(r).steps == 3 for r in (0, 1)), "steps are counted per rank, never across ranks"


@pytest.mark.slow
def test_the_guide_states_the_figure_this_corpus_gives() -> None:
    verdicts = [verdict(case) for case in CASES]
    raised = sum(len(v.found) for v in verdicts)
    false = sum(len(v.false) for v in verdicts)
    planted = sum(v.planted for v in verdicts)
    found = sum(v.planted_found for v in verdicts)
    guide = (CORPUS.parents[1] / "docs" / "insights.md").read_text(encoding="utf-8")
    row = f"| {len(CASES)} | {raised} | {raised - false} | {false} | {found} of {planted} |"
    assert row in guide, f"docs/insights.md should state the corpus figure: {row}"
