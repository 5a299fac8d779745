"""Every result model has the same verbs, and the forms it gained read back to its own figures.

The models are made by the public API from traces torch.profiler recorded (the findings
corpus: training steps of GPT-2 and Llama, and a two-rank DDP job with a straggler) or, for a
comparison, built by hand, as the model allows.
"""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from neuronprof.analysis import NeuronProfile, Roofline, TraceDiff, diff, load_trace, roofline
from neuronprof.analysis.insights import Insights, RankInsights, advise
from neuronprof.model import Comparison, ComparisonRow, RankTable, Table

TRACES = Path(__file__).resolve().parent / "corpus" / "traces"
VERBS = (
    "to_dict",
    "from_dict",
    "to_json",
    "from_json",
    "head",
    "row",
    "to_text",
    "to_markdown",
    "to_csv",
    "to_html",
    "to_dataframe",
)


@pytest.fixture(scope="module")
def models() -> dict[str, object]:
    one, two = TRACES / "gpt2_train.json.gz", TRACES / "gpt2_compile.json.gz"
    ranks = load_trace(TRACES / "ddp_straggler")
    table = load_trace(one).table("cpu", row_limit=None)
    cmp = Comparison(
        rows=(
            ComparisonRow("eager", 120.0, 900.0, None, 1000.0, 950.0, 1100.0, 1.0, 0.5, table=table),
            ComparisonRow("compiled", 40.0, 300.0, None, 400.0, 380.0, 450.0, 2.5, 9.0, None, (), 1, None, 2.2, 2.8),
        ),
        baseline="eager",
        repeats=5,
        warmup=1,
        profiled_steps=3,
    )
    return {
        "Table": table,
        "RankTable": ranks.rank_table("cpu"),
        "Comparison": cmp,
        "TraceDiff": diff(one, two),
        "Roofline": roofline(one, device="trn2", time_source="cpu"),
        "NeuronProfile": NeuronProfile(notes=("no system profile",)),
        "Insights": advise(TRACES / "llama_train_bf16.json.gz"),
        "RankInsights": advise(TRACES / "ddp_straggler"),
    }


CLASSES = {
    c.__name__: c for c in (Table, RankTable, Comparison, TraceDiff, Roofline, NeuronProfile, Insights, RankInsights)
}


@pytest.mark.parametrize("name", list(CLASSES))
def test_every_result_model_has_the_same_verbs_and_reads_back_from_json(models, name: str) -> None:
    m = models[name]
    assert isinstance(m, CLASSES[name])
    for verb in VERBS:
        assert callable(getattr(m, verb)), f"{name} has no {verb}"
    back = type(m).from_json(m.to_json())
    assert back == m
    for fmt in ("to_text", "to_markdown", "to_csv", "to_html"):
        assert getattr(back, fmt)() == getattr(m, fmt)(), (name, fmt)
    assert m.to_dict()["schema"] == type(m).SCHEMA
    with pytest.raises(ValueError, match="expected schema"):
        type(m).from_dict({**m.to_dict(), "schema": "neuronprof.other/1"})


class _Cells(HTMLParser):
    """The header and body cells of the first HTML table, as text."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: list[str] = []
        self.rows: list[list[str]] = []
        self._in: str | None = None
        self._tables = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "table":
            self._tables += 1
        if self._tables == 1 and tag in ("th", "td"):
            self._in = tag
            if tag == "td" and (not self.rows or self._new_row):
                self.rows.append([])
            self._new_row = False
        if tag == "tr":
            self._new_row = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "td"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "th":
            self.headers.append(data)
        elif self._in == "td":
            self.rows[-1].append(data)


def _md_rows(text: str) -> list[list[str]]:
    """The cells of the first Markdown table (header first, the alignment line left out)."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    return [cells[0], *cells[2:]] if cells else []


@pytest.mark.parametrize("name", ["Table", "RankTable", "Comparison", "TraceDiff", "Roofline"])
def test_html_holds_the_markdown_table_cell_for_cell(models, name: str) -> None:
    m = models[name]
    parsed = _Cells()
    parsed.feed(m.to_html(row_limit=5))
    md = _md_rows(m.to_markdown(row_limit=5))
    assert parsed.headers == md[0]
    plain = [[c.replace("**", "").replace("\\|", "|") for c in row] for row in md[1:]]
    assert [[c for c in row] for row in parsed.rows] == [[c for c in row if c] for row in plain]
    assert len(parsed.rows) == min(5, len(m.rows))


def test_a_cross_rank_table_renders_markdown_one_column_per_rank_with_its_figures(models) -> None:
    rt = models["RankTable"]
    assert rt.world_size == 2 and len(rt.rows) > 3
    md = rt.to_markdown(row_limit=3)
    cells = _md_rows(md)
    assert cells[0][:1] == ["Name"] and "Rank 0 self CPU (µs)" in cells[0] and "Rank 1 self CPU (µs)" in cells[0]
    at = cells[0].index("Rank 0 self CPU (µs)")
    for row, r in zip(cells[1:], rt.rows[:3]):
        assert row[0] == r.name.replace("|", "\\|")
        assert [float(v) if v else None for v in row[at : at + 2]] == [
            None if v is None else pytest.approx(v, abs=0.05) for v in r.values
        ]
    assert len(cells) == 4
    assert f"showing 3 of {len(rt.rows)} rows" in md
    assert "straggler:" in md
    # The same view read back from its JSON renders the same.
    assert RankTable.from_json(rt.to_json()).to_markdown(row_limit=3) == md


