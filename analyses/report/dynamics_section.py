"""The report's "Dynamics" section (``mechprobe report --series SPEC``): each checkpoint series measured by the
code of ``mechprobe dynamics`` (:func:`analyses.dynamics.run.run_dynamics`, into ``OUT/dynamics/NN``), drawn on
one axis (:func:`analyses.dynamics.figures.plot_series_together`) with each series' own figure, and a table of
its events and orders as findings.

Example: ``dynamics_section({"runs/lm": summary}, out / "figures")``.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from analyses.curve_series import CurveSeries
from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.figures import plot_series_together
from analyses.dynamics.run import FIGURE, run_dynamics
from analyses.dynamics.summary import DynamicsSummary, load_summary
from analyses.report.document import Figure, Section, Table

DYNAMICS_FOLDER = "dynamics"
COLUMNS = ["series", "finding", "kind", "step (order: difference)", "95% interval", "first -> peak (step)",
           "p (Holm)", "verdict"]


def series_folder(out: Path, index: int) -> Path:
    """Where the report keeps the ``index``-th series' dynamics run (``OUT/dynamics/NN``)."""
    return out / DYNAMICS_FOLDER / f"{index:02d}"


def run_series(specs: Sequence[str], out: Path, config: DynamicsConfig, *, device: str, dtype: torch.dtype,
               progress: bool) -> dict[str, DynamicsSummary]:
    """``mechprobe dynamics`` on each series spec into :func:`series_folder`; the summaries by spec."""
    return {spec: run_dynamics(spec, series_folder(out, i), config, device=device, dtype=dtype, progress=progress)
            for i, spec in enumerate(specs)}


def load_series(specs: Sequence[str], out: Path) -> dict[str, DynamicsSummary]:
    """The summaries a finished report's series runs wrote (for ``mechprobe render``)."""
    return {spec: load_summary(series_folder(out, i)) for i, spec in enumerate(specs)}


def _whole(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def _interval(ci: tuple[float, float]) -> str:
    return "-" if any(math.isnan(v) for v in ci) else f"[{ci[0]:.0f}, {ci[1]:.0f}]"


def dynamics_section(summaries: Mapping[str, DynamicsSummary], figures: Path, out: Path, *,
                     toys: Mapping[str, CurveSeries] | None = None) -> Section:
    """The section: the shared-axis figure (the series and the ``toys``' recorded curves), each series' own
    figure, and one row per event and order."""
    rows: list[list[object]] = []
    for spec, summary in summaries.items():
        for curve, event in summary.events.events.items():
            change = event.change
            rows.append([spec, curve, "event", _whole(change.step), _interval(change.step_ci),
                         f"{change.start:.3f} -> {change.end:.3f} ({_whole(change.peak_step)})",
                         event.finding.reported_p, event.finding.verdict])
        for name, finding in summary.events.orders.items():
            rows.append([spec, name, "order", _whole(finding.value), _interval(finding.ci), "-", finding.reported_p,
                         finding.verdict])
    section = Section("Dynamics: how the mechanisms form over training", [
        "Each checkpoint series measured with `mechprobe dynamics` (held-out best heads on [BOS] X X, in-context "
        "loss; for the induction toy's series the layer-1 copier and the layer-2 classifier on held-out chains). "
        "An event is the step from which a curve stays above half-way from its first checkpoint (the control) to "
        "its peak (its largest value that the curve holds at the next checkpoint, or the last checkpoint) until "
        "the peak, with a "
        "bootstrap interval over batches widened to the checkpoints around it; it holds when the peak checkpoint "
        "beats the curve's null and the first checkpoint by its minimum effect, at a bootstrap max-T p-value that "
        "allows for the search over checkpoints. An order "
        "(previous_token_before_induction, copier_before_classifier) is the later event's step minus the earlier's, "
        "tested only when both events hold. Each series' findings are one Holm family. The shared-axis figure "
        "also draws the toys' recorded curves: the topic toy's W_V and W_K/W_Q displacement from initialisation "
        "and the Scan and Snap toy's attention composition, whose orders (value_before_key_query, "
        "scan_before_snap) are judged over seeds with the toys' findings. Series measured by `mechprobe "
        "dynamics --corpus` carry the report's text probes too (topic_attention, cooccurrence_ordering)."],
        [Table(COLUMNS, rows)])
    together = plot_series_together({**summaries, **(toys or {})}, figures / "dynamics_together.png")
    section.figures.append(Figure(str(together.relative_to(figures.parent)),
                                  "every series and the toys' orders on one axis: fraction of training (top), "
                                  "tokens seen (bottom; steps for the toys)"))
    for index, spec in enumerate(summaries):
        own = series_folder(out, index) / FIGURE
        if own.is_file():
            target = figures / f"dynamics_{index:02d}.png"
            if own.resolve() != target.resolve():
                shutil.copyfile(own, target)
            section.figures.append(Figure(str(target.relative_to(figures.parent)), f"{spec}: curves and events"))
    return section
