"""The order of two events on curves known exactly (a toy's weights or attention composition recorded during
training), and the Scan and Snap order: the composition scans, then snaps.

An :class:`ExactOrder` is ``later_step - earlier_step``. The curves have no sampling noise, so its only
uncertainty is the checkpoint grid: each event lies between the two recorded steps that straddle it, and
``interval`` is the difference of those brackets' far ends (as :func:`probes.dynamics.change_point.event_order`
widens its bootstrap interval). A missing event (a curve that never rises, a composition that never snaps)
leaves the difference NaN: the order is not observed.

Scan and Snap (Tian et al. 2023). With ``c_t`` the attention composition over a fact's support at recorded step
``t`` (rows normalised to sum 1), the *scan* curve is its total-variation distance from the start,
``D_t = 0.5 * sum_i |c_t[i] - c_0[i]|``, and the scan event is where ``D_t`` crosses half-way to its held peak
(:func:`probes.dynamics.change_point.curve_event`, the rule of every dynamics event). The *snap* is
:func:`probes.dynamics.snap.detect_snap_by_rate`'s step, from which the composition moves by less than ``rate``
of its displacement per step for ``patience`` recorded steps; a composition that has not snapped by the end of the
run has no snap event. "Scan before snap" is ``snap - scan > 0``: the composition makes most of its move before it
freezes. It can fail: a composition that drifts at a constant speed (never freezing) passes the rate test at about
``1 / rate`` steps (its displacement grows as fast as ``t``, so ``speed / D_t = 1 / t``), long before half of a
longer run's drift; one that pauses and then moves again snaps at the pause, before most of its move. (Half-way
rather than, say, 90% of the displacement: for a rise that slows like ``1 - exp(-k t)`` the snap comes where
``k exp(-k t) / (1 - exp(-k t)) = rate``, at 90% of the rise for ``k = 0.1`` per step and 80% for ``k = 0.05``, so
a 90% event before the snap would test the rise's speed against the snap threshold, not the order.)

Example::

    order = scan_snap_order(torch.stack(trajectory[0]), steps, rate=0.01, patience=10)
    order.scan.step, order.snap.step, order.order.difference
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from probes.core.errors import InputError
from probes.dynamics.change_point import CurveEvent, curve_event
from probes.dynamics.snap import RateSnap, detect_snap_by_rate


@dataclass(frozen=True)
class ExactOrder:
    """``later`` event minus ``earlier`` event (steps) on exactly known curves, each event with the two recorded
    steps that straddle it (NaN: no event; module docstring)."""

    earlier: str
    later: str
    earlier_step: float
    later_step: float
    earlier_bracket: tuple[float, float]
    later_bracket: tuple[float, float]

    @classmethod
    def of_events(cls, earlier: tuple[str, CurveEvent], later: tuple[str, CurveEvent]) -> ExactOrder:
        """The order of two :class:`CurveEvent` s, each given with its name.

        Example: ``ExactOrder.of_events(("w_v", value_event), ("w_kq", key_query_event)).difference``.
        """
        (first_name, first), (second_name, second) = earlier, later
        return cls(first_name, second_name, first.step, second.step, first.bracket, second.bracket)

    @property
    def observed(self) -> bool:
        """Both events happened."""
        return not (math.isnan(self.earlier_step) or math.isnan(self.later_step))

    @property
    def difference(self) -> float:
        """``later_step - earlier_step`` (NaN when an event is missing)."""
        return self.later_step - self.earlier_step

    @property
    def interval(self) -> tuple[float, float]:
        """The differences the checkpoint grid allows: later bracket minus earlier bracket, far ends paired."""
        return (self.later_bracket[0] - self.earlier_bracket[1], self.later_bracket[1] - self.earlier_bracket[0])


def composition_displacement(trajectory: Float[Tensor, "step component"]) -> Float[Tensor, " step"]:
    """The total-variation distance of each row's composition (normalised to sum 1) from the first row's.

    Example: ``composition_displacement(torch.tensor([[1.0, 1.0], [3.0, 1.0]]))`` is ``[0.0, 0.25]``.
    """
    trajectory = torch.as_tensor(trajectory, dtype=torch.float64)
    if trajectory.ndim != 2 or trajectory.shape[0] < 2:
        raise InputError(f"trajectory must be [step, component] with at least 2 steps; got shape "
                         f"{tuple(trajectory.shape)}.")
    totals = trajectory.sum(-1, keepdim=True)
    if bool((trajectory < 0).any()) or bool((totals <= 0).any()):
        raise InputError("trajectory must hold non-negative weights with a positive sum per step (attention "
                         "compositions).")
    composition = trajectory / totals
    return 0.5 * (composition - composition[0]).abs().sum(-1)


@dataclass(frozen=True)
class ScanSnapOrder:
    """One composition's scan curve (``displacement`` per recorded step), its scan event, its snap, and the
    order snap minus scan (module docstring)."""

    displacement: tuple[float, ...]
    scan: CurveEvent
    snap: RateSnap
    order: ExactOrder


def scan_snap_order(trajectory: Float[Tensor, "step component"], steps: Sequence[int], *, rate: float = 0.01,
                    patience: int = 10, fraction: float = 0.5) -> ScanSnapOrder:
    """Scan event, snap and their order for one composition trajectory recorded at ``steps`` (module docstring).

    Example: ``scan_snap_order(torch.stack(trajectory[f]), [0, *history.steps]).order.difference``.
    """
    displacement = composition_displacement(trajectory)
    scan = curve_event(displacement, steps, fraction)
    snap = detect_snap_by_rate(trajectory, steps, rate=rate, patience=patience)
    snap_step = float(snap.step) if snap.snapped else math.nan
    bracket = (float(steps[snap.index - 1]), float(steps[snap.index])) if snap.snapped else (math.nan, math.nan)
    order = ExactOrder("scan", "snap", scan.step, snap_step, scan.bracket, bracket)
    return ScanSnapOrder(tuple(displacement.tolist()), scan, snap, order)
