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

COLUMNS = ["model", "edge (heads chosen on other batches)", "loss change", "95% CI", "null q99", "p",
           "score drop", "score drop 95% CI", "score drop null q99", "clean loss", "sequences", "draws", "verdict"]


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
            loss, score = edge.effects.index(EFFECT), edge.effects.index("score_drop")
            verdict = "**holds**" if finding.verdict == "holds" else finding.verdict
            rows.append([label, edge.name, float(edge.value[loss]), (float(edge.low[loss]), float(edge.high[loss])),
                         float(edge.null_q99[loss]), finding.reported_p, float(edge.value[score]),
                         (float(edge.low[score]), float(edge.high[score])), float(edge.null_q99[score]),
                         edge.clean_loss, edge.provenance.n_sequences, int(edge.null.shape[0]), verdict])
            strips.append(NullStripRow(label, [float(v) for v in edge.null[:, loss]], finding.value, finding.ci,
                                       finding.null_value, finding.verdict, label.endswith("(random weights)")))
            if measured is run.measured:
                path = draw_circuit([edge], {f"{edge.name} / {EFFECT}": finding}, run.info.n_heads,
                                    figures / f"circuit_{_slug(model)}.png",
                                    title=f"{model}: previous-token -> induction K-edge")
                graphs.append(Figure(str(path.relative_to(figures.parent)),
                                     f"{model}: the edge as a graph (heads as nodes, the two layers involved), "
                                     f"coloured by its verdict on the loss change ({finding.verdict})."))
    if not rows and not notes:
        return None
    section = Section("Circuit", [
        "Is the top previous-token head connected to the top induction head? The sender (the best previous-token "
        "head on the even text batches in a layer below the receiver) has its output replaced by its mean in the "
        "receiver's keys only (the best induction head on the even protocol batches), everything else clean (path "
        "patching), on fresh [BOS] X X sequences; the statistic is the loss change on the repeated half (nats per "
        "token, 95% bootstrap interval over sequences), and the receiver's own induction score drop is shown beside "
        "it. The null is the same patch for random edges at the same layer distance through the receiver's keys "
        "(grey dots, drawn ten at a time and stopped once the decision at 0.01 is known; their 99th percentile the "
        "black bar); the control is the random-weight model's same edge on the same sequences. The edge is a family "
        "of its own; it holds when p < 0.01, its interval lies above the null's 99th percentile and the control, and "
        "it clears them by 0.1 nats per token. `mechprobe circuit` measures more edges, inputs and heads.",
        *notes,
    ], [Table(COLUMNS, rows)], figures_first=True)
    if strips:
        path = null_strips({CIRCUIT_FINDING.replace("_", " "): strips}, figures / "circuit_nulls.png",
                           xlabel="loss change (nats per token)")
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "The K-composition edge's loss change (diamond, 95% interval) beside random "
                                      "edges of its shape (grey dots, 99th percentile as a black bar); the "
                                      "random-weight control's same edge in grey."))
    section.figures.extend(graphs)
    return section
