"""The figures of ``mechprobe dynamics``: one series' curves with its events, and several series on one axis.

Example: ``plot_dynamics(summary, out / "dynamics.png")``; ``plot_series_together({"seed 0": a, "seed 1": b},
out / "dynamics_compare.png")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyses.dynamics.summary import DynamicsSummary

PANELS = {"head score (best head, held out)": ("previous_token", "induction", "duplicate_token"),
          "in-context loss gain (nats/token)": ("repeat_loss_gain", "context_loss_gain")}
SHARED_CURVES = ("previous_token", "induction", "repeat_loss_gain")


def plot_dynamics(summary: DynamicsSummary, path: Path) -> Path:
    """The curves against ``log(1 + step)``: head scores on one panel, loss gains on the other, each event's step
    (dashed: holds; dotted: does not) and interval (shaded) marked."""
    from analyses.plot_backend import use_file_backend

    use_file_backend()
    import matplotlib.pyplot as plt

    x = [s + 1 for s in summary.steps]
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for axis, (label, curves) in zip(axes, PANELS.items()):
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
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path




def plot_series_together(summaries: Mapping[str, DynamicsSummary], path: Path) -> Path:
    """The previous-token, induction and in-context loss curves of several series on shared axes: the top row
    against the fraction of training (step / last step), the bottom row against tokens seen (log; steps where a
    series does not know its tokens). Each series' events that hold are marked with a dot."""
    from analyses.plot_backend import use_file_backend

    use_file_backend()
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, len(SHARED_CURVES), figsize=(4.2 * len(SHARED_CURVES), 7), squeeze=False)
    for colour, (name, summary) in enumerate(summaries.items()):
        last = max(summary.steps[-1], 1)
        known = all(t is not None for t in summary.tokens)
        scale = [float(t) if known and t is not None else float(s) for s, t in zip(summary.steps, summary.tokens)]
        for column, curve in enumerate(SHARED_CURVES):
            if curve not in summary.curves:
                continue
            values = summary.curves[curve]
            axes[0][column].plot([s / last for s in summary.steps], values, color=f"C{colour}", label=name)
            axes[1][column].plot([x + 1 for x in scale], values, color=f"C{colour}", label=name)
            event = summary.events.events.get(curve)
            if event is not None and event.holds:
                step = event.change.step
                at = step * (scale[-1] / last if last else 1.0)
                level = event.change.start + summary.settings.fraction * event.change.rise
                axes[0][column].plot([step / last], [level], "o", color=f"C{colour}")
                axes[1][column].plot([at + 1], [level], "o", color=f"C{colour}")
    for column, curve in enumerate(SHARED_CURVES):
        axes[0][column].set_title(curve)
        axes[0][column].set_xlabel("fraction of training (step / last step)")
        axes[1][column].set_xscale("log")
        axes[1][column].set_xlabel("1 + tokens seen (steps where unknown)")
        axes[0][column].legend(fontsize=7)
    figure.suptitle("checkpoint series on one axis; dots: events that hold")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
