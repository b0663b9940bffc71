"""The report's "Causal checks": each head ablation of each pretrained model beside its random-head null and the
model's random-weight control (:mod:`analyses.pretrained.causal`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyses.pretrained.findings import CAUSAL_FINDINGS
from analyses.report.document import Figure, Section, Table
from analyses.report.figures import NullStripRow, null_strips

if TYPE_CHECKING:
    from analyses.pretrained.measure import PretrainedRun

COLUMNS = ["model", "finding", "heads (chosen on other batches)", "loss change", "95% CI", "null q99", "p",
           "clean loss", "tokens", "draws", "verdict"]


def causal_section(runs: Mapping[str, PretrainedRun], figures: Path) -> Section | None:
    """The section, or None when no model was ablated."""
    rows: list[list[Any]] = []
    panels: dict[str, list[NullStripRow]] = {name: [] for name in CAUSAL_FINDINGS}
    notes: list[str] = []
    for model, run in runs.items():
        for label, measured, findings in ((model, run.measured, run.findings),
                                          (f"{model} (random weights)", run.control, run.control_findings)):
            if measured is None:
                continue
            if measured.causal_note:
                notes.append(f"{label}: {measured.causal_note}.")
            for name, m in measured.causal.items():
                finding = findings.get(name)
                verdict = finding.verdict if finding is not None else "inconclusive"
                p = finding.reported_p if finding is not None else m.p_value
                heads = " ".join(f"L{layer}H{h}" for layer, h in m.heads)
                rows.append([label, name, heads, m.value, m.ci, m.null_q99, p,
                             ", ".join(f"{s} {c:.3f}" for s, c in zip(m.slices, m.clean_loss)),
                             ", ".join(f"{s} {n}" for s, n in zip(m.slices, m.n_tokens)),
                             len(m.null), "**holds**" if verdict == "holds" else verdict])
                panels[name].append(NullStripRow(label, m.null, m.value, m.ci, m.null_q99, verdict,
                                                 label.endswith("(random weights)")))
    if not rows and not notes:
        return None
    draws = max((len(m.null) for run in runs.values() for m in run.measured.causal.values()), default=0)
    section = Section("Causal checks", [
        "Heads a probe names are knocked out and the model's loss is measured: the top heads of each probe (chosen "
        "on the even batches) are replaced by their mean output (at the same position over the measured "
        "sequences) on sequences they were not chosen on. The null is the same ablation of random head sets with "
        f"as many heads in each layer (up to {draws} draws, measured ten at a time and stopped once enough reached "
        "the observed change that p cannot fall below 0.01: the draws column): the grey dots; the black bar is its "
        "99th percentile, the diamond the observed loss change with its 95% bootstrap interval over sequences "
        "(filled: the finding holds; open: inconclusive; an open square: absent, its interval below the threshold). "
        "Induction and previous-token heads are measured on the repeated half of [BOS] X X (in-context "
        "copying); topic heads on natural text, as the change on tokens whose LDA topic already appeared in the row "
        "minus the change on tokens whose topic did not. The three ablations of a model are one family tested in "
        "that fixed order; each model sits beside its random-weight control, whose ablations should hold nothing.",
        *notes,
    ], [Table(COLUMNS, rows)], figures_first=True)
    panels = {name.replace("_", " "): rows for name, rows in panels.items() if rows}
    if panels:
        path = null_strips(panels, figures / "causal_nulls.png", xlabel="loss change (nats per token)")
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "Each ablation's loss change (diamond, 95% interval) beside its random-head "
                                      "null (grey dots, 99th percentile as a black bar); the random-weight control "
                                      "in grey."))
    return section