def test_a_cross_rank_table_as_csv_has_one_line_per_op_and_rank(models) -> None:
    rt = models["RankTable"]
    lines = list(csv.DictReader(io.StringIO(rt.to_csv(notes=False))))
    assert len(lines) == 2 * len(rt.rows)
    for line in lines[:20]:
        r = rt.row(line["name"], on_device=line["on_device"] == "True")
        rank = int(line["rank"])
        assert int(line["calls"]) == r.calls[rank]
        value = r.values[rank]
        assert (line[rt.metric] == "") if value is None else float(line[rt.metric]) == pytest.approx(value, abs=1e-3)


@pytest.mark.parametrize("name", ["TraceDiff", "Roofline", "Comparison"])
def test_csv_of_a_model_that_had_none_reads_back_to_its_rows(models, name: str) -> None:
    m = models[name]
    lines = list(csv.DictReader(io.StringIO(m.to_csv())))
    assert len(lines) == len(m.rows) > 1
    for line, r in zip(lines, m.rows):
        assert line["name"] == r.name
        for key, text in line.items():
            value = getattr(r, key)
            if isinstance(value, float):
                assert float(text) == pytest.approx(value, abs=1e-3), key


def test_findings_as_csv_and_html_carry_every_finding(models) -> None:
    ins = models["Insights"]
    assert len(ins.findings) >= 2
    lines = list(csv.DictReader(io.StringIO(ins.to_csv(notes=True), newline=""), restkey="rest"))
    kept = [line for line in lines if not line["kind"].startswith("# note")]
    assert [line["kind"] for line in kept] == ins.kinds()
    assert [line["title"] for line in kept] == [f.title for f in ins.findings]
    parsed = _Cells()
    parsed.feed(ins.to_html())
    assert [row[0] for row in parsed.rows] == [f.title for f in ins.findings]
    assert ins.to_text(row_limit=1).count("\n1. [") == 1 and "\n2. [" not in ins.to_text(row_limit=1)


def test_print_of_a_cross_rank_table_shows_its_20_largest_rows(models) -> None:
    rt = models["RankTable"]
    assert str(rt) == rt.to_text(row_limit=20)
    assert json.loads(rt.to_json(row_limit=2))["total_rows"] == len(rt.rows)


@pytest.mark.parametrize("name", [n for n in CLASSES if n not in ("NeuronProfile", "Comparison", "RankInsights")])
def test_a_cut_model_counts_the_whole_and_says_how_much_it_shows(models, name: str) -> None:
    m = models[name]
    total = len(m)
    assert total > 1, name
    cut = m.head(1)
    assert len(cut) == 1
    for fmt in ("to_text", "to_markdown", "to_html"):
        for text in (getattr(cut, fmt)(), getattr(m, fmt)(row_limit=1)):
            assert f"showing 1 of {total} " in text, (name, fmt)
        assert "showing 1 of" not in getattr(m, fmt)(), (name, fmt)
    back = type(m).from_json(m.to_json(row_limit=1))
    assert back == cut
    assert f"showing 1 of {total} " in back.to_text()


def test_the_findings_header_counts_every_finding_of_a_cut(models) -> None:
    insights = models["Insights"]
    total = len(insights)
    assert insights.head(1).to_text().startswith(f"{total} finding(s) over")
    with pytest.raises(KeyError, match="no finding of kind 'no_such_kind'"):
        insights.row("no_such_kind")


@pytest.mark.parametrize("name", list(CLASSES))
def test_every_model_renders_with_row_limit_first_and_as_a_dataframe(models, name: str) -> None:
    pytest.importorskip("pandas")
    m = models[name]
    # The renderings take the same first argument, the row limit.
    for fmt in ("to_text", "to_markdown", "to_csv", "to_html"):
        assert getattr(m, fmt)(1) == getattr(m, fmt)(row_limit=1), (name, fmt)
    with pytest.raises(TypeError, match="notes=True"):
        m.to_csv(True)
    frame = m.to_dataframe()
    rows = list(m) if name != "NeuronProfile" else list(m.neffs)
    assert len(frame) == len(rows) and len(m.to_dataframe(1)) == min(1, len(rows))
    assert len(frame.columns) > 1, "one column per field of a row, even with no rows"
    if rows and hasattr(rows[0], "to_dict"):
        first = rows[0].to_dict()
        assert {k: frame.iloc[0][k] for k in ("name", "kind") if k in first} == {
            k: first[k] for k in ("name", "kind") if k in first
        }


def test_a_neuron_profile_gives_each_section_as_a_dataframe() -> None:
    pytest.importorskip("pandas")
    from neuronprof.analysis.neuron import NeffExecution

    p = NeuronProfile(executions=(NeffExecution("a.neff", 0, 1000, 1), NeffExecution("a.neff", 2000, 3500, 2)))
    assert list(p.to_dataframe(section="executions").columns) == list(NeffExecution._fields)
    neffs = p.to_dataframe()
    assert len(neffs) == 1 and neffs.iloc[0]["calls"] == 2
    with pytest.raises(ValueError, match="section must be one of"):
        p.to_dataframe(section="engines")
