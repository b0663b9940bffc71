"""The verdict table and forest plot: the toy column, the initialised toy, models and controls; no Markdown in HTML."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from analyses.pretrained.settled import CORPUS_SPENT, SequenceLook, SettledFinding
from analyses.report.document import Report, inline_html
from analyses.report.render_check import dump_dom
from analyses.report.verdicts import TOY, TOY_CONTROL, cell, compare_findings, verdict_section
from analyses.toy_findings import aggregate_seeds, judge_against_init
from mechprobe import records
from probes.stats.findings import Finding
from tests.chromium import require_chromium


def _finding(value: float, null: float = 0.05) -> Finding:
    return Finding("induction score of the best head", value, (value - 0.01, value + 0.01), "uniform attention",
                   null, 0.001, 0.1)


def _toy() -> dict:
    seeds = [judge_against_init({"induction_protocol": _finding(v), "generalized_induction": _finding(v)},
                                {"induction_protocol": _finding(0.06), "generalized_induction": _finding(0.06)}, s)
             for s, v in enumerate([0.6, 0.62, 0.61, 0.63, 0.1])]
    return {"induction": aggregate_seeds("induction", seeds)}


def _run(value: float, control: float, settled=None):
    return SimpleNamespace(findings={"induction_protocol": _finding(value).with_control(control, (control, control))},
                           control=object(), control_findings={"induction_protocol": _finding(control)},
                           settled=settled or {})


def test_the_toy_column_names_its_toy_and_counts_seeds():
    comparison = compare_findings(_toy(), {"smollm2": _run(0.88, 0.02)})
    assert comparison.columns == (TOY, TOY_CONTROL, "smollm2", "smollm2 (random weights)")
    row = comparison.rows["induction_protocol"]
    assert set(row) == set(comparison.columns)
    assert cell(row[TOY], toy_cell=True).endswith("(induction toy, 4/5 seeds held)")
    assert cell(row[TOY_CONTROL]).startswith(("absent: ", "inconclusive"))  # the initialised toy never holds
    assert cell(row["smollm2"]).startswith("**holds**: 0.880 [0.870, 0.890]")
    # a toy-only finding has no pretrained cells; a finding nobody measured has no row
    assert set(comparison.rows["generalized_induction"]) == {TOY, TOY_CONTROL}
    assert "cooccurrence_ordering" not in comparison.rows
    summary = records.dump(comparison.rows)
    assert summary["induction_protocol"][TOY]["held"] == 4
    assert summary["induction_protocol"]["smollm2"]["control_value"] == 0.02


def _settled(verdict: str, stop: str, needs: tuple[int, int] | None = None) -> SettledFinding:
    look = SequenceLook(1200, 0.3, 0.05, 0.55)
    return SettledFinding("induction_protocol", "[BOS] X X batches", verdict, "inconclusive", 0.15, 1200, 3,
                          480_000, stop, *(needs or (None, None)), 40, (look,))


def test_the_verdict_table_says_what_settling_found():
    held = _settled("holds", "settled after 1,200 [BOS] X X batches")
    assert held.table_note() == "settled after 1,200 [BOS] X X batches: holds"
    spent = _settled("inconclusive", f"the text ran out: {CORPUS_SPENT}", (800, 1_200_000))
    assert spent.table_note() == ("unsettled: needs about 800 more [BOS] X X batches (1,200,000 tokens beyond the "
                                  "corpora given)")
    budget = _settled("inconclusive", "the --budget-minutes budget (20 min) is spent", (800, 1_200_000))
    assert budget.table_note().endswith("(1,200,000 more tokens of fresh text)")
    # the first pass decided it: no round measured it, so the table adds nothing
    assert replace(held, looks=()).table_note() == ""
    for settled, expected in ((held, "; --settle: settled after 1,200 [BOS] X X batches: holds"),
                              (spent, "; --settle: unsettled: needs about 800 more")):
        run = _run(0.3, 0.02, {"induction_protocol": settled})
        run.findings["induction_protocol"] = replace(run.findings["induction_protocol"], ci=(0.0, 0.6))
        comparison = compare_findings({}, {"smollm2": run})
        assert comparison.settled == {"smollm2": {"induction_protocol": settled}}
        table = verdict_section(comparison).tables[0]
        model_cell = table.rows[0][table.columns.index("smollm2")]
        assert expected in model_cell and model_cell.startswith("inconclusive")
        assert "--settle" not in table.rows[0][table.columns.index("smollm2 (random weights)")]
    # without --settle the cells are the first pass's alone
    plain = verdict_section(compare_findings({}, {"smollm2": _run(0.3, 0.02)})).tables[0]
    assert "--settle" not in plain.rows[0][plain.columns.index("smollm2")]


def test_the_forest_plot_opens_the_report_and_the_html_has_no_markdown(tmp_path):
    figures = tmp_path / "figures"
    figures.mkdir()
    section = verdict_section(compare_findings(_toy(), {"smollm2": _run(0.88, 0.02)}), figures)
    assert section.figures[0].path == "figures/verdicts_forest.png" and (figures / "verdicts_forest.png").stat().st_size
    Report("r", [section], {}).write(tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.index("![") < markdown.index("| finding |")  # the plot above the table
    page = (tmp_path / "report.html").read_text()
    assert page.index("<img") < page.index("<table>")
    assert "**" not in page and "<strong>holds</strong>" in page


def test_inline_markdown_to_html():
    assert inline_html("**holds**: 0.9") == "<strong>holds</strong>: 0.9"
    assert inline_html("*a caption* and `--set x=1`") == "<em>a caption</em> and <code>--set x=1</code>"
    assert inline_html("2*3*4, a * b, ||W_V||^2 <x>") == "2*3*4, a * b, ||W_V||^2 &lt;x&gt;"


@pytest.mark.slow
def test_in_headless_chromium_the_forest_plot_comes_first_and_no_markdown_shows(tmp_path):
    require_chromium()
    figures = tmp_path / "figures"
    figures.mkdir()
    section = verdict_section(compare_findings(_toy(), {"smollm2": _run(0.88, 0.02)}), figures)
    page = Report("r", [section], {}).write(tmp_path)
    dom = dump_dom(page)
    body = dom[dom.index("<body"):]
    assert "**" not in body and body.count("<strong>holds</strong>") >= 3
    assert body.index("<img") < body.index("<table") and 'alt="Every finding:' in body
