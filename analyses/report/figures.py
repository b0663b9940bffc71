"""Figures shared by the reports (matplotlib, Agg backend, PNG)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
from torch import Tensor

from analyses.plot_backend import save_figure, use_file_backend

use_file_backend()


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
    return save_figure(fig, path, dpi=90)


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
    return save_figure(fig, path, dpi=90)


@dataclass(frozen=True)
class ForestPoint:
    """One estimate in a forest plot: who (``label``), the value with its 95% interval, its own null value, its
    verdict, whether it is a toy or a pretrained model (``kind``) and whether it is a control (initialised toy /
    random weights)."""

    label: str
    value: float
    ci: tuple[float, float]
    null: float
    verdict: str
    kind: str
    control: bool


@dataclass(frozen=True)
class ForestRow:
    """One finding: its estimates and whether the statistic is a ratio (log scale)."""

    title: str
    points: Sequence[ForestPoint]
    effect: str


def verdict_marker(verdict: str, shape: str) -> tuple[str, bool]:
    """``(marker, filled)`` of a verdict: ``shape`` filled where it holds, open where inconclusive, an open square
    where absent (the interval below the threshold)."""
    if verdict == "holds":
        return shape, True
    return ("s", False) if verdict == "absent" else (shape, False)


def _colour(point: ForestPoint) -> str:
    if point.control:
        return "#9a9a9a"
    return "#1f5fbf" if point.kind == "toy" else "#c0392b"


def forest_plot(rows: Sequence[ForestRow], path: Path) -> Path:
    """One panel per finding (its own scale: log for ratios), one line per estimate with its 95% interval and its
    own null as a black bar (a toy's chance differs from a pretrained model's); filled circles hold, open circles
    are inconclusive, open squares absent."""
    heights = [0.35 * len(row.points) + 0.55 for row in rows]
    fig, axes = plt.subplots(len(rows), 1, figsize=(8.5, sum(heights) + 0.4), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, row in zip(axes[:, 0], rows):
        ys = np.arange(len(row.points))[::-1]
        for y, point in zip(ys, row.points):
            colour = _colour(point)
            low, high = point.ci
            if np.isfinite(low) and np.isfinite(high):
                ax.plot([low, high], [y, y], color=colour, lw=1.6)
            if np.isfinite(point.null):
                ax.plot([point.null, point.null], [y - 0.38, y + 0.38], color="black", lw=1.4)
            if np.isfinite(point.value):
                marker, filled = verdict_marker(point.verdict, "o")
                ax.plot([point.value], [y], marker=marker, ms=7, color=colour,
                        markerfacecolor=colour if filled else "white", markeredgewidth=1.6)
        values = [v for p in row.points for v in (p.value, *p.ci, p.null) if np.isfinite(v)]
        if row.effect == "ratio" and values and min(values) > 0:
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_yticks(ys, [p.label for p in row.points], fontsize=8)
        ax.set_ylim(-0.7, len(row.points) - 0.3)
        ax.set_title(row.title + (" (ratio, log scale)" if ax.get_xscale() == "log" else ""), fontsize=9, loc="left")
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, dpi=90)


@dataclass(frozen=True)
class NullStripRow:
    """One ablation of one model: the null's draws (random head sets), the observed value with its 95% interval,
    the null's 99th percentile, the verdict (``holds``, ``absent``, ``inconclusive``) and whether the model is a
    control."""

    label: str
    null: Sequence[float]
    value: float
    ci: tuple[float, float]
    q99: float
    verdict: str
    control: bool


def null_strips(panels: Mapping[str, Sequence[NullStripRow]], path: Path, *, xlabel: str) -> Path:
    """One panel per finding, one line per model: the null's draws as jittered grey dots, its 99th percentile as
    a black bar, the observed value (red; grey for a control) with its interval; filled diamonds hold, open ones
    are inconclusive, open squares absent."""
    heights = [0.5 * len(rows) + 0.6 for rows in panels.values()]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8.5, sum(heights) + 0.5), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    jitter = np.random.default_rng(0)
    for ax, (title, rows) in zip(axes[:, 0], panels.items()):
        ys = np.arange(len(rows))[::-1]
        for y, row in zip(ys, rows):
            null = np.asarray([v for v in row.null if np.isfinite(v)], dtype=float)
            ax.scatter(null, y + jitter.uniform(-0.22, 0.22, null.size), s=6, color="#b0b0b0", alpha=0.7, lw=0)
            if np.isfinite(row.q99):
                ax.plot([row.q99, row.q99], [y - 0.38, y + 0.38], color="black", lw=1.4)
            colour = "#9a9a9a" if row.control else "#c0392b"
            if all(np.isfinite(row.ci)):
                ax.plot(list(row.ci), [y, y], color=colour, lw=1.8)
            if np.isfinite(row.value):
                marker, filled = verdict_marker(row.verdict, "D")
                ax.plot([row.value], [y], marker=marker, ms=7, color=colour,
                        markerfacecolor=colour if filled else "white", markeredgewidth=1.6)
        ax.set_yticks(ys, [row.label for row in rows], fontsize=8)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_title(title, fontsize=9, loc="left")
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel(xlabel, fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=90)
