"""The report's opening: every finding x (the toy that carries it, its initialised control, each pretrained
model, its random-weight control), as one typed comparison, a forest plot and the verdict table."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from analyses.pretrained.findings import CAUSAL_FINDINGS, CIRCUIT_FINDING, PRETRAINED_FINDINGS, THRESHOLDS_TEXT
from analyses.pretrained.settled import SettledFinding
from analyses.report.document import Figure, Section, Table
from analyses.report.figures import ForestPoint, ForestRow, forest_plot
from analyses.toy_findings import TOY_OF_FINDING, TOY_ONLY_FINDINGS, ToyFinding
from probes.display.verdict_table import verdict_tables_html, verdict_text, verdicts_dataframe
from probes.stats.findings import ALPHA, Finding

if TYPE_CHECKING:
    import pandas as pd

    from analyses.pretrained.measure import PretrainedRun

AnyFinding = Finding | ToyFinding
TOY = "toy"
TOY_CONTROL = "toy (at initialisation)"
CONTROL_SUFFIX = " (random weights)"
VERDICT_FINDINGS = (*PRETRAINED_FINDINGS, *CAUSAL_FINDINGS, CIRCUIT_FINDING, *TOY_ONLY_FINDINGS)


@dataclass(frozen=True)
class Comparison:
    """``rows[finding][column]``: the finding measured on the toy (``"toy"``), the toy at initialisation
    (``"toy (at initialisation)"``), each pretrained model and its control (``"MODEL (random weights)"``);
    a column that did not measure a finding has no entry. ``settled[column][finding]``: a pretrained model's
    findings after ``--settle`` (none without it)."""

    columns: tuple[str, ...]
    rows: Mapping[str, Mapping[str, AnyFinding]]
    settled: Mapping[str, Mapping[str, SettledFinding]] = field(default_factory=dict)

    def by_column(self) -> dict[str, dict[str, AnyFinding]]:
        """``{column: {finding: finding}}``: each toy, model or control's findings."""
        return {column: {name: row[column] for name, row in self.rows.items() if column in row}
                for column in self.columns}

    def _repr_html_(self) -> str:
        """The verdict table of each column (the toy, each model, each control), one row per finding."""
        return verdict_tables_html(self.by_column(), title="Verdicts")

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (column, finding): value, interval, null, control, holds."""
        import pandas as pd

        frames = [verdicts_dataframe(findings).assign(column=column) for column, findings in self.by_column().items()]
        return pd.concat(frames, ignore_index=True) if frames else verdicts_dataframe({})


def compare_findings(toy_findings: Mapping[str, Mapping[str, ToyFinding]],
                     runs: Mapping[str, PretrainedRun]) -> Comparison:
    """The :class:`Comparison` of the toys' findings (``toy_findings[toy][name]``) and the pretrained runs."""
    columns: list[str] = []
    if any(toy_findings.values()):
        columns += [TOY, TOY_CONTROL]
    for model, run in runs.items():
        columns.append(model)
        if run.control is not None:
            columns.append(model + CONTROL_SUFFIX)
    rows: dict[str, dict[str, AnyFinding]] = {}
    for name in VERDICT_FINDINGS:
        row: dict[str, AnyFinding] = {}
        toy = toy_findings.get(TOY_OF_FINDING.get(name, ""), {}).get(name)
        if toy is not None:
            row[TOY] = toy
            row[TOY_CONTROL] = toy.control_finding()
        for model, run in runs.items():
            if name in run.findings:
                row[model] = run.findings[name]
            if run.control is not None and name in run.control_findings:
                row[model + CONTROL_SUFFIX] = run.control_findings[name]
        if row:
            rows[name] = row
    return Comparison(tuple(columns), rows, {model: run.settled for model, run in runs.items() if run.settled})


