"""Snap detection: the training step after which an attention composition stops changing.

Two detectors. :func:`detect_snap_by_rate` (the one the experiments report) uses only the steps up to
the snap plus a fixed window, so the step it finds does not depend on how long the run goes on. With
``c_t`` the compositions, ``v_t = TV(c_{t+1}, c_t) / (step_{t+1} - step_t)`` the per-step speed leaving
step ``t`` and ``D_t = TV(c_t, c_0)`` the total change so far, the snap is the first recorded step ``s``
(after the composition has moved at all) with ``v_t <= rate * D_t`` for every recorded ``t`` in
``[s, s + patience]``: from there on the composition moves by less than ``rate`` of its whole
displacement per step. In Scan and Snap the snap is where ``Z`` stops growing fast (its growth turns
logarithmic), so the relative speed collapses by orders of magnitude there.

:func:`detect_snap` compares every step with the *final* composition, so its answer moves when the run
is made longer (kept for comparison). Given a trajectory of compositions ``c_t`` (one non-negative
vector per recorded step, each normalised to sum 1), the distance of step ``t`` to the end is the
total-variation distance ``d_t = 0.5 * sum_i |c_t[i] - c_T[i]|`` to the final composition. The snap is the first
recorded step ``s`` with ``d_t <= tolerance`` for every ``t >= s``: from there on the composition stays
within ``tolerance`` of where it ends (so any two later compositions differ by at most
``2 * tolerance``). ``snapped`` says whether it then stayed frozen for at least ``patience``
recorded steps; a trajectory still moving at its end reports ``snapped=False``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from mechprobe.validation import integer
from probes.core.errors import ConfigError, InputError


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
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ConfigError(f"tolerance must be a number in [0, 1) (a total-variation distance); got {tolerance!r}.")
    integer("patience", patience, 0)
    composition, step_numbers = _check_trajectory(trajectory, steps)
    n_steps = composition.shape[0]
    distance = 0.5 * (composition - composition[-1]).abs().sum(-1)
    # the last index (scanning backwards) where the distance exceeds the tolerance; the snap follows it
    above = (distance > tolerance).nonzero()
    index = int(above[-1]) + 1 if len(above) else 0
    return SnapPoint(
        step=step_numbers[index], index=index, snapped=(n_steps - 1 - index) >= patience,
        tolerance=float(tolerance), patience=patience, distance_to_final=tuple(distance.tolist()),
    )


def _check_trajectory(trajectory: Tensor, steps: Sequence[int] | None) -> tuple[Tensor, list[int]]:
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
    n_steps = trajectory.shape[0]
    step_numbers = list(range(n_steps)) if steps is None else [int(s) for s in steps]
    if len(step_numbers) != n_steps:
        raise InputError(f"steps names {len(step_numbers)} steps but the trajectory has {n_steps}.")
    if any(b <= a for a, b in itertools.pairwise(step_numbers)):
        raise InputError("steps must be strictly increasing.")
    return trajectory.double() / totals, step_numbers


@dataclass(frozen=True)
class RateSnap:
    """The snap found by :func:`detect_snap_by_rate`.

    ``step``/``index``: the snap (the last recorded step when ``snapped`` is False: the run ended
    before the composition settled for ``patience`` steps). ``relative_speed[i]``: ``v_t / D_t`` of
    recorded step ``i`` (``nan`` at the first and last index and while ``D_t = 0``).
    """

    step: int
    index: int
    snapped: bool
    rate: float
    patience: int
    relative_speed: tuple[float, ...]


def detect_snap_by_rate(
    trajectory: Float[Tensor, "step component"],
    steps: Sequence[int] | None = None,
    *,
    rate: float = 0.01,
    patience: int = 10,
) -> RateSnap:
    """The first step where the composition's speed falls below ``rate`` times its total change so far
    and stays there for ``patience`` recorded steps (module docstring). Rows are normalised to sum 1.

    Only recorded steps up to ``snap + patience + 1`` decide the answer, so a longer run of the same
    training (same prefix) finds the same snap.

    Example::

        snap = detect_snap_by_rate(torch.stack(compositions), steps=[0, *history.steps], rate=0.01)
        snap.step
    """
    composition, step_numbers = _check_trajectory(trajectory, steps)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"rate must be a finite number > 0 (a fraction of the total change per step); got {rate!r}.")
    integer("patience", patience, 0)
    n_steps = composition.shape[0]
    relative = [math.nan] * n_steps
    slow = [False] * n_steps
    for i in range(1, n_steps - 1):
        total = 0.5 * float((composition[i] - composition[0]).abs().sum())
        speed = 0.5 * float((composition[i + 1] - composition[i]).abs().sum()) / (step_numbers[i + 1] - step_numbers[i])
        if total > 0:
            relative[i] = speed / total
            slow[i] = relative[i] <= rate
    for i in range(1, n_steps - 1 - patience):
        if all(slow[i:i + patience + 1]):
            return RateSnap(step=step_numbers[i], index=i, snapped=True, rate=float(rate), patience=patience,
                            relative_speed=tuple(relative))
    return RateSnap(step=step_numbers[-1], index=n_steps - 1, snapped=False, rate=float(rate), patience=patience,
                    relative_speed=tuple(relative))
