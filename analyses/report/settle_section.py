"""The report's "Settling" section (``mechprobe report --settle``): per pretrained model and finding, the first
pass's fixed-sample verdict beside the verdict of its confidence sequence, the units and rounds it took or what it
still needs, and the sequence narrowing over the units (:mod:`analyses.pretrained.settle`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt

from analyses.plot_backend import save_figure, use_file_backend
from analyses.pretrained.settled import SettledFinding
from analyses.report.document import Figure, Section, Table

if TYPE_CHECKING:
    from analyses.pretrained.measure import PretrainedRun

use_file_backend()

COLUMNS = ["model", "finding", "first pass (fixed sample)", "settled on the sequence", "units", "rounds", "tokens",
           "why it stopped"]


def _narrowing_plot(settled: Mapping[str, Mapping[str, SettledFinding]], path: Path) -> Path:
    """One panel per monitored (model, finding): the value and its sequence after each round, the threshold."""
    panels = [(model, f) for model, findings in settled.items() for f in findings.values() if f.looks]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2), squeeze=False)
    for ax, (model, finding) in zip(axes[0], panels):
        units = [look.units for look in finding.looks]
        ax.fill_between(units, [look.low for look in finding.looks], [look.high for look in finding.looks],
                        color="tab:red", alpha=0.25, step="post", label="95% sequence")
        ax.plot(units, [look.value for look in finding.looks], "o-", color="tab:red", label="value")
        ax.axhline(finding.threshold, color="black", lw=1, ls="--", label="threshold")
        ax.set_xscale("log")
        ax.set_xlabel(finding.unit)
        ax.set_title(f"{model}: {finding.name.replace('_', ' ')}\n{finding.verdict}", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=90)


def settle_section(runs: Mapping[str, PretrainedRun], figures: Path) -> Section | None:
    """The section, or None when no model was settled."""
    settled = {model: run.settled for model, run in runs.items() if run.settled}
    if not settled:
        return None
    rows = [[model, name, f.first_pass, f.cell(), f.units, f.rounds, f.tokens, f.stop]
            for model, findings in settled.items() for name, f in findings.items()]
    section = Section("Settling", [
        "With --settle each pretrained finding the first pass left inconclusive gets rounds of fresh text (or fresh "
        "[BOS] X X batches), each round sized from its power, measured by only the probes it needs, and is decided "
        "on its 95% confidence sequence alone: valid however many rounds are looked at. It holds when the "
        "sequence's lower end lies above its null, its control and its threshold (all fixed by the first pass), it "
        "is absent when the upper end lies below the threshold. The first pass chooses the heads and sizes the "
        "rounds, and its own units are not reused; a finding it decided keeps that fixed-sample verdict. The "
        "verdict table above keeps the first pass's verdicts and adds to each finding settled in rounds its "
        "verdict on the sequence and the units it took, or what it still needs."], [Table(COLUMNS, rows)])
    if any(f.looks for findings in settled.values() for f in findings.values()):
        path = _narrowing_plot(settled, figures / "settling.png")
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "Each monitored finding's value (dots) and 95% confidence sequence (band) "
                                      "after every round, against its threshold (dashed), on a log axis of units."))
    return section
