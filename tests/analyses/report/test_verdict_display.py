"""The report's findings show themselves: a toy's findings, a comparison of columns, as HTML tables and DataFrames."""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

from analyses.paper_result import PaperResult
from analyses.report.verdicts import Comparison
from analyses.toy_findings import ToyFinding, aggregate_seeds, judge_against_init
from probes.stats.findings import Finding


def _finding(value: float, p: float = 0.001) -> Finding:
    return Finding("score of the best head", value, (value - 0.02, value + 0.02), "uniform attention", 0.1, p, 0.1)


def _toy_findings() -> dict[str, ToyFinding]:
    seeds = [judge_against_init({"induction": _finding(v), "weak": _finding(0.12, p=0.5)},
                                {"induction": _finding(0.11), "weak": _finding(0.11, p=0.5)}, seed)
             for seed, v in enumerate([0.80, 0.85, 0.90])]
    return aggregate_seeds("induction", seeds)


class _ToyResult(PaperResult):
    experiment = "induction"

    def toy_findings(self) -> Mapping[str, ToyFinding]:
        return _toy_findings()


def _rows(text: str) -> list[str]:
    return re.findall(r"<tr class='mp-finding'>(.*?)</tr>", text)


def test_toy_result_shows_one_row_per_finding_with_holds():
    text = _ToyResult()._repr_html_()
    assert "http" not in text and "induction toy: findings over 3 seed(s)" in text
    induction, weak = _rows(text)
    assert induction.startswith("<td>induction</td><td>0.850 [") and induction.endswith("'mp-holds'>holds</td>")
    assert "uniform attention: 0.100" in induction and "<td>0.110 [" in induction  # the toy at initialisation
    assert weak.endswith("<td class='mp-absent'>absent</td>")
    frame = _ToyResult().to_dataframe()
    assert frame["finding"].tolist() == ["induction", "weak"] and frame["holds"].tolist() == [True, False]
    assert frame["value"][0] == pytest.approx(0.85) and frame["control_value"][0] == pytest.approx(0.11)


def test_comparison_shows_a_table_per_column():
    model = _finding(0.6).with_control(0.12, (0.1, 0.14))
    control = _finding(0.12, p=0.3)
    comparison = Comparison(("smollm2", "smollm2 (random weights)"),
                            {"induction": {"smollm2": model, "smollm2 (random weights)": control}})
    text = comparison._repr_html_()
    assert text.count("<table class='mp-verdicts'>") == 2 and "<h4>smollm2 (random weights)</h4>" in text
    rows = _rows(text)
    assert len(rows) == 2 and rows[0].endswith("'mp-holds'>holds</td>") and rows[1].endswith("'mp-absent'>absent</td>")
    frame = comparison.to_dataframe()
    assert frame[["column", "holds"]].values.tolist() == [["smollm2", True], ["smollm2 (random weights)", False]]