def cell(finding: AnyFinding | None, *, toy_cell: bool = False, settled: SettledFinding | None = None) -> str:
    """``**holds** 0.879 [0.850, 0.908], p=0.001`` (Markdown emphasis; the HTML renders it); toys add which toy
    and how many seeds held on their own; a finding settled in rounds adds ``--settle: settled after 120 batches:
    holds`` or ``--settle: unsettled: needs about 800 more batches (... tokens ...)``."""
    if finding is None:
        return "-"
    value, (low, high) = finding.value, finding.ci
    numbers = "n/a" if not math.isfinite(value) else f"{value:.3f}"
    if math.isfinite(low) and math.isfinite(high):
        numbers += f" [{low:.3f}, {high:.3f}]"
    p = finding.reported_p
    if math.isfinite(p):
        numbers += f", p={p:.3g}"
    text = f"{'**holds**' if finding.holds else verdict_text(finding)}: {numbers}"
    if isinstance(finding, ToyFinding):
        seeds = f"{finding.held}/{len(finding.seeds)} seeds held" if toy_cell else f"{len(finding.seeds)} seeds"
        text += f" ({finding.toy} toy, {seeds})"
    if settled is not None and (note := settled.table_note()):
        text += f"; --settle: {note}"
    return text


def _forest_rows(comparison: Comparison) -> list[ForestRow]:
    rows = []
    for name, row in comparison.rows.items():
        first = next(iter(row.values()))
        points = [ForestPoint(column, f.value, f.ci, f.null_value, f.verdict,
                              "toy" if column in (TOY, TOY_CONTROL) else "model",
                              column == TOY_CONTROL or column.endswith(CONTROL_SUFFIX))
                  for column, f in row.items()]
        rows.append(ForestRow(name.replace("_", " "), points, first.effect))
    return rows


def verdict_section(comparison: Comparison, figures: Path | None = None) -> Section:
    """One row per finding; the toy that carries it, the toy at initialisation, each pretrained model and its
    control; the forest plot of the same numbers above the table (when ``figures`` is a folder)."""
    columns = ["finding", *comparison.columns]
    rows = [[name, *(cell(comparison.rows[name].get(c), toy_cell=c == TOY,
                          settled=comparison.settled.get(c, {}).get(name)) for c in comparison.columns)]
            for name in comparison.rows]
    section = Section("Verdicts", [
        f"A finding holds when its p-value (Holm-adjusted over the attention findings of the model; the head "
        f"ablations are a second family, tested in the fixed order induction, previous token, topic; the "
        f"previous-token -> induction K-composition edge, by path patching, a third of its own) is below "
        f"{ALPHA}, its 95% "
        f"interval lies above its null and above the same architecture with random weights (the control, probed "
        f"on the same batches), and the effect clears a threshold: {THRESHOLDS_TEXT} Best heads are chosen on the "
        f"even batches and measured on the odd ones, so intervals and p-values do not reward the search over "
        f"heads. Cells: verdict, value [95% interval], adjusted p (the first pass's fixed sample); with --settle, a "
        f"finding settled in rounds adds its verdict on the confidence sequence and the units it took, or what it "
        f"still needs (the Settling section below). A random-weight column should never hold; "
        f"if it does, the statistic is confounded.",
        "Toys: each finding is measured with the same probes on the paper toy that carries the mechanism (the cell "
        "names it), trained on several seeds, against the same toy at initialisation (same seed, same data) as "
        "its control. The value is the mean over seeds with a 95% Student-t interval over seeds; it holds when "
        "that interval's lower end clears the null, the control's upper end and the threshold; p is the largest "
        "per-seed adjusted p; the cell counts the seeds that held on their own. The last three rows are the "
        "papers' own claims, measured on their toys only.",
    ], [Table(columns, rows)], figures_first=True)
    if figures is not None and comparison.rows:
        path = forest_plot(_forest_rows(comparison), figures / "verdicts_forest.png")
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "Every finding: the toy (blue), each pretrained model (red), the toy at "
                                      "initialisation and each random-weight control (grey), with 95% intervals; "
                                      "the black bar on each line is that estimate's own null; filled circles "
                                      "hold, open circles are inconclusive (the interval straddles the "
                                      "threshold), open squares absent (the interval lies below it)."))
    return section
