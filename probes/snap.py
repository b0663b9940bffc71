"""Snap detection: the training step after which an attention composition stops changing.

Given a trajectory of compositions ``c_t`` (one non-negative vector per recorded step, each
normalised to sum 1), the distance of step ``t`` to the end is the total-variation distance
``d_t = 0.5 * sum_i |c_t[i] - c_T[i]|`` to the final composition. The snap is the first recorded
step ``s`` with ``d_t <= tolerance`` for every ``t >= s``: from there on the composition stays
within ``tolerance`` of where it ends (so any two later compositions differ by at most
``2 * tolerance``). ``snapped`` says whether it then stayed frozen for at least ``patience``
recorded steps; a trajectory still moving at its end reports ``snapped=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from probes.errors import ConfigError, InputError


@dataclass(frozen=True)
class SnapPoint:
    """Where a trajectory froze: ``step`` (the recorded step number), its ``index`` in the trajectory,
    whether it stayed frozen for ``patience`` steps, and ``distance_to_final`` per recorded step."""

    step: int
    index: int
    snapped: bool
    tolerance: float
    patience: int
    distance_to_final: tuple[float, ...]

    def to_dict(self) -> dict:
        return {"step": self.step, "index": self.index, "snapped": self.snapped, "tolerance": self.tolerance,
                "patience": self.patience, "distance_to_final": list(self.distance_to_final)}


def detect_snap(
    trajectory: Float[Tensor, "step component"],
    steps: Sequence[int] | None = None,
    *,
    tolerance: float = 0.01,
    patience: int = 10,
) -> SnapPoint:
    """The snap point of ``trajectory`` (definition in the module docstring).

    ``steps`` names the recorded steps (default ``0, 1, ...``). Rows are normalised to sum 1.

    Example::

        snap = detect_snap(torch.stack(compositions), steps=history.steps, tolerance=0.01)
        snap.step
    """
    trajectory = torch.as_tensor(trajectory)
    if trajectory.ndim != 2 or trajectory.shape[0] < 1 or trajectory.shape[1] < 1:
        raise InputError(
            f"trajectory must be [step, component] with at least one step and one component; got shape "
            f"{tuple(trajectory.shape)}."
        )
    if not bool(torch.isfinite(trajectory).all()) or bool((trajectory < 0).any()):
        raise InputError("trajectory must hold finite, non-negative weights (attention compositions).")
    totals = trajectory.double().sum(-1, keepdim=True)
    if bool((totals <= 0).any()):
        raise InputError("Every row of the trajectory needs a positive sum to be normalised into a composition.")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ConfigError(f"tolerance must be a number in [0, 1) (a total-variation distance); got {tolerance!r}.")
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
        raise ConfigError(f"patience must be an integer >= 0; got {patience!r}.")
    n_steps = trajectory.shape[0]
    step_numbers = list(range(n_steps)) if steps is None else [int(s) for s in steps]
    if len(step_numbers) != n_steps:
        raise InputError(f"steps names {len(step_numbers)} steps but the trajectory has {n_steps}.")
    composition = trajectory.double() / totals
    distance = 0.5 * (composition - composition[-1]).abs().sum(-1)
    # the last index (scanning backwards) where the distance exceeds the tolerance; the snap follows it
    above = (distance > tolerance).nonzero()
    index = int(above[-1]) + 1 if len(above) else 0
    return SnapPoint(
        step=step_numbers[index], index=index, snapped=(n_steps - 1 - index) >= patience,
        tolerance=float(tolerance), patience=patience, distance_to_final=tuple(distance.tolist()),
    )
