"""Scan order: when, during training, each key token's attention peaks, against its co-occurrence.

Scan and Snap (Tian et al. 2023) predicts that, among the distinct tokens of a query, attention is
dropped "following the order of low to high co-occurrence": a token that co-occurs rarely with the
query gains attention at first (while the common tokens lose it), peaks early and then falls; the
more a token co-occurs, the later its peak; the most frequent ones rise until the snap. So the step
at which a token's attention peaks (or starts to fall) should rise with its co-occurrence.

``peak_steps``: for every token (column) of an attention trajectory ``a[t, token]`` recorded at
``steps[t]``, the first recorded step at which the attention comes within ``tolerance`` of the
token's whole range below its maximum, ``a_t >= max - tolerance * (max - min)``. ``tolerance = 0``
is the plain argmax (first one on ties); a small positive tolerance makes a token that rises to a
plateau (a frozen, snapped attention drifting by 1e-5 per step) peak where the plateau starts rather
than wherever the drift happens to top out. A token whose attention only falls peaks at the first step.

``scan_order``: the Spearman correlation, over tokens, between the peak steps and the tokens'
co-occurrence with the query (positive: low co-occurrence peaks first, as the paper predicts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from probes.core.errors import ConfigError, InputError
from probes.text.cooccurrence import kendall_tau_b, spearman


@dataclass(frozen=True)
class ScanOrder:
    """Peak step per token (``peak_steps``, in the order of the given columns), their co-occurrence and
    the rank correlations between the two (``nan`` when either is constant)."""

    peak_steps: tuple[int, ...]
    cooccurrence: tuple[float, ...]
    spearman: float
    kendall: float
    tolerance: float


def peak_steps(
    trajectory: Float[Tensor, "step token"], steps: Sequence[int] | None = None, *, tolerance: float = 0.05
) -> list[int]:
    """The recorded step at which each column of ``trajectory`` first comes within ``tolerance`` of its
    range below its maximum (module docstring). ``steps`` default ``0, 1, ...``.

    Example::

        peak_steps(torch.tensor([[0.2, 0.1], [0.3, 0.2], [0.1, 0.4]]))  # [1, 2]
    """
    trajectory = torch.as_tensor(trajectory)
    if trajectory.ndim != 2 or trajectory.shape[0] < 1 or trajectory.shape[1] < 1:
        raise InputError(f"trajectory must be [step, token] with at least one of each; got shape "
                         f"{tuple(trajectory.shape)}.")
    if not bool(torch.isfinite(trajectory).all()):
        raise InputError("trajectory must be finite.")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ConfigError(
            f"tolerance must be a number in [0, 1) (a fraction of each token's range); got {tolerance!r}.")
    step_numbers = list(range(trajectory.shape[0])) if steps is None else [int(s) for s in steps]
    if len(step_numbers) != trajectory.shape[0]:
        raise InputError(f"steps names {len(step_numbers)} steps but the trajectory has {trajectory.shape[0]}.")
    values = trajectory.double()
    top, bottom = values.max(0).values, values.min(0).values
    reached = values >= top - tolerance * (top - bottom)
    first = reached.to(torch.int8).argmax(0)  # argmax returns the first maximal index: the first True
    return [step_numbers[int(i)] for i in first]


def scan_order(
    trajectory: Float[Tensor, "step token"],
    cooccurrence: Float[Tensor, " token"],
    steps: Sequence[int] | None = None,
    *,
    tolerance: float = 0.05,
) -> ScanOrder:
    """Peak steps of every token and their rank correlation with ``cooccurrence`` (one value per column).

    Example::

        order = scan_order(attention_over_training[:, distinct], p_key_given_query[distinct], steps)
        order.spearman  # > 0: low co-occurrence peaks (and starts to fall) first
    """
    cooccurrence = torch.as_tensor(cooccurrence).double()
    shape = tuple(torch.as_tensor(trajectory).shape)
    if cooccurrence.ndim != 1 or len(cooccurrence) != shape[-1]:
        raise InputError(f"cooccurrence must hold one value per trajectory column; got shape "
                         f"{tuple(cooccurrence.shape)} for a trajectory of shape {shape}.")
    peaks = peak_steps(trajectory, steps, tolerance=tolerance)
    peak_tensor = torch.tensor(peaks, dtype=torch.float64)
    return ScanOrder(peak_steps=tuple(peaks), cooccurrence=tuple(cooccurrence.tolist()),
                     spearman=float(spearman(peak_tensor, cooccurrence)),
                     kendall=float(kendall_tau_b(peak_tensor, cooccurrence)), tolerance=float(tolerance))
