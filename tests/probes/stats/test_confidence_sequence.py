"""The normal-mixture confidence sequence (probes.stats.confidence_sequence) against slow references: the mixture
martingale integrated numerically equals 1 / alpha exactly at the closed-form radius, the running sequence
matches a loop over prefixes, and the tuned rho is the numerical optimum."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from probes.core.errors import ConfigError
from probes.stats.confidence_sequence import mean_sequence, mixture_radius, mixture_rho, sequence_from_interval
from probes.stats.findings import Finding


def _mixture_martingale(s: float, t: int, rho: float, grid: int = 40001) -> float:
    """The mean over lambda ~ N(0, rho^2) of exp(lambda s - lambda^2 t / 2), by the trapezoid rule."""
    lam = torch.linspace(-12 * rho, 12 * rho, grid, dtype=torch.float64)
    density = torch.exp(-0.5 * (lam / rho) ** 2) / (rho * math.sqrt(2 * math.pi))
    return float(torch.trapezoid(torch.exp(lam * s - lam**2 * t / 2) * density, lam))


@pytest.mark.parametrize(("t", "alpha", "rho"), [(5, 0.05, 0.5), (40, 0.05, 0.2), (300, 0.01, 0.1)])
def test_the_radius_is_where_the_mixture_martingale_reaches_one_over_alpha(t, alpha, rho):
    radius = float(mixture_radius(t, 1.0, alpha=alpha, rho=rho))
    # the walk's sum at the boundary is t * radius (unit steps); Ville: the martingale stays below 1 / alpha
    assert _mixture_martingale(t * radius, t, rho) == pytest.approx(1 / alpha, rel=1e-6)
    assert _mixture_martingale(0.9 * t * radius, t, rho) < 1 / alpha
    # sigma scales the radius; fewer than 2 units have no spread to read
    assert float(mixture_radius(t, 3.0, alpha=alpha, rho=rho)) == pytest.approx(3 * radius)
    assert math.isinf(float(mixture_radius(1, 1.0, alpha=alpha, rho=rho)))


@pytest.mark.parametrize(("tuned_at", "alpha"), [(10, 0.05), (400, 0.05), (50, 0.01)])
def test_the_tuned_rho_is_the_numerical_optimum_and_costs_what_it_should(tuned_at, alpha):
    grid = torch.logspace(-4, 1, 5001, dtype=torch.float64)
    best = min(float(mixture_radius(tuned_at, 1.0, alpha=alpha, rho=float(r))) for r in grid)
    tuned = float(mixture_radius(tuned_at, 1.0, alpha=alpha, rho=mixture_rho(tuned_at, alpha)))
    assert tuned == pytest.approx(best, rel=1e-3)
    # the price of looking at every unit, where tuned: 1.55 times the 95% fixed-sample half-width (1.39 at 99%)
    assert tuned * math.sqrt(tuned_at) / statistics.NormalDist().inv_cdf(1 - alpha / 2) == pytest.approx(
        {0.05: 1.5486, 0.01: 1.3866}[alpha], abs=1e-3)


def test_the_running_sequence_matches_a_loop_over_prefixes():
    generator = torch.Generator().manual_seed(3)
    units = 1e4 + torch.randn(2, 30, generator=generator, dtype=torch.float64)  # a large mean: the shifted sums
    mean, low, high = mean_sequence(units, alpha=0.05, tuned_at=20)
    rho = mixture_rho(20, 0.05)
    for row in range(2):
        for t in range(1, 31):
            prefix = units[row, :t].tolist()
            assert float(mean[row, t - 1]) == pytest.approx(statistics.fmean(prefix), rel=1e-12)
            if t < 2:
                assert math.isinf(float(high[row, t - 1]))
                continue
            radius = float(mixture_radius(t, statistics.stdev(prefix), alpha=0.05, rho=rho))
            assert float(high[row, t - 1] - mean[row, t - 1]) == pytest.approx(radius, rel=1e-6)
            assert float(mean[row, t - 1] - low[row, t - 1]) == pytest.approx(radius, rel=1e-6)


def test_a_findings_sequence_comes_from_its_interval():
    # se = 0.1 / 1.959964; sigma = se * sqrt(40)
    low, high = sequence_from_interval(0.3, (0.2, 0.4), 40)
    radius = float(mixture_radius(40, 0.1 / 1.959964 * math.sqrt(40), rho=mixture_rho(40)))
    assert (low, high) == pytest.approx((0.3 - radius, 0.3 + radius))
    assert high - low == pytest.approx(1.5486 * 0.2, rel=1e-3)  # tuned at its own units: 1.55 times the interval
    # ten times the units at the same spread per unit: narrower, and narrowest where it was tuned for them
    shrunk = (0.3 - 0.1 / math.sqrt(10), 0.3 + 0.1 / math.sqrt(10))
    at_400 = sequence_from_interval(0.3, shrunk, 400, tuned_at=40)[1] - 0.3
    assert sequence_from_interval(0.3, shrunk, 400)[1] - 0.3 < at_400 < radius
    for missing in (sequence_from_interval(0.3, (0.2, 0.4), None), sequence_from_interval(0.3, (0.2, 0.4), 1),
                    sequence_from_interval(0.3, (0.2, float("nan")), 40)):
        assert all(math.isnan(v) for v in missing)
    finding = Finding("x", 0.3, (0.2, 0.4), "null", 0.0, 0.001, 0.1, n_units=40)
    assert finding.confidence_sequence == pytest.approx((low, high))
    assert all(math.isnan(v) for v in Finding("x", 0.3, (0.2, 0.4), "null", 0.0, 0.001, 0.1).confidence_sequence)
    with pytest.raises(ConfigError, match="alpha"):
        mixture_rho(10, 1.5)
    with pytest.raises(ConfigError, match="tuned_at"):
        mean_sequence(torch.zeros(3), tuned_at=0)
