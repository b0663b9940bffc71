"""The figure of a linear probe's result: accuracy per hook with its 95% interval, beside its baseline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from torch import Tensor

from probes.core.errors import ConfigError

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class LinearCurves(Protocol):
    """What the figure reads of a linear probe's result (``probes.linear.LinearProbeScores`` has it): per label key,
    accuracy [hook] and its interval [hook, 2], the baseline's accuracy [hook], name and majority-class rate."""

    @property
    def hooks(self) -> Sequence[str]: ...
    @property
    def keys(self) -> Sequence[str]: ...
    @property
    def baseline(self) -> Mapping[str, str]: ...
    @property
    def statistic(self) -> Mapping[str, str]: ...
    @property
    def accuracy(self) -> Mapping[str, Tensor]: ...
    @property
    def accuracy_ci(self) -> Mapping[str, Tensor]: ...
    @property
    def baseline_accuracy(self) -> Mapping[str, Tensor]: ...
    @property
    def majority_baseline(self) -> Mapping[str, float]: ...


def linear_scores_figure(result: LinearCurves, key: str | None = None) -> Figure:
    """One panel per label key (only ``key`` when given): accuracy per hook (embeddings first) with its 95%
    interval, the baseline it is measured against (dashed) and the majority class (dotted). The figure is closed
    in pyplot, so a notebook shows it once."""
    import matplotlib.pyplot as plt  # imported on first plot: importing pyplot picks a backend and takes ~0.3 s

    keys = [k for k in result.keys if key is None or k == key]
    if not keys:
        raise ConfigError(f"No label key {key!r}; this result has {result.keys}.")
    fig, axes = plt.subplots(1, len(keys), figsize=(min(16.0, 1.0 + 4.5 * len(keys)), 3.4), squeeze=False)
    layers = list(range(len(result.hooks)))
    for ax, name in zip(axes[0], keys):
        accuracy, ci = result.accuracy[name].double().numpy(), result.accuracy_ci[name].double().numpy()
        ax.plot(layers, accuracy, marker="o", label="accuracy")
        ax.fill_between(layers, ci[:, 0], ci[:, 1], alpha=0.25)
        ax.plot(layers, result.baseline_accuracy[name].double().numpy(), linestyle="--",
                label=f"baseline ({result.baseline[name].replace('_', ' ')})")
        ax.axhline(result.majority_baseline[name], color="grey", linestyle=":", label="majority class")
        ax.set_xticks(layers)
        ax.set_xticklabels([hook.replace(".hook_resid_post", "").replace("blocks.", "L") for hook in result.hooks],
                           rotation=45, ha="right", fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.set_title(f"label {name}: {result.statistic[name]}", fontsize=9)
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=7)
    fig.tight_layout()
    plt.close(fig)
    return fig
