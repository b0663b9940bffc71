"""One curve at one checkpoint of a series: its value, interval, null and the per-batch sums behind them.

Example: ``mean_point(numerator, denominator, null_value=0.02, n_boot=1000, seed=0).ci``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from probes.stats.bootstrap import bootstrap_draws, percentile_interval
from probes.stats.nulls import permutation_p_value


@dataclass(frozen=True)
class CurvePoint:
    """One curve at one checkpoint: ``value`` with its bootstrap ``ci`` over the measuring batches, the
    ``null_value`` and one-sided ``p_value`` against it, the chosen ``head`` (head scores), and per-batch sums:
    ``value = sum(numerator) / sum(denominator) - sum(minus_numerator) / sum(minus_denominator)`` (divided
    instead of subtracted when ``divide``: a ratio of two means)."""

    value: float
    ci: tuple[float, float]
    null_value: float
    p_value: float
    numerator: tuple[float, ...]
    denominator: tuple[float, ...]
    minus_numerator: tuple[float, ...] | None = None
    minus_denominator: tuple[float, ...] | None = None
    head: tuple[int, int] | None = None
    divide: bool = False



def mean_point(numerator: Tensor, denominator: Tensor, *, null_value: float = math.nan, n_boot: int, seed: int,
               head: tuple[int, int] | None = None) -> CurvePoint:
    """``sum(numerator) / sum(denominator)`` over batches with its bootstrap CI and, given a ``null_value``, the
    one-sided p-value against it (the share of draws at or below it); NaN null and p for a descriptive curve."""
    units = {"s": numerator, "n": denominator}
    estimate, draws = bootstrap_draws(units, lambda s: s["s"] / s["n"], n_boot=n_boot, seed=seed)
    low, high = percentile_interval(draws)
    p_value = (math.nan if math.isnan(null_value)
               else float(permutation_p_value(torch.tensor(null_value), draws, alternative="less")))
    return CurvePoint(float(estimate), (float(low), float(high)), null_value, p_value,
                      tuple(numerator.tolist()), tuple(denominator.tolist()), head=head)
