"""Confidence sequences: intervals that stay valid however often they are looked at (anytime-valid).

A fixed-sample 95% interval covers the truth with probability 0.95 at one planned number of units. Checked again
after every round of further units, and stopped the first time it excludes a value, it errs far more often (the
running mean of noise crosses ``1.96 / sqrt(t)`` sooner or later). A *confidence sequence* ``C_1, C_2, ...`` covers
the truth at every ``t`` at once with probability ``1 - alpha``, so any stopping rule may be applied to it.

This module gives the asymptotic confidence sequence of Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas (2021,
"Time-uniform central limit theory and asymptotic confidence sequences", Theorem 2.2) with Robbins' two-sided
normal-mixture boundary: for the mean of ``t`` independent units with standard deviation ``sigma``,

    mean_t +- sigma * sqrt(2 (t rho^2 + 1) / (t^2 rho^2) * log(sqrt(t rho^2 + 1) / alpha)).

Why: for a Gaussian random walk ``S_t`` (unit steps) the mixture over ``lambda ~ N(0, rho^2)`` of
``exp(lambda S_t - lambda^2 t / 2)`` is ``exp(rho^2 S_t^2 / (2 (t rho^2 + 1))) / sqrt(t rho^2 + 1)``, a nonnegative
martingale of mean 1, so by Ville's inequality it exceeds ``1 / alpha`` at any ``t`` with probability at most
``alpha``; the radius is where it equals ``1 / alpha``. The central limit theorem's strong (time-uniform) version
carries that to any units with finite variance, ``sigma`` estimated from the units seen. ``rho`` sets where the
sequence is tightest: :func:`mixture_rho` tunes it for ``tuned_at`` units. It must be fixed before the units are
seen (a design choice, like the planned number of units), never re-tuned from data.

A finding's statistic is a smooth function of sums over units (a mean, a ratio of sums); its per-unit standard
deviation is read from its bootstrap interval (``sigma = se * sqrt(t)``, the delta method's linearisation), so
:func:`sequence_from_interval` gives every :class:`probes.stats.findings.Finding` its sequence.

Example: ``mean_sequence(units, alpha=0.05, tuned_at=100)`` gives the running mean and its sequence after every
unit; ``sequence_from_interval(0.30, (0.25, 0.35), 40, tuned_at=40)`` the sequence of a finding at 40 units.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from probes.core.errors import ConfigError
from probes.stats.power import standard_error

ALPHA = 0.05
"""The sequence's error rate over all looks: the same 95% as the fixed-sample intervals it sits beside."""

MIN_UNITS = 20
"""The fewest units at which a decision is read from a sequence. Its guarantee is asymptotic: the running standard
deviation of a few skewed units is too small just when their mean strays. Tuned at 200 units and looked at after
every unit up to 600: normal units and gamma units of shape 8 (skewness 0.71) exclude the truth at some look in 3.8%
and 3.6% of 2,000 sequences from unit 20 on (``tests/probes/stats/test_sequence_error_rate.py``); exponential units
(skewness 2) in 11.9% from unit 10 on and 8.2% from unit 20 on, more than ``alpha``."""


def _check(alpha: float, tuned_at: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha must lie in (0, 1); got {alpha!r}.")
    if not tuned_at >= 1:
        raise ConfigError(f"tuned_at (the number of units where the sequence is tightest) must be >= 1; got "
                          f"{tuned_at!r}.")


def mixture_rho(tuned_at: float, alpha: float = ALPHA) -> float:
    """The mixture's spread ``rho`` that makes the radius (per unit of ``sigma``) nearly smallest at ``tuned_at``
    units: ``sqrt((-2 log alpha + log(1 - 2 log alpha)) / tuned_at)`` (Waudby-Smith et al. 2021, eq. 2.8)."""
    _check(alpha, tuned_at)
    two_log = -2.0 * math.log(alpha)
    return math.sqrt((two_log + math.log(two_log + 1.0)) / tuned_at)


def mixture_radius(t: Tensor | float, sigma: Tensor | float, *, alpha: float = ALPHA, rho: float) -> Tensor:
    """Half-width of the two-sided normal-mixture confidence sequence after ``t`` units of standard deviation
    ``sigma`` (broadcast); infinite where ``t < 2`` (no spread to estimate from one unit)."""
    if not 0.0 < alpha < 1.0 or not rho > 0.0:
        raise ConfigError(f"alpha must lie in (0, 1) and rho be positive; got alpha={alpha!r}, rho={rho!r}.")
    t = torch.as_tensor(t, dtype=torch.float64)
    sigma = torch.as_tensor(sigma, dtype=torch.float64)
    grown = t * rho**2 + 1.0
    radius = sigma * torch.sqrt(2.0 * grown / (t**2 * rho**2) * torch.log(torch.sqrt(grown) / alpha))
    return torch.where(t >= 2, radius, torch.full_like(radius, float("inf")))


def mean_sequence(units: Float[Tensor, "... unit"], *, alpha: float = ALPHA, tuned_at: float
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """``(mean, low, high)`` after each unit along the last axis (every prefix at once): the running mean and its
    asymptotic confidence sequence, ``sigma`` the running standard deviation (divisor ``t - 1``)."""
    _check(alpha, tuned_at)
    units = units.double()
    t = torch.arange(1, units.shape[-1] + 1, dtype=torch.float64)
    mean = units.cumsum(-1) / t
    centred = units - units[..., :1]  # shifted sums keep the running variance accurate when the mean is large
    sq = (centred.cumsum(-1) ** 2) / t
    var = ((centred**2).cumsum(-1) - sq) / (t - 1).clamp_min(1.0)
    radius = mixture_radius(t, var.clamp_min(0.0).sqrt(), alpha=alpha, rho=mixture_rho(tuned_at, alpha))
    return mean, mean - radius, mean + radius


def sequence_from_interval(value: float, ci: tuple[float, float], n_units: int | None, *, tuned_at: float | None = None,
                           alpha: float = ALPHA, level: float = 0.95) -> tuple[float, float]:
    """The confidence sequence at ``n_units`` units of a statistic whose fixed-sample interval at ``level`` is
    ``ci``: ``sigma = se * sqrt(n_units)`` with ``se`` the interval's implied standard error, the sequence tuned
    at ``tuned_at`` units (default ``n_units``). NaN ends where a number is missing or ``n_units < 2``."""
    nan = (float("nan"), float("nan"))
    if n_units is None or n_units < 2 or not math.isfinite(value):
        return nan
    se = standard_error(ci, level)
    if not math.isfinite(se):
        return nan
    radius = float(mixture_radius(n_units, se * math.sqrt(n_units), alpha=alpha,
                                  rho=mixture_rho(n_units if tuned_at is None else tuned_at, alpha)))
    return value - radius, value + radius

