"""The report's opening table: every finding x (toy, each pretrained model, its random-weight control)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from analyses.pretrained.findings import PRETRAINED_FINDINGS, THRESHOLDS_TEXT
from analyses.report.document import Section, Table
from probes.stats.findings import ALPHA

if TYPE_CHECKING:
    from analyses.pretrained.measure import PretrainedRun


def _cell(finding: Mapping[str, Any] | None) -> str:
    if not finding:
        return "-"
    value, (low, high) = finding["value"], finding["ci"]
    numbers = "n/a" if value is None else f"{value:.3f}"
    if low is not None and high is not None:
        numbers += f" [{low:.3f}, {high:.3f}]"
    p = finding["null"].get("p_adjusted", finding["null"]["p_value"])
    if p is not None:
        numbers += f", p={p:.3g}"
    return f"{'**holds**' if finding['holds'] else 'no'}: {numbers}"


def verdict_section(toy_summaries: Mapping[str, Mapping[str, Any]], runs: Mapping[str, "PretrainedRun"]) -> Section:
    """One row per finding; a column for the toy settings (the findings a toy run wrote into its summary, in the
    pretrained schema), each pretrained model and its control."""
    toy: dict[str, Any] = {}
    for summary in toy_summaries.values():
        toy.update(summary.get("findings") or {})
    columns = ["finding", "toy"]
    cells: list[dict[str, dict[str, Any]]] = []
    for name, run in runs.items():
        columns.append(name)
        cells.append({k: f.to_dict() for k, f in run.findings.items()})
        if run.control is not None:
            columns.append(f"{name} (random weights)")
            cells.append({k: f.to_dict() for k, f in run.control_findings.items()})
    rows = [[name, _cell(toy.get(name)), *(_cell(c.get(name)) for c in cells)] for name in PRETRAINED_FINDINGS]
    return Section("Verdicts", [
        f"A finding holds when its p-value (Holm-adjusted over the findings of the model) is below {ALPHA}, its 95% "
        f"interval lies above its null and above the same architecture with random weights (the control, probed "
        f"on the same batches), and the effect clears a threshold: {THRESHOLDS_TEXT} Best heads are chosen on the "
        f"even batches and measured on the odd ones, so intervals and p-values do not reward the search over "
        f"heads. Cells: verdict, value [95% interval], adjusted p. A random-weight column should never hold; "
        f"if it does, the statistic is confounded.",
    ], [Table(columns, rows)])
