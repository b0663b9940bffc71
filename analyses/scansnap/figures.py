"""Scan and Snap's figures: the attention heatmap over training (Figure 4), the loss curve, Figure 6's sweep and
the WikiText snapshots.

Each function writes one PNG with matplotlib's Agg backend (imported on first use: it costs about
as long as a short run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from analyses.plot_backend import use_file_backend
from analyses.scansnap.main_run import LOSS_TARGET, MainRun
from analyses.scansnap.result import WikitextTrace
from toymodels.training import History


def _pyplot() -> Any:
    use_file_backend()
    import matplotlib.pyplot as plt

    return plt


def plot_heatmap(main: MainRun, path: Path) -> None:
    """Figure 4: the composition over fact 0's support (common | distinct tokens) at every step."""
    plt = _pyplot()
    image = torch.stack(main.trajectory[0]).numpy()
    n_common = len(main.data.common_tokens)
    fig, ax = plt.subplots(figsize=(5, 5))
    shown = ax.imshow(image, aspect="auto", interpolation="nearest", cmap="viridis")
    if n_common:
        ax.axvline(n_common - 0.5, color="w", linestyle="--", linewidth=1)
    snap = main.snaps[0]
    ax.axhline(snap.index, color="r", linestyle=":", linewidth=1, label=f"snap (step {snap.step})")
    peaks = [main.steps.index(step) for step in main.scan_orders[0].peak_steps]
    ax.scatter([n_common + i for i in range(len(peaks))], peaks, s=12, color="w", edgecolors="k", linewidths=0.5,
               label="peak of each distinct token", zorder=3)
    ax.set_xlabel("context token (common | distinct, by increasing co-occurrence)")
    ax.set_ylabel("training step")
    ax.set_title("attention of the query of fact 0 over iterations")
    ax.legend(loc="lower right", fontsize=8)
    fig.colorbar(shown, ax=ax, label="attention mass")
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.1, top=0.93)  # fixed margins: tight_layout draws twice
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_loss(history: History, path: Path) -> None:
    """The Y/Z model's training loss per step (log scale), with the ``LOSS_TARGET`` line."""
    import matplotlib.ticker

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.semilogy(history.steps, history.values["loss"], label="Y/Z model (training batch)")
    # plain "0.01"-style labels: the default 10^k labels start matplotlib's mathtext parser (~0.3 s)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.axhline(LOSS_TARGET, color="k", linestyle="--", linewidth=0.5, label=f"loss = {LOSS_TARGET}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.legend()
    fig.subplots_adjust(left=0.16, right=0.97, bottom=0.14, top=0.96)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_sweep(sweep: Sequence[dict[str, Any]], path: Path) -> None:
    """Figure 6's layout: one panel per #last tokens, entropy vs eta_Y / eta_Z, one line per eta_Z (std over seeds)."""
    plt = _pyplot()
    panels = sorted({row["num_last"] for row in sweep})
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.1), squeeze=False, sharey=True)
    for ax, num_last in zip(axes[0], panels):
        for eta_z in sorted({row["eta_z"] for row in sweep}):
            rows = sorted((r for r in sweep if r["num_last"] == num_last and r["eta_z"] == eta_z),
                          key=lambda r: r["ratio"])
            ax.errorbar([r["ratio"] for r in rows], [r["entropy_mean"] for r in rows],
                        [r["entropy_std"] for r in rows], label=f"eta_Z = {eta_z:g}", capsize=2, marker="o",
                        markersize=3)
        ax.set_xscale("log")
        ratios = sorted({row["ratio"] for row in sweep})
        ax.set_xticks(ratios)
        ax.set_xticklabels([f"{r:g}" for r in ratios])
        ax.set_xlabel("eta_Y / eta_Z")
        ax.set_title(f"#last/next tokens = {num_last}/{rows[0]['num_next']}")
    axes[0][0].set_ylabel("entropy of distinct-token attention (nats)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_wikitext(trace: WikitextTrace, patterns: Sequence[torch.Tensor], path: Path) -> None:
    """Attention of one probe window at the first, middle and last snapshot (``patterns[i]``: snapshot ``i``'s
    [q_pos k_pos] pattern); entropy, co-occurrence ordering (with its shuffled-lift chance level) and the
    distinct/common attention ratio over training."""
    plt = _pyplot()
    chosen = sorted({0, len(patterns) // 2, len(patterns) - 1})
    fig, axes = plt.subplots(1, len(chosen) + 3, figsize=(3.1 * (len(chosen) + 3), 3.2))
    for ax, index in zip(axes, chosen):
        ax.imshow(patterns[index].numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"attention, step {trace.step[index]}", fontsize=9)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    entropy_ax, order_ax, ratio_ax = axes[-3:]
    entropy_ax.plot(trace.step, trace.entropy, marker="o", markersize=3)
    entropy_ax.set_xlabel("step")
    entropy_ax.set_ylabel("attention entropy (nats)")
    order_ax.plot(trace.step, trace.spearman_count, marker="o", markersize=3, label="vs count")
    order_ax.plot(trace.step, trace.spearman_lift, marker="o", markersize=3, label="vs lift")
    order_ax.plot(trace.step, trace.spearman_lift_matched, marker="o", markersize=3,
                  label="vs lift, distance-matched")
    null = trace.spearman_lift_matched_null.q95
    if not math.isnan(null):
        order_ax.axhline(null, color="tab:green", linestyle=":", linewidth=1, label="shuffled lift, 95%")
    order_ax.axhline(0, color="k", linewidth=0.5)
    order_ax.set_xlabel("step")
    order_ax.set_ylabel("Spearman over keys (mean over queries)")
    order_ax.legend(fontsize=6)
    ratio_ax.plot(trace.step, trace.distinct_over_common, marker="o", markersize=3)
    ratio_ax.axhline(1, color="k", linewidth=0.5)
    ratio_ax.set_xlabel("step")
    ratio_ax.set_ylabel("attention: top / bottom third by lift")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
