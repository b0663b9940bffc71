"""Must-show of issue 46: looked at after every round, a confidence sequence errs at most alpha of the time, a
fixed-sample 95% interval rechecked the same way far more often.

Units are drawn with a planted mean at the threshold (0) and at threshold +- delta; each of 2,000 replications is
looked at after every unit from ``MIN_UNITS`` to 600. An error is a verdict the truth contradicts: "holds" (the lower
end above the threshold) when the mean is at or below it, "absent" (the upper end below the threshold) when it is at
or above it. The fixed-sample interval here is the normal one, mean +- 1.96 sd / sqrt(t): the project's percentile
bootstrap (probes.stats.bootstrap) would cost 2,000 x 580 looks x 1,000 resamples per case, and on means of these
units it gives the same interval (checked below on a few looks).
"""

from __future__ import annotations

import pytest
import torch

from probes.stats.bootstrap import bootstrap_interval
from probes.stats.confidence_sequence import ALPHA, MIN_UNITS, mean_sequence

REPLICATIONS, UNITS, DELTA, TUNED_AT = 2000, 600, 0.03, 200


def _units(kind: str, mean: float, generator: torch.Generator, shape: tuple[int, ...]) -> torch.Tensor:
    """Units of standard deviation 1 and the given mean: normal, or gamma of shape 8 (skewness 0.71, like sums over a
    batch of long-tailed token scores)."""
    if kind == "normal":
        return mean + torch.randn(shape, generator=generator, dtype=torch.float64)
    shape_k = 8.0
    gamma = torch._standard_gamma(torch.full(shape, shape_k, dtype=torch.float64), generator=generator)
    return mean + (gamma - shape_k) / shape_k**0.5


def _running_fixed_interval(units: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.arange(1, units.shape[-1] + 1, dtype=torch.float64)
    mean = units.cumsum(-1) / t
    var = ((units**2).cumsum(-1) - t * mean**2) / (t - 1).clamp_min(1)
    half = 1.959964 * var.clamp_min(0).sqrt() / t.sqrt()
    return mean - half, mean + half


def _error_rate(low: torch.Tensor, high: torch.Tensor, truth: float) -> float:
    looks = slice(MIN_UNITS - 1, None)
    says_holds = (low[:, looks] > 0).any(-1)
    says_absent = (high[:, looks] < 0).any(-1)
    wrong = says_holds if truth < 0 else says_absent if truth > 0 else says_holds | says_absent
    return float(wrong.double().mean())


@pytest.mark.parametrize("kind", ["normal", "gamma"])
def test_looking_after_every_round_the_sequence_errs_at_most_alpha_and_the_fixed_interval_does_not(kind):
    generator = torch.Generator().manual_seed(46)
    rates = {}
    for truth in (-DELTA, 0.0, DELTA):
        units = _units(kind, truth, generator, (REPLICATIONS, UNITS))
        _, low, high = mean_sequence(units, alpha=ALPHA, tuned_at=TUNED_AT)
        rates[truth] = (_error_rate(low, high, truth), _error_rate(*_running_fixed_interval(units), truth))
    message = "; ".join(f"truth {truth:+.2f} (threshold 0): sequence {seq:.4f}, fixed interval {fixed:.4f}"
                        for truth, (seq, fixed) in rates.items())
    assert all(seq <= ALPHA for seq, _ in rates.values()), message
    assert all(fixed > ALPHA for _, fixed in rates.values()), message
    # the sequence does decide: planted two deltas away from zero at 600 units it settles most replications
    units = _units(kind, 0.25, generator, (REPLICATIONS, UNITS))
    _, low, _ = mean_sequence(units, alpha=ALPHA, tuned_at=TUNED_AT)
    assert float((low[:, -1] > 0).double().mean()) > 0.9, message


def test_the_normal_interval_stands_in_for_the_projects_bootstrap_on_means():
    generator = torch.Generator().manual_seed(7)
    units = _units("gamma", 0.0, generator, (5, 200))
    low, high = _running_fixed_interval(units)
    for row in range(5):
        for t in (40, 200):
            _, b_low, b_high = bootstrap_interval({"x": units[row, :t], "n": torch.ones(t, dtype=torch.float64)},
                                                  lambda s: s["x"] / s["n"], n_boot=2000, seed=row)
            assert float(b_high - b_low) == pytest.approx(float(high[row, t - 1] - low[row, t - 1]), rel=0.12)
