"""The figures of ``mechprobe dynamics``: one series' curves with its events, and several series on one axis.

Example: ``plot_dynamics(summary, out / "dynamics.png")``; ``plot_series_together({"seed 0": a, "seed 1": b},
out / "dynamics_compare.png")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyses.curve_series import CurveSeries
    from analyses.dynamics.summary import DynamicsSummary

PANELS = {"head score (best head, held out)": ("previous_token", "induction", "duplicate_token", "copier",
                                              "classifier"),
          "in-context loss gain (nats/token)": ("repeat_loss_gain", "context_loss_gain"),
          "toy: loss below the baseline's (nats/token)": ("beats_uniform", "beats_unigram", "beats_bigram"),
          "natural text: topic ratio, ordering Spearman": ("topic_attention", "cooccurrence_ordering")}
SHARED_COLUMNS: dict[str, tuple[str, ...]] = {
    # one column per role; each series draws the first of its curves that it has
    "layer-1 copying: previous-token head (LM) / copier (toy)": ("previous_token", "copier"),
    "layer-2 matching: induction head (LM) / classifier (toy)": ("induction", "classifier"),
    "in-context loss gain (nats/token)": ("context_loss_gain", "repeat_loss_gain"),
    "topic toy: W_V moved from init (relative)": ("value_displacement",),
    "topic toy: W_K/W_Q moved from init (relative)": ("key_query_displacement",),
    "Scan and Snap: composition moved (TV); scan, snap": ("composition_displacement",),
}
SHARED_CURVES = tuple(c for curves in SHARED_COLUMNS.values() for c in curves)


def plot_dynamics(summary: DynamicsSummary, path: Path) -> Path:
    """The curves against ``log(1 + step)``: head scores on one panel, loss gains on the other, each event's step
    (dashed: holds; dotted: does not) and interval (shaded) marked."""
    from analyses.plot_backend import save_figure, use_file_backend

    use_file_backend()
    import matplotlib.pyplot as plt

    x = [s + 1 for s in summary.steps]
    panels = {label: curves for label, curves in PANELS.items() if any(c in summary.curves for c in curves)}
    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for axis, (label, curves) in zip(axes[0], panels.items()):
        for index, curve in enumerate(c for c in curves if c in summary.curves):
            colour = f"C{index}"
            axis.plot(x, summary.curves[curve], marker="o", color=colour, label=curve)
            event = summary.events.events.get(curve)
            if event is not None and event.change.step == event.change.step:
                axis.axvline(event.change.step + 1, color=colour, linestyle="--" if event.holds else ":")
                low, high = event.change.step_ci
                if low == low:
                    axis.axvspan(low + 1, high + 1, color=colour, alpha=0.12)
        axis.set_xscale("log")
        axis.set_xlabel("1 + training step")
        axis.set_ylabel(label)
        axis.legend(fontsize=8)
    figure.suptitle(f"{summary.series}: events dashed when they hold, intervals shaded")
    figure.tight_layout()
    return save_figure(figure, path, dpi=110)




def plot_series_together(summaries: Mapping[str, DynamicsSummary | CurveSeries], path: Path) -> Path:
    """Several series (real-text models and toys) on shared axes, one column per role that some series has
    (:data:`SHARED_COLUMNS`: layer-1 copying, layer-2 matching, in-context loss gain, the topic toy's W_V and
    W_K/W_Q displacements, the Scan and Snap toy's composition; each series draws the first of the column's curves
    it has, so a toy's copier sits beside a language model's previous-token head). Measured series are
    :class:`DynamicsSummary` s, the toys' recorded curves :class:`~analyses.curve_series.CurveSeries`.
    Top row: against the fraction of training (step / last step); bottom row: against tokens seen (log; steps
    where a series does not know its tokens). Each event is marked where it crosses its level: a filled dot when
    it holds, an open one when not."""
    from analyses.plot_backend import save_figure, use_file_backend

    use_file_backend()
    import matplotlib.pyplot as plt

    columns = [(title, curves) for title, curves in SHARED_COLUMNS.items()
               if any(c in summary.curves for summary in summaries.values() for c in curves)
               ] or list(SHARED_COLUMNS.items())
    figure, axes = plt.subplots(2, len(columns), figsize=(4.6 * len(columns), 7.5), squeeze=False)
    for colour, (name, summary) in enumerate(summaries.items()):
        last = max(summary.steps[-1], 1)
        known = all(t is not None for t in summary.tokens)
        scale = [float(t) if known and t is not None else float(s) for s, t in zip(summary.steps, summary.tokens)]
        per_step = scale[-1] / last if last else 1.0
        for column, (_, curves) in enumerate(columns):
            curve = next((c for c in curves if c in summary.curves), None)
            if curve is None:
                continue
            values = summary.curves[curve]
            label = f"{name}: {curve}"
            axes[0][column].plot([s / last for s in summary.steps], values, color=f"C{colour}", marker=".",
                                 label=label)
            axes[1][column].plot([x + 1 for x in scale], values, color=f"C{colour}", marker=".", label=label)
            for step, level, holds in summary.marks(curve):
                face = f"C{colour}" if holds else "white"
                axes[0][column].plot([step / last], [level], "o", color=f"C{colour}", markerfacecolor=face, ms=8)
                axes[1][column].plot([step * per_step + 1], [level], "o", color=f"C{colour}", markerfacecolor=face,
                                     ms=8)
    for column, (title, _) in enumerate(columns):
        axes[0][column].set_title(title, fontsize=9)
        axes[0][column].set_xlabel("fraction of training (step / last step)")
        axes[1][column].set_xscale("log")
        axes[1][column].set_xlabel("1 + tokens seen (steps where unknown)")
        for row in (0, 1):
            if axes[row][column].lines:
                axes[row][column].legend(fontsize=7)
    figure.suptitle("checkpoint series on one axis; events: filled dot when it holds, open when not")
    figure.tight_layout()
    return save_figure(figure, path, dpi=110)
