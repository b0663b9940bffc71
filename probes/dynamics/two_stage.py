"""Detect two-stage dynamics in a norm history: when each norm leaves its start and when it plateaus.

For one recorded series ``x`` at steps ``s`` (optionally smoothed by a moving average of
``smooth`` records), with ``change = max_t |x_t - x_0|``:

- ``moves_at``: the first step with ``|x_t - x_0| >= move_fraction * change`` (None when
  ``change`` is below ``min_change``: the norm never moved);
- ``plateaus_at``: the first step ``t >= moves_at`` after which ``x`` stays within
  ``plateau_fraction * change`` of ``x_t`` for the next ``window_fraction`` of the run (None if
  that never happens).

Two stages (Li, Li & Risteski 2023): the *first* group (W_V) moves, then plateaus, and only then
the *second* group (W_K, W_Q) moves. ``separated`` is
``first_moves_at < second_moves_at and first_plateaus_at <= second_moves_at``;
``second_progress_at_first_plateau`` is how far (as a fraction of its total change) the second
group had moved when the first plateaued (0 = still at its start, 1 = done).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import torch

from probes.core.errors import ConfigError, InputError

if TYPE_CHECKING:
    from typing_extensions import Unpack


@dataclass(frozen=True)
class NormEvents:
    """When one norm series leaves its start and when it plateaus (steps, or None)."""

    start: float
    final: float
    change: float
    moves_at: int | None
    plateaus_at: int | None


@dataclass(frozen=True)
class TwoStage:
    """Two-stage summary of a norm history (see the module docstring)."""

    first_moves_at: int | None
    first_plateaus_at: int | None
    second_moves_at: int | None
    second_progress_at_first_plateau: float
    separated: bool
    events: dict[str, NormEvents]


class _NormThresholds(TypedDict, total=False):
    """The settings of :func:`norm_events` that :func:`detect_two_stage` passes on."""

    move_fraction: float
    plateau_fraction: float
    window_fraction: float
    min_change: float
    smooth: int


def _smoothed(values: Sequence[float], smooth: int) -> torch.Tensor:
    x = torch.tensor(values, dtype=torch.float64)
    if smooth <= 1 or len(x) < smooth:
        return x
    kernel = torch.ones(smooth, dtype=torch.float64) / smooth
    padded = torch.cat([x[:1].repeat(smooth // 2), x, x[-1:].repeat(smooth - 1 - smooth // 2)])
    return torch.nn.functional.conv1d(padded[None, None], kernel[None, None])[0, 0]


def norm_events(steps: Sequence[int], values: Sequence[float], *, move_fraction: float = 0.05,
                plateau_fraction: float = 0.05, window_fraction: float = 0.1, min_change: float = 1e-8,
                smooth: int = 1) -> NormEvents:
    """Start, plateau and size of the change of one series (module docstring)."""
    for name, value in (("move_fraction", move_fraction), ("plateau_fraction", plateau_fraction),
                        ("window_fraction", window_fraction)):
        if not 0 < value < 1:
            raise ConfigError(f"{name} must be in (0, 1); got {value}.")
    pairs = [(int(s), float(v)) for s, v in zip(steps, values, strict=True) if not math.isnan(float(v))]
    if len(pairs) < 2:
        raise InputError(f"A norm series needs at least two recorded (non-NaN) values; got {len(pairs)}.")
    step = torch.tensor([s for s, _ in pairs])
    x = _smoothed([v for _, v in pairs], smooth)
    distance = (x - x[0]).abs()
    change = float(distance.max())
    if change < min_change:
        return NormEvents(float(x[0]), float(x[-1]), change, None, None)
    moved = int(torch.nonzero(distance >= move_fraction * change)[0])
    window = window_fraction * float(step[-1] - step[0])
    tolerance = plateau_fraction * change
    plateau = None
    for i in range(moved, len(x)):
        ahead = (step >= step[i]) & (step <= step[i] + window)
        if float(step[-1] - step[i]) < window:
            break
        if float((x[ahead] - x[i]).abs().max()) <= tolerance:
            plateau = int(step[i])
            break
    return NormEvents(float(x[0]), float(x[-1]), change, int(step[moved]), plateau)


def detect_two_stage(steps: Sequence[int], norms: Mapping[str, Sequence[float]], *,
                     first: Sequence[str] = ("w_v_norm",), second: Sequence[str] = ("w_k_norm", "w_q_norm"),
                     **thresholds: Unpack[_NormThresholds]) -> TwoStage:
    """Two-stage summary of the columns ``first`` and ``second`` of a norm history.

    ``norms`` maps names to values recorded at ``steps`` (NaN = not recorded at that step), e.g.
    ``detect_two_stage(history.steps, history.values)`` for a ``toymodels.training.History``.
    ``thresholds`` are passed to :func:`norm_events`.
    """
    missing = [name for name in (*first, *second) if name not in norms]
    if missing:
        raise InputError(f"The norm history has no columns {missing}; it has {sorted(norms)}.")
    events = {name: norm_events(steps, norms[name], **thresholds) for name in (*first, *second)}

    def earliest(names: Sequence[str], field: str) -> int | None:
        found = [getattr(events[n], field) for n in names if getattr(events[n], field) is not None]
        return min(found) if found else None

    first_moves, second_moves = earliest(first, "moves_at"), earliest(second, "moves_at")
    first_plateau = earliest(first, "plateaus_at")
    progress = math.nan
    if first_plateau is not None:
        fractions = []
        for name in second:
            if events[name].change > 0:
                at = max((i for i, s in enumerate(steps) if s <= first_plateau and not math.isnan(norms[name][i])),
                         default=None)
                if at is not None:
                    fractions.append(abs(norms[name][at] - events[name].start) / events[name].change)
        progress = max(fractions) if fractions else 0.0
    separated = (first_moves is not None and first_plateau is not None
                 and (second_moves is None or (first_moves < second_moves and first_plateau <= second_moves)))
    return TwoStage(first_moves, first_plateau, second_moves, progress, separated, events)
