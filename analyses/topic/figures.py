"""The figures of ``mechprobe toy topic``: embedding Gram matrix, W_V, attention by topic, two-stage norm dynamics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analyses.plot_backend import use_file_backend
from probes.dynamics.two_stage import TwoStage
from toymodels.training import History


@dataclass(frozen=True)
class TopicFigureData:
    """The matrices the figures show (words sorted by topic): ``E E^T`` of the joint run, W_V and W_dec W_V of
    the uniform-attention runs (columns centred when ``value_centred``), and the query-topic x key-topic mean
    attention of the joint and fixed-value runs."""

    embedding_gram: np.ndarray
    value: np.ndarray
    decoder_value: np.ndarray
    value_centred: bool
    attention_joint: np.ndarray
    attention_fixed_value: np.ndarray


def plot_topic_figures(data: TopicFigureData, history: History, stages: TwoStage, out_dir: Path) -> list[str]:
    """Write ``embedding_gram.png``, ``value_matrix.png``, ``attention_by_topic.png`` and ``norm_dynamics.png``
    (from the two-stage run's ``history`` and its ``stages``) into ``out_dir``; return their file names."""
    use_file_backend()
    import matplotlib.pyplot as plt

    written = []

    def heatmaps(name: str, panels: list[tuple[str, Any]], xlabel: str, ylabel: str) -> None:
        fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), squeeze=False)
        for ax, (title, matrix) in zip(axes[0], panels):
            image = ax.imshow(matrix, cmap="RdBu_r" if (matrix < 0).any() else "viridis",
                              vmin=-abs(matrix).max() if (matrix < 0).any() else None,
                              vmax=abs(matrix).max() if (matrix < 0).any() else None)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            fig.colorbar(image, ax=ax, fraction=0.046)
        fig.tight_layout()
        fig.savefig(out_dir / f"{name}.png", dpi=110)
        plt.close(fig)
        written.append(f"{name}.png")

    heatmaps("embedding_gram", [("E E^T (joint training; words sorted by topic)", data.embedding_gram)],
             "word", "word")
    centred = ", columns centred" if data.value_centred else ""
    heatmaps("value_matrix", [(f"W_V (uniform attention, identity decoder{centred})", data.value),
                              (f"W_dec W_V (uniform attention, trained decoder{centred})", data.decoder_value)],
             "input word", "output word")
    heatmaps("attention_by_topic", [("joint training", data.attention_joint),
                                    ("W_V frozen, W_K W_Q trained", data.attention_fixed_value)],
             "key topic", "query topic")

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for column, label in (("w_v_norm", "||W_V||"), ("w_k_norm", "||W_K||"), ("w_q_norm", "||W_Q||")):
        points = [(s, v) for s, v in zip(history.steps, history.column(column)) if v == v]
        top.plot([s for s, _ in points], [v for _, v in points], label=label)
    for step, style, label in ((stages.first_plateaus_at, ":", "W_V plateaus"),
                               (stages.second_moves_at, "--", "W_K/W_Q move")):
        if step is not None:
            top.axvline(step, color="grey", linestyle=style, label=label)
            bottom.axvline(step, color="grey", linestyle=style)
    top.set_ylabel("Frobenius norm")
    top.legend(fontsize=8)
    top.set_title("Two-stage dynamics (one-hot embeddings, all trained, SGD)", fontsize=10)
    points = [(s, v) for s, v in zip(history.steps, history.column("attention_ratio")) if v == v]
    bottom.plot(history.steps, history.column("loss"), color="black", alpha=0.5, label="loss")
    twin = bottom.twinx()
    twin.plot([s for s, _ in points], [v for _, v in points], color="tab:red", label="attention ratio")
    twin.set_ylabel("same/different-topic attention", color="tab:red")
    bottom.set_ylabel("loss")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(out_dir / "norm_dynamics.png", dpi=110)
    plt.close(fig)
    written.append("norm_dynamics.png")
    return written
