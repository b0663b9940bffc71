"""The verdict table and forest plot: the toy column, the initialised toy, models and controls; no Markdown in HTML."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

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


def _run(value: float, control: float):
    return SimpleNamespace(findings={"induction_protocol": _finding(value).with_control(control, (control, control))},
                           control=object(), control_findings={"induction_protocol": _finding(control)})


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
