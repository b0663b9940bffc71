"""Figures of ``mechprobe toy induction`` (matplotlib, Agg): parent shares, copier heatmaps, the
layer-2 attention of one sequence, and the loss against the optimal estimator; :func:`write_figures`
draws them all for a finished run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from analyses.plot_backend import use_file_backend
from mechprobe.forward import model_device
from probes.attention.generalized_induction import parent_match_mask
from probes.core.batch import as_token_batch
from probes.core.model_info import ModelInfo
from probes.core.model_kind import as_hooked_model
from probes.core.runner import capture
from toymodels.training import History


def _plt():
    use_file_backend()
    import matplotlib.pyplot as plt

    return plt


def plot_parent_share(history: History, path: Path, true_label: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    shares = [k for k in history.values if k.startswith("share ")]
    if shares:
        for key in shares:
            label = key.removeprefix("share ")
            points = [(s, v) for s, v in zip(history.steps, history.column(key)) if not math.isnan(v)]
            ax.plot(*zip(*points), label=label, lw=2.5 if label == true_label else 1.2)
        ax.set_ylabel("selector weight share")
        ax.set_title(f"parent-subset share (true parents: heads {true_label})")
    else:
        steps = [s for s, v in zip(history.steps, history.column("induction_score")) if not math.isnan(v)]
        values = [v for v in history.column("induction_score") if not math.isnan(v)]
        ax.plot(steps, values, marker="o", label="best layer-2 generalized induction score")
        ax.set_ylabel("score")
        ax.set_title("generalized induction score during training")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_copier_heatmaps(pattern: torch.Tensor, mass: Sequence[Sequence[float]], path: Path, n_show: int = 24
                         ) -> None:
    """Layer-1 attention [head q k] of one sequence (first ``n_show`` positions) + mass by distance."""
    plt = _plt()
    n_heads = pattern.shape[0]
    fig, axes = plt.subplots(2, n_heads, figsize=(2.8 * n_heads, 5.4), squeeze=False)
    for h in range(n_heads):
        axes[0, h].imshow(pattern[h, :n_show, :n_show].numpy(), cmap="viridis", vmin=0, vmax=1)
        axes[0, h].set_title(f"layer 1 head {h}")
        axes[0, h].set_xlabel("key position")
        axes[0, h].set_ylabel("query position")
        axes[1, h].bar(range(len(mass[h])), mass[h])
        axes[1, h].set_xlabel("relative distance q - k")
        axes[1, h].set_ylim(0, 1)
    axes[1, 0].set_ylabel("attention mass")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_layer2_example(tokens: torch.Tensor, pattern: torch.Tensor, order: int, path: Path) -> None:
    """Layer-2 attention of the last query over keys; keys whose parents match are marked."""
    plt = _plt()
    match = parent_match_mask(tokens[None], torch.ones_like(tokens[None], dtype=torch.bool), range(1, order))[0, -1]
    fig, ax = plt.subplots(figsize=(8, 3))
    keys = torch.arange(tokens.shape[0])
    ax.bar(keys.numpy(), pattern[-1].numpy(), color=["tab:red" if m else "tab:gray" for m in match.tolist()])
    ax.set_xlabel("key position (red: parents match the query's)")
    ax.set_ylabel("attention")
    ax.set_title("layer-2 attention of the last position")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_loss(history: History, optimal_train: float, optimal_val: float, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(history.steps, history.column("loss"), lw=1, label="training loss")
    val = [(s, v) for s, v in zip(history.steps, history.column("val_loss")) if not math.isnan(v)]
    if val:
        ax.plot(*zip(*val), marker="o", label="validation loss (last token)")
    ax.axhline(optimal_train, color="k", ls="--", lw=1, label="optimal estimator (training objective)")
    ax.axhline(optimal_val, color="tab:red", ls=":", lw=1, label="optimal estimator (validation, last token)")
    ax.set_xlabel("step")
    ax.set_ylabel("NLL (nats)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_figures(model: torch.nn.Module, history: History, trajectory: dict[str, Any] | None, *,
                  example: torch.Tensor, true_label: str, copier_mass: Sequence[Sequence[float]], best_head: int,
                  order: int, objective: str, optimal_train: float, optimal_val: float, out_dir: Path) -> None:
    """Every figure of a run into ``out_dir``: parent shares, the trajectory (models with a selector), the
    copier heatmaps and the layer-2 attention of ``example`` [1, pos], and the loss against the optimum."""
    from analyses.induction.trajectory import plot_trajectory

    hooked = as_hooked_model(model)
    with torch.no_grad():
        acts = capture(hooked, as_token_batch(example, ModelInfo.of(hooked)).to(model_device(model)),
                       ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"])
    acts = {name: pattern.cpu() for name, pattern in acts.items()}
    plot_parent_share(history, out_dir / "parent_share.png", true_label)
    if trajectory:
        plot_trajectory(trajectory, out_dir / "trajectory.png", true_label=true_label, objective=objective)
    plot_copier_heatmaps(acts["blocks.0.attn.hook_pattern"][0].float(), copier_mass, out_dir / "copier_heatmaps.png")
    plot_layer2_example(example[0], acts["blocks.1.attn.hook_pattern"][0, best_head].float(), order,
                        out_dir / "layer2_attention_example.png")
    plot_loss(history, optimal_train, optimal_val, out_dir / "loss_vs_optimal.png")
