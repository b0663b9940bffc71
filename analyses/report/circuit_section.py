"""The report's "Circuit": each pretrained model's previous-token -> induction K-composition edge by path patching,
beside random edges of its shape and the random-weight control's same edge
(:mod:`analyses.pretrained.circuit_edge`), as a table, the edge beside its null and the circuit as a graph."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyses.circuit.figure import draw_circuit
from analyses.pretrained.circuit_edge import EFFECT
from analyses.pretrained.findings import CIRCUIT_FINDING
from analyses.report.document import Figure, Section, Table
from analyses.report.figures import NullStripRow, null_strips

if TYPE_CHECKING:
    from analyses.pretrained.measure import PretrainedRun

COLUMNS = ["model", "edge (heads chosen on other batches)", "induction score drop", "95% CI", "null q99", "p",
           "clean score", "loss change (not judged)", "loss change 95% CI", "clean loss", "sequences", "draws",
           "verdict"]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model"


def circuit_section(runs: Mapping[str, PretrainedRun], figures: Path) -> Section | None:
    """The section, or None when no model's edge was measured or explained."""
    rows: list[list[Any]] = []
    strips: list[NullStripRow] = []
    notes: list[str] = []
    graphs: list[Figure] = []
    for model, run in runs.items():
        for label, measured, findings in ((model, run.measured, run.findings),
                                          (f"{model} (random weights)", run.control, run.control_findings)):
            if measured is None:
                continue
            if measured.circuit is None:
                if measured.circuit_note:
                    notes.append(f"{label}: {measured.circuit_note}.")
                continue
            edge, finding = measured.circuit.edge, findings[CIRCUIT_FINDING]
            score, loss = edge.effects.index(EFFECT), edge.effects.index("loss_change")
            verdict = "**holds**" if finding.verdict == "holds" else finding.verdict
            rows.append([label, edge.name, finding.value, finding.ci, finding.null_value, finding.reported_p,
                         edge.clean_score, float(edge.value[loss]), (float(edge.low[loss]), float(edge.high[loss])),
                         edge.clean_loss, edge.provenance.n_sequences, int(edge.null.shape[0]), verdict])
            strips.append(NullStripRow(label, [float(v) for v in edge.null[:, score]], finding.value, finding.ci,
                                       finding.null_value, finding.verdict, label.endswith("(random weights)")))
            if measured is run.measured:
                path = draw_circuit([edge], {f"{edge.name} / {EFFECT}": finding}, run.info.n_heads,
                                    figures / f"circuit_{_slug(model)}.png", effect=EFFECT,
                                    title=f"{model}: previous-token -> induction K-edge")
                graphs.append(Figure(str(path.relative_to(figures.parent)),
                                     f"{model}: the edge as a graph (heads as nodes, the two layers involved), "
                                     f"coloured by its verdict on the receiver's induction score drop "
                                     f"({finding.verdict})."))
    if not rows and not notes:
        return None
    section = Section("Circuit", [
        "Is the top previous-token head connected to the top induction head? The sender (the best previous-token "
        "head on the even text batches in a layer below the receiver) has its output replaced by its mean in the "
        "receiver's keys only (the best induction head on the even protocol batches), everything else clean (path "
        "patching), on fresh [BOS] X X sequences; the statistic is the receiver's induction score drop: its "
        "attention mass on the induction targets of the repeated half, clean minus patched (95% bootstrap interval "
        "over sequences; the clean score beside it). The null is the same drop for random edges at the same layer "
        "distance through the receiver's keys, sharing no head with the edge (grey dots, drawn ten at a time and "
        "stopped once the decision at 0.01 is known; their 99th percentile the black bar); the control is the "
        "random-weight model's same edge on the same sequences. The edge is a family of its own; it holds when "
        "p < 0.01, its interval lies above the null's 99th percentile and the control, and it clears them by 0.1 of "
        "attention mass. The edge's loss change on the repeated half (nats per token) is shown beside it, not "
        "judged: the random edges are measured on the receiver's score alone, which spares each of them the pass "
        "to the loss. `mechprobe circuit` measures more edges, inputs and heads and judges both effects.",
        *notes,
    ], [Table(COLUMNS, rows)], figures_first=True)
    if strips:
        path = null_strips({CIRCUIT_FINDING.replace("_", " "): strips}, figures / "circuit_nulls.png",
                           xlabel="induction score drop (attention mass)")
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "The K-composition edge's induction score drop (diamond, 95% interval) beside "
                                      "random edges of its shape (grey dots, 99th percentile as a black bar); the "
                                      "random-weight control's same edge in grey."))
    section.figures.extend(graphs)
    return section
