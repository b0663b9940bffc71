"""The design power of a finding (probes.stats.power): hand-computed cases and a simulation of the claim itself.

The claim: with ``units_for_power`` units, a 95% interval settles a value ``delta`` from the threshold with
probability 0.8, whichever side the value is on. The simulation draws units from a normal distribution, sizes the
design from a small pilot interval, and counts how often the sized design settles both kinds of value.
"""

from __future__ import annotations

import math

import pytest
import torch

from probes.core.errors import ConfigError
from probes.stats.bootstrap import bootstrap_interval
from probes.stats.findings import Finding
from probes.stats.power import detectable_distance, power_z, standard_error, units_for_power


def test_hand_computed_design():
    # se = 0.4 / (2 * 1.95996) = 0.10204; 2.80159 * 0.10204 / 0.1 = 2.8588; 6 * 2.8588^2 = 49.04 -> 50
    assert power_z() == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    assert standard_error((0.0, 0.4)) == pytest.approx(0.4 / (2 * 1.959964), rel=1e-6)
    assert units_for_power((0.0, 0.4), 6, 0.1) == 50
    assert detectable_distance((0.0, 0.4)) == pytest.approx(0.28588, abs=1e-4)
    # four times the units halve the interval: a design of 200 units settles half the distance
    assert units_for_power((0.0, 0.4), 6, 0.05) == math.ceil(6 * (2.801585 * 0.4 / (2 * 1.959964) / 0.05) ** 2)
    # nothing to size from: no units, no width, no distance
    assert units_for_power((0.0, 0.4), None, 0.1) is None
    assert units_for_power((0.2, 0.2), 6, 0.1) is None
    assert units_for_power((0.0, float("nan")), 6, 0.1) is None
    assert units_for_power((0.0, 0.4), 6, 0.0) is None
    with pytest.raises(ConfigError, match="power"):
        power_z(power=1.0)


def test_a_sized_design_settles_both_sides_with_the_planned_power():
    generator = torch.Generator().manual_seed(0)
    sigma, delta, threshold, trials = 1.0, 0.25, 0.0, 2000
    pilot = torch.randn(8, generator=generator) * sigma
    half = 1.959964 * float(pilot.std()) / math.sqrt(8)
    n = units_for_power((-half, half), 8, delta)
    assert n is not None and 60 < n < 250  # the exact answer with sigma known is 126; the pilot's sd varies
    exact = units_for_power((-1.959964 * sigma / math.sqrt(8), 1.959964 * sigma / math.sqrt(8)), 8, delta)
    assert exact == 126
    units = torch.randn(trials, exact, generator=generator, dtype=torch.float64) * sigma
    se = units.std(1) / math.sqrt(exact)
    for truth, settled in ((threshold - delta, lambda m: m + 1.959964 * se < threshold),
                           (threshold + delta, lambda m: m - 1.959964 * se > threshold)):
        rate = float(settled(units.mean(1) + truth).double().mean())
        assert rate == pytest.approx(0.8, abs=0.03), (truth, rate)
    # a design half the size settles markedly less often: the number is not just any large n
    small = units[:, : exact // 2]
    rate = float((small.mean(1) - delta + 1.959964 * small.std(1) / math.sqrt(exact // 2) < threshold).double().mean())
    assert rate < 0.6


def test_the_bootstrap_interval_a_finding_reports_sizes_the_same_design():
    generator = torch.Generator().manual_seed(1)
    values = torch.randn(40, generator=generator, dtype=torch.float64) + 0.3
    _, low, high = bootstrap_interval({"v": values, "n": torch.ones(40, dtype=torch.float64)},
                                      lambda s: s["v"] / s["n"], n_boot=4000, seed=0)
    n = units_for_power((float(low), float(high)), 40, 0.25)
    exact = math.ceil((2.801585 * float(values.std()) / 0.25) ** 2)
    assert n is not None and abs(n - exact) <= 0.2 * exact


def test_a_finding_reports_its_design_power():
    finding = Finding("x", 0.5, (0.3, 0.7), "null", 0.0, 0.001, 0.1, n_units=10)
    assert finding.units_for_power == units_for_power((0.3, 0.7), 10, 0.1)
    ratio = Finding("r", 2.0, (1.5, 2.5), "null", 1.0, 0.001, 1.1, "ratio", n_units=10).with_control(1.25, (1.2, 1.3))
    assert ratio.units_for_power == units_for_power((1.5, 2.5), 10, 1.25 * 0.1)  # the distance is reference * 0.1
    assert Finding("x", 0.5, (0.3, 0.7), "null", 0.0, 0.001, 0.1).units_for_power is None
