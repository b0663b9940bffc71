"""Figures shared by the reports (matplotlib, Agg backend, PNG)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from torch import Tensor  # noqa: E402


def layer_head_heatmaps(tables: Mapping[str, Tensor], path: Path, *, title: str, colorbar: str,
                        cmap: str = "viridis", center: float | None = None) -> Path:
    """One [layer x head] heatmap per entry of ``tables``, side by side, on one colour scale (so a model and its
    control compare at a glance); ``center`` makes the scale diverging."""
    fig, axes = plt.subplots(1, len(tables), figsize=(4.2 * len(tables), 4.2), squeeze=False)
    every = np.concatenate([t.detach().cpu().float().numpy().ravel() for t in tables.values()])
    every = every[np.isfinite(every)] if np.isfinite(every).any() else np.zeros(1)
    low, high = float(np.nanmin(every)), float(np.nanmax(every))
    for ax, (name, table) in zip(axes[0], tables.items()):
        values = table.detach().cpu().float().numpy()
        if center is not None:
            spread = float(np.nanmax(np.abs(every - center))) or 1.0
            image = ax.imshow(values, aspect="auto", cmap=cmap, vmin=center - spread, vmax=center + spread)
        else:
            image = ax.imshow(values, aspect="auto", cmap=cmap, vmin=low, vmax=high)
        ax.set_title(name)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(image, ax=ax, label=colorbar)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def paired_bars(groups: Mapping[str, Mapping[str, float]], path: Path, *, title: str, ylabel: str,
                errors: Mapping[str, Mapping[str, tuple[float, float]]] | None = None) -> Path:
    """Grouped bars: ``groups[group][bar] = value``, optional ``errors[group][bar] = (low, high)``."""
    names = list(groups)
    bars = list(dict.fromkeys(b for g in groups.values() for b in g))
    width = 0.8 / max(1, len(bars))
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(names), 3.6))
    for i, bar in enumerate(bars):
        xs = np.arange(len(names)) + (i - (len(bars) - 1) / 2) * width
        values = [groups[n].get(bar, np.nan) for n in names]
        yerr = None
        if errors is not None:
            low = [values[j] - errors.get(n, {}).get(bar, (values[j], values[j]))[0] for j, n in enumerate(names)]
            high = [errors.get(n, {}).get(bar, (values[j], values[j]))[1] - values[j] for j, n in enumerate(names)]
            yerr = np.array([low, high])
        ax.bar(xs, values, width, label=bar, yerr=yerr, capsize=3)
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
