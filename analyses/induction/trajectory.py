"""The training trajectory of the Chen et al. toy (``summary.json["trajectory"]``) and its figure.

Recorded at every step up to ``dense_until`` (default 100) and at log-spaced steps after it
(``per_decade`` per factor of 10, always including the last step); step 0 is the initialisation.
At each recorded step: the selector share of the true parent subset ``c_S^2 / sum_S' c_S'^2``
over the head subsets, the layer-2 scale ``a``, and the training / validation losses (the
training objective, and our negative log-likelihood beside it when the objective differs).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from analyses.plot_backend import use_file_backend

TRAJECTORY_KEYS = ("true_parent_share", "a", "train_loss", "val_loss", "train_nll", "val_nll")


def trajectory_steps(n_steps: int, *, dense_until: int = 100, per_decade: int = 20) -> list[int]:
    """Steps ``0 .. min(n_steps, dense_until)``, then about ``per_decade`` log-spaced steps per
    factor of 10 up to ``n_steps`` (always included). Sorted, without repeats.

    Example: ``trajectory_steps(1000)[99:103] == [99, 100, 112, 126]``.
    """
    if n_steps < 0 or dense_until < 1 or per_decade < 1:
        raise ValueError(f"need n_steps >= 0, dense_until >= 1, per_decade >= 1; got {n_steps}, {dense_until}, "
                         f"{per_decade}.")
    steps = set(range(0, min(n_steps, dense_until) + 1))
    if n_steps > dense_until:
        k = 1
        while True:
            step = round(dense_until * 10 ** (k / per_decade))
            if step >= n_steps:
                break
            steps.add(step)
            k += 1
        steps.add(n_steps)
    return sorted(steps)


def log_growth_fit(steps: list[int], values: list[float], *, from_step: int = 10) -> dict[str, float] | None:
    """Least-squares fit ``value = intercept + slope * ln(step)`` over recorded steps ``>= from_step``
    with its R^2 (the paper: ``a`` grows roughly logarithmically once the parents are selected)."""
    points = [(math.log(s), v) for s, v in zip(steps, values) if s >= max(from_step, 1) and v is not None]
    if len(points) < 3:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    syy = sum((y - mean_y) ** 2 for _, y in points)
    if sxx == 0:
        return None
    slope = sxy / sxx
    r2 = 1.0 if syy == 0 else (sxy * sxy) / (sxx * syy)
    return {"slope_per_ln_step": slope, "intercept": mean_y - slope * mean_x, "r2": r2, "from_step": from_step}


def plot_trajectory(trajectory: dict[str, Any], path: Path, *, true_label: str, objective: str) -> None:
    """Three panels over training steps (log axis; step 0 drawn at 0.5): the true-parent share,
    ``a``, and the losses (objective and NLL, training and validation)."""
    use_file_backend()
    import matplotlib.pyplot as plt

    steps = [max(s, 0.5) for s in trajectory["step"]]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].plot(steps, trajectory["true_parent_share"], marker=".", ms=3)
    axes[0].axhline(0.5, color="gray", ls=":", lw=1)
    axes[0].set_ylim(-0.02, 1.02)
    axes[0].set_ylabel(f"share of heads {true_label}")
    axes[0].set_title("true-parent share c_S^2 / sum c^2")
    axes[1].plot(steps, trajectory["a"], marker=".", ms=3)
    axes[1].set_ylabel("a")
    axes[1].set_title("layer-2 scale a")
    axes[2].plot(steps, trajectory["train_loss"], label=f"train ({objective})")
    axes[2].plot(steps, trajectory["val_loss"], label=f"validation ({objective})")
    if objective != "nll":
        axes[2].plot(steps, trajectory["train_nll"], ls="--", label="train (NLL)")
        axes[2].plot(steps, trajectory["val_nll"], ls="--", label="validation (NLL)")
    axes[2].set_ylabel("loss (nats)")
    axes[2].set_title("last-token loss")
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("step (0 drawn at 0.5)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
