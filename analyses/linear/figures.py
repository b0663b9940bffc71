"""The linear-probe figure: the gain over each label's baseline per layer, one panel per model, its random-weight
control dashed."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from analyses.plot_backend import save_figure, use_file_backend
from probes.linear.probe import LinearProbeScores

use_file_backend()


def layer_number(hook: str) -> int:
    """0 for the embeddings, ``l + 1`` for a hook of ``blocks.{l}`` (the stream after layer ``l + 1``)."""
    match = re.match(r"blocks\.(\d+)\.", hook)
    return int(match.group(1)) + 1 if match else 0


def gain_curves(runs: Mapping[str, LinearProbeScores], path: Path, *, control_suffix: str,
                       key_label: Callable[[str], str]) -> Path:
    """One panel per model (toys first, then pretrained): the gain [layer] of each label key with its 95%
    band, the model solid and its control (``label + control_suffix``) dashed in the same colour."""
    models = [label for label in runs if not label.endswith(control_suffix)]
    fig, axes = plt.subplots(1, len(models), figsize=(3.8 * len(models), 3.4), squeeze=False, sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, label in zip(axes[0], models):
        for style, name in (("-", label), ("--", label + control_suffix)):
            scores = runs.get(name)
            if scores is None:
                continue
            for i, key in enumerate(scores.keys):
                x = np.array([layer_number(hook) for hook in scores.hooks])
                y = scores.gain[key].numpy()
                colour = colours[i % len(colours)]
                ax.plot(x, y, style, color=colour, marker="o", markersize=3,
                        label=key_label(key) if style == "-" else None)
                if style == "-":
                    band = scores.gain_ci[key].numpy()
                    ax.fill_between(x, band[:, 0], band[:, 1], color=colour, alpha=0.15)
        if label + control_suffix in runs:
            ax.plot([], [], "--", color="grey", label="random weights")
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("after layer (0 = embeddings)")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("gain (accuracy - baseline)")
    fig.tight_layout()
    return save_figure(fig, path, dpi=90)
